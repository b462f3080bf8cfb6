"""FuseOps: group the calls of a graph into fused primitive functions (TVM paper §3).

The rules, applied along dataflow edges whose producer has no other consumer:
- injective chains fuse (elementwise, broadcast and index-remapping ops);
- a reduction fuses its injective inputs;
- an out-elementwise-fusable op (conv2d, dense, ...) fuses the elementwise / broadcast ops that
  follow it (a reshape between 2-d rows and rows with leading 1s counts as elementwise, see
  _keeps_rows), so they run while its output tile is still in registers, and the elementwise
  / broadcast chains that feed those ops from the side (a residual add's rescaled shortcut);
- a row-wise anchor (softmax, log_softmax, layer_norm) also fuses the injective ops before it:
  its schedule inlines them into the row loop, so e.g. BERT's reshape + scale feeding softmax
  costs no kernel and no round trip through memory;
- a value whose readers all ended in one group joins it (a diamond, GELU's two branches);
- opaque ops never fuse.
Every group has one output node; a group becomes a Function marked {"Primitive": 1} called
from main. Scalar constants move into the function; other inputs become its parameters.
"""
from __future__ import annotations

from ..expr import Call, Constant, Function, Tuple, Var
from ..module import IRModule
from ..op import Op, OpPattern
from ..visitor import ExprMutator, post_order, users

MAX_GROUP_SIZE = 256

# OUT_ELEMWISE_FUSABLE ops whose schedules inline injective producers of their data input
# (kiln/topi/x86/softmax.py schedule_row_anchor); the others (conv2d, dense, ...) do not.
ROW_ANCHORS = frozenset({"nn.softmax", "nn.log_softmax", "nn.layer_norm"})


class _Group:
    __slots__ = ("nodes", "pattern", "root")

    def __init__(self, node, pattern):
        self.nodes = [node]
        self.pattern = pattern
        self.root = node          # the group's output node


def _pattern(node) -> OpPattern:
    if _keeps_rows(node):
        return OpPattern.ELEMWISE
    if isinstance(node, Call) and isinstance(node.op, Op):
        return node.op.pattern
    if isinstance(node, Tuple):
        return OpPattern.TUPLE
    return OpPattern.OPAQUE


def _can_fuse(producer: _Group, consumer_pattern: OpPattern, consumer=None) -> bool:
    p, c = producer.pattern, consumer_pattern
    if p == OpPattern.OPAQUE or c == OpPattern.OPAQUE:
        return False
    if p <= OpPattern.INJECTIVE and c <= OpPattern.INJECTIVE:
        return True
    if c == OpPattern.COMM_REDUCE and p <= OpPattern.INJECTIVE:
        return True
    if c == OpPattern.OUT_ELEMWISE_FUSABLE and p <= OpPattern.INJECTIVE \
            and isinstance(consumer, Call) and getattr(consumer.op, "name", None) in ROW_ANCHORS:
        return True
    if p == OpPattern.OUT_ELEMWISE_FUSABLE and c <= OpPattern.BROADCAST:
        return True
    if c == OpPattern.OUT_ELEMWISE_FUSABLE and p <= OpPattern.BROADCAST \
            and consumer is not None and _pattern(consumer) <= OpPattern.BROADCAST:
        # an elementwise side input of an anchor's epilogue (the rescaled shortcut of a
        # quantized residual add): computed in the epilogue, not written out and read back
        return True
    return False


def _keeps_rows(node) -> bool:
    """A reshape between 2-d rows and rows with leading 1s (a dense's rows put back into
    (1, tokens, units), or flattened for the next dense): it fuses as an elementwise op, the
    dense's epilogue computing through it element for element. Other reshapes keep their
    injective pattern: a batch matmul's and a convolution's schedules tile their own output's
    layout, and a row anchor (softmax) inlines the reshapes before it."""
    if not (isinstance(node, Call) and getattr(node.op, "name", None) == "reshape"):
        return False
    before, after = tuple(node.args[0].checked_type.shape), tuple(node.checked_type.shape)

    def rows(shape):
        k = 0
        while k < len(shape) - 1 and shape[k] == 1:
            k += 1
        return shape[k:]
    return before != after and rows(before) == rows(after) and min(len(before), len(after)) == 2


def _merged_pattern(producer: _Group, consumer_pattern: OpPattern) -> OpPattern:
    return max(producer.pattern, consumer_pattern)


def partition(func: Function) -> dict:
    """Node → group for every call in func (groups are shared _Group objects)."""
    uses = users(func.body)
    group_of: dict = {}
    for node in post_order(func.body):
        if not isinstance(node, Call) or not isinstance(node.op, Op):
            continue
        pattern = _pattern(node)
        group = _Group(node, pattern)
        group_of[node] = group
        for arg in dict.fromkeys(node.args):       # each distinct producer once
            source = arg
            if isinstance(arg, Tuple):
                # A tuple built only for this call (concatenate's input) joins the call's group
                # when its fields can; the Tuple node itself needs no kernel.
                if any(u is not node for u in uses.get(arg, [])):
                    continue
                for field in arg.fields:
                    _try_merge(field, node, group, group_of, uses, via=arg)
                continue
            _try_merge(source, node, group, group_of, uses)
    _merge_diamonds(func.body, group_of, uses)
    return group_of


def _merge_diamonds(body, group_of, uses):
    """A group whose output every reader of is in one other group joins that group: the two
    branches of a diamond (GELU's x * (1 + erf(x / √2)) after a dense) meet again inside it,
    so the value need not be written out and read back. The readers' group holds every path
    from it, so the merge makes no cycle."""
    for node in post_order(body):
        group = group_of.get(node)
        if group is None or group.root is not node:
            continue
        readers = uses.get(node, [])
        targets = {id(group_of.get(r)): group_of.get(r) for r in readers}
        if len(readers) < 2 or len(targets) != 1:
            continue
        (target,) = targets.values()
        if target is None or target is group \
                or len(group.nodes) + len(target.nodes) > MAX_GROUP_SIZE \
                or not _can_fuse(group, target.pattern):
            continue
        target.pattern = _merged_pattern(group, target.pattern)
        target.nodes = group.nodes + target.nodes
        for n in group.nodes:
            group_of[n] = target


def _try_merge(producer, consumer, group, group_of, uses, via=None):
    pgroup = group_of.get(producer)
    if pgroup is None or pgroup is group or pgroup.root is not producer:
        return
    consumers = {id(u) for u in uses.get(producer, [])}
    allowed = {id(consumer)} | ({id(via)} if via is not None else set())
    if not consumers <= allowed:
        return
    if len(pgroup.nodes) + len(group.nodes) > MAX_GROUP_SIZE:
        return
    if not _can_fuse(pgroup, group.pattern, consumer if group.root is consumer else None):
        return
    group.pattern = _merged_pattern(pgroup, group.pattern)
    group.nodes = pgroup.nodes + group.nodes
    for n in pgroup.nodes:
        group_of[n] = group


def _is_inlined_constant(e) -> bool:
    return isinstance(e, Constant) and e.data.size == 1


class _Fuser(ExprMutator):
    def __init__(self, group_of):
        super().__init__()
        self.group_of = group_of
        self.count = 0

    def rewrite_Call(self, call, op, args):
        group = self.group_of.get(call)
        if group is None or group.root is not call:
            return super().rewrite_Call(call, op, args)
        return self._fuse(group)

    def _fuse(self, group):
        members = {id(n) for n in group.nodes}
        params, outer_args, inner = [], [], {}

        def external(e):
            """The value of e inside the function: a parameter for values from outside."""
            if id(e) in inner:
                return inner[id(e)]
            if _is_inlined_constant(e):
                value = e
            elif isinstance(e, Tuple) and id(e) not in members:
                value = Tuple([external(f) for f in e.fields])
            else:
                value = Var(f"p{len(params)}", e.checked_type)
                params.append(value)
                outer_args.append(self.memo[e])
            inner[id(e)] = value
            return value

        for node in group.nodes:
            args = [external(a) for a in node.args]
            inner[id(node)] = Call(node.op, args, node.attrs, node.span, node.checked_type)
        body = inner[id(group.root)]
        name = "fused_" + "_".join(n.op.name.replace(".", "_") for n in group.nodes)
        if len(name) > 80:
            name = name[:72] + f"_{len(group.nodes)}ops"
        fn = Function(params, body, {"Primitive": 1, "Name": name})
        return Call(fn, outer_args, None, group.root.span)


def fuse_ops(mod: IRModule, fuse: bool = True) -> IRModule:
    """Fuse the calls of main into primitive functions; with fuse=False every call becomes its
    own primitive function (how the compiler handles opt_level 0).

    Example:
        >>> fused = fuse_ops(mod)   # doctest: +SKIP
    """
    func = mod["main"]
    group_of = partition(func) if fuse else {
        n: _Group(n, _pattern(n)) for n in post_order(func.body)
        if isinstance(n, Call) and isinstance(n.op, Op)}
    body = _Fuser(group_of).visit(func.body)
    return mod.with_function("main", Function(func.params, body, func.attrs, func.span))


def is_primitive(e) -> bool:
    return isinstance(e, Function) and e.attrs.get("Primitive") == 1



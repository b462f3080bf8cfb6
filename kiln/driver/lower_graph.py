"""Lowering fused primitive functions of the graph IR to loop programs.

Each call's operator contributes its compute (kiln.topi tensor expressions); the group's master
op — the one with the highest fusion pattern, e.g. the conv2d of conv2d+bias+relu — schedules
all of the group's outputs, inlining the injective stages around it.
"""
from __future__ import annotations

from .. import te
from ..graph.expr import Call, Constant, Function, Tuple, TupleGetItem, Var
from ..arith.size_bounds import declare_size_bounds
from ..graph.ops.transform import as_tuple
from ..graph.ty import TensorType, TupleType
from ..tir import expr as tx
from ..graph.visitor import post_order
from ..te.flop import float_flop
from ..tir.function import PrimFunc
from .lower import lower
from .symbolic_dims import size_vars


class GraphLoweringError(NotImplementedError):
    """An operator in the graph has no compute or no schedule for the target."""


def _flat_params(fn: Function, sizes):
    """Placeholders for the parameters; a tuple-typed parameter becomes one per field."""
    env, placeholders = {}, []
    for k, p in enumerate(fn.params):
        ty = sizes.type(p.checked_type)
        if isinstance(ty, TupleType):
            fields = [te.placeholder(t.shape, t.dtype, name=f"p{k}_{j}")
                      for j, t in enumerate(ty.fields)]
            placeholders += fields
            env[p] = fields
        else:
            env[p] = te.placeholder(ty.shape, ty.dtype, name=f"p{k}")
            placeholders.append(env[p])
    return env, placeholders


class _KernelSizes:
    """A kernel's sizes: a symbolic size of its parameters and results that is an expression
    over a variable the kernel sees in no dimension by itself (seq * 12, from a flattened
    dynamic dimension) becomes a size variable of its own, the same one wherever the
    expression occurs in the fused function: the runtime binds a variable only from a
    dimension that is the variable alone, and a kernel may see 12 * seq without seq."""

    def __init__(self, fn: Function, arguments: list):
        self.fresh: dict = {}
        # Only expressions at the kernel's boundary over a variable that is no boundary
        # dimension by itself: the others the runtime checks once their variables are bound
        # (FunctionInfo), and one that occurs inside alone (the sum of a flattened tensor) has
        # its variables bound by the boundary's shapes.
        dims = _boundary_dims(fn)
        plain = {d for d in dims if isinstance(d, tx.Var)}
        self.boundary = {d for d in dims if isinstance(d, tx.PrimExpr) and
                         not isinstance(d, (tx.Var, tx.IntImm)) and
                         any(v not in plain for v in size_vars(d))}
        # names not to reuse: the boundary's variables and the size arguments
        self.taken = {v.name for d in dims for v in size_vars(d)} | \
            {v.name for v in arguments}

    def dim(self, d):
        if isinstance(d, int) or d not in self.boundary:
            return d
        v = self.fresh.get(d)
        if v is None:
            k = len(self.fresh)
            while f"size{k}" in self.taken:
                k += 1
            self.taken.add(f"size{k}")
            v = self.fresh[d] = tx.SizeVar(f"size{k}", d.dtype)
            from ..arith import Analyzer
            b = Analyzer().const_int_bound(d)
            low = b.min_value if isinstance(b.min_value, int) else 0
            high = b.max_value if isinstance(b.max_value, int) else None
            declare_size_bounds(v, max(low, 0), high)
        return v

    def type(self, ty):
        if isinstance(ty, TupleType):
            return TupleType([self.type(t) for t in ty.fields])
        if isinstance(ty, TensorType) and not ty.is_static():
            return TensorType([self.dim(d) for d in ty.shape], ty.dtype)
        return ty


def _constant(c: Constant):
    value = c.data.reshape(-1)[0].item()
    dtype = c.checked_type.dtype
    return te.compute(c.checked_type.shape, lambda *i: te.const(value, dtype), name="const",
                      tag="elemwise")


def lower_primitive(fn: Function, name: str, target=None) -> PrimFunc:
    """The loop program of one fused function: inputs are its parameters (tuples flattened),
    outputs are its results.

    Example:
        >>> prim = lower_primitive(fused_fn, "fused_nn_conv2d_nn_relu")  # doctest: +SKIP
    """
    return lower_primitive_counted(fn, name, target)[0]


def lower_primitive_counted(fn: Function, name: str,
                            target=None) -> tuple[PrimFunc, int | None]:
    """lower_primitive's loop program and the fused function's floating-point operations per
    call (kiln.te.flop.float_flop of its computes; None where an extent is symbolic), which
    the execution graph records for the profiler.

    Example:
        >>> prim, flop = lower_primitive_counted(fused_fn, "fused_nn_dense")  # doctest: +SKIP
    """
    from ..target import as_target, current_target
    target = current_target() if target is None else as_target(target)
    with target:
        sch, args, outputs = schedule_primitive(fn, name, target)
    prim = lower(sch, args, name=name, target=target)
    checks = size_checks(fn)
    if checks:
        prim = PrimFunc(prim.name, prim.params, prim.body, prim.shape_vars,
                        prim.attrs + (("size_checks", tuple(checks)),))
    return prim, _float_flop_or_none(outputs)


def size_checks(fn: Function) -> list:
    """Size expressions that must be >= 0 for the fused function's slices over symbolic
    sizes to stay within their axes (begin, end - begin, axis - end, where not provable from
    the sizes' declared ranges): the runtime checks them before any call (FunctionInfo), so
    a slice at a past length beyond its table is an error, not a read out of bounds.

    Example:
        >>> [str(c) for c in size_checks(fused_fn)]          # doctest: +SKIP
        ['64 - (past + n)']
    """
    from ..arith import Analyzer
    ana = Analyzer()
    out = []
    for node in post_order(fn.body):
        if not isinstance(node, Call) or getattr(node.op, "name", None) != "strided_slice":
            continue
        a = node.attrs
        shape = node.args[0].checked_type.shape
        begin, end = as_tuple(a.begin), as_tuple(a.end)
        axes = as_tuple(a.axes) if a.axes is not None else tuple(range(len(begin)))
        for b, e, axis in zip(begin, end, axes):
            size = shape[axis % len(shape)]
            if all(isinstance(v, int) for v in (b, e, size)):
                continue               # static: clamped like a Python slice
            for c in (b, e - b, size - e):
                c = ana.simplify(c) if not isinstance(c, int) else c
                low = c if isinstance(c, int) else ana.const_int_bound(c).min_value
                if not (isinstance(low, int) and low >= 0) and all(c is not x for x in out):
                    out.append(c)
    return out


def _boundary_dims(fn: Function) -> list:
    """The dimensions of a fused function's parameters and results."""
    dims = []
    for ty in [p.checked_type for p in fn.params] + [fn.body.checked_type]:
        for t in (ty.fields if isinstance(ty, TupleType) else [ty]):
            if isinstance(t, TensorType):
                dims += t.shape
    return dims


def size_arguments(fn: Function) -> list:
    """The symbolic sizes a fused function uses (in its types or its calls' attributes: a
    slice at a past length) that no parameter or result has as a dimension by itself: the
    kernel takes them as integer arguments after its buffers, in this order, and the executor
    passes their values (the execution graph's "sizes" of the call).

    Example:
        >>> [v.name for v in size_arguments(fused_fn)]     # doctest: +SKIP
        ['past']
    """
    plain = {d for d in _boundary_dims(fn) if isinstance(d, tx.Var)}
    used: dict = {}

    def note(value):
        if isinstance(value, tuple):
            for v in value:
                note(v)
        elif isinstance(value, tx.PrimExpr):
            for v in size_vars(value):
                used.setdefault(v, None)

    for node in post_order(fn.body):
        ty = getattr(node, "checked_type", None)
        for t in (ty.fields if isinstance(ty, TupleType) else [ty]):
            if isinstance(t, TensorType):
                note(tuple(t.shape))
        if isinstance(node, Call):
            for value in node.attrs.values():
                note(value)
    return sorted((v for v in used if v not in plain), key=lambda v: v.name)


def compute_primitive(fn: Function, name: str):
    """The tensor expressions of a fused function: (arguments, outputs, master call), where
    the arguments are its parameters' placeholders (tuples flattened), then its outputs where
    they are not parameters, then its integer size arguments; the master call is the one whose
    operator schedules the kernel.

    Example:
        >>> args, outs, master = compute_primitive(fused_fn, "fused_nn_dense")  # doctest: +SKIP
    """
    arguments = size_arguments(fn)
    sizes = _KernelSizes(fn, arguments)
    env, placeholders = _flat_params(fn, sizes)
    master = None
    for node in post_order(fn.body):
        if node in env:
            continue
        if isinstance(node, Var):
            raise GraphLoweringError(f"free variable {node.name_hint} in fused function {name}")
        if isinstance(node, Constant):
            env[node] = _constant(node)
        elif isinstance(node, Tuple):
            env[node] = [t for f in node.fields for t in _as_list(env[f])]
        elif isinstance(node, TupleGetItem):
            env[node] = env[node.tuple_value][node.index]
        elif isinstance(node, Call):
            op = node.op
            if op.compute is None:
                raise GraphLoweringError(f"operator {op.name} has no compute"
                                         f"{' (at ' + node.span + ')' if node.span else ''}")
            inputs = [t for a in node.args for t in _as_list(env[a])]
            outs = op.compute(node.attrs, inputs, sizes.type(node.checked_type))
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            env[node] = outs if isinstance(node.checked_type, TupleType) else outs[0]
            if master is None or op.pattern >= master.op.pattern:
                master = node
    outputs = _as_list(env[fn.body])
    if master is None:
        raise GraphLoweringError(f"fused function {name} contains no operator call")
    seen, args = set(), []
    for t in placeholders + outputs:
        if t not in seen:        # an output may be an input passed through
            seen.add(t)
            args.append(t)
    return args + arguments, outputs, master


def schedule_primitive(fn: Function, name: str, target=None):
    """The schedule of a fused function before lowering: (schedule, arguments, outputs), as
    lower_primitive lowers it: an auto-scheduled program when the dispatch context holds one
    for the kernel (kiln.auto_schedule), else the schedule its master operator registers.

    Example:
        >>> sch, args, outs = schedule_primitive(fused_fn, "fused_nn_dense")  # doctest: +SKIP
    """
    from ..auto_schedule.dispatch import auto_scheduled
    from ..target import as_target, current_target
    args, outputs, master = compute_primitive(fn, name)
    target = current_target() if target is None else as_target(target)
    # The registered schedule is built (its templates asked) even when a program replaces
    # it: the questions a kernel asks must not depend on the answers, since kiln's kernel
    # cache replays a kernel's recorded questions to key it.
    sch = registered_schedule(master, outputs, target)
    return auto_scheduled(fn, args, outputs, target) or sch, args, outputs


def registered_schedule(master: Call, outputs, target):
    """The schedule that the master call's operator registers for `target`, of `outputs`.

    Example:
        >>> sch = registered_schedule(master, outs, Target("llvm"))   # doctest: +SKIP
    """
    schedule_fn = schedule_for(master.op, target)
    if schedule_fn is None:
        raise GraphLoweringError(f"operator {master.op.name} has no schedule for target "
                                 f"{target} (keys {', '.join(target.keys)}); it has schedules "
                                 f"for: {', '.join(master.op.schedules) or 'none'}")
    return schedule_fn(master.attrs, outputs)


def schedule_for(op, target):
    """The schedule hook of `op` for `target`: the one registered under the target's most
    specific key (a "gpu" schedule serves cuda and opencl until one of them has its own),
    else the default schedule of a key (kiln.graph.op.DEFAULT_SCHEDULES).

    Example:
        >>> schedule_for(get_op("nn.dense"), Target("opencl"))   # doctest: +SKIP
        <function ... schedule_dense (gpu)>
    """
    from ..graph.op import DEFAULT_SCHEDULES
    for key in target.keys:
        fn = op.schedules.get(key)
        if fn is not None:
            return fn
    for key in target.keys:
        fn = DEFAULT_SCHEDULES.get(key)
        if fn is not None:
            return fn
    return None


def _float_flop_or_none(outputs):
    try:
        return float_flop(outputs)
    except ValueError:      # a symbolic extent: no fixed count, the profile shows none
        return None


def _as_list(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]

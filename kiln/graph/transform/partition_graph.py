"""PartitionGraph: each compiler region becomes a function of the module that an external code
generator compiles ("bring your own codegen", the step after annotate and merge).

The region k (counting from 0 per compiler, in topological order) of compiler T in function F
becomes the global function @T_F_k (e.g. @dnnl_main_0) with attrs
{"Compiler": T, "global_symbol": "T_F_k", "Primitive": 1}; F calls it through a GlobalVar:

    def @main(%x) {                                def @dnnl_main_0(%dnnl_main_0_i0) {
      %0 = @dnnl_main_0(%x)                          %0 = nn.conv2d(%dnnl_main_0_i0, meta[..])
      %1 = nn.softmax(%0)                            nn.bias_add(%0, meta[..])
    }                                              }

Its parameters, named T_F_k_i0, T_F_k_i1, ..., are the distinct values entering the region.
Constants entering it are bound inside by default; with bind_constants=False, or a callable
bind_constants(T) -> False for that compiler, they are parameters like the rest and F passes
them. A region with several outputs returns a Tuple of them (in the order of the graph) and F
takes TupleGetItems of the call. The annotations are gone afterwards; `check_no_annotations`
is the compile driver's guard against a module that still holds any. Composites (see
merge_composite) that no region took are put back in place as the ops they group.

Example:
    >>> mod = merge_compiler_regions(annotate_target(mod, "dnnl"))   # doctest: +SKIP
    >>> mod = partition_graph(mod)                                   # doctest: +SKIP
"""
from __future__ import annotations

from ..expr import Call, Constant, Function, GlobalVar, Tuple, TupleGetItem, Var
from ..module import IRModule
from ..ops.annotation import BEGIN, END, is_annotation
from ..visitor import ExprMutator, post_order
from .compiler_regions import Region, RegionError, describe, find_regions, inputs
from .pass_infra import ModulePass


class PartitionError(RegionError):
    """A module whose annotations cannot be partitioned, or that still holds annotations where
    none may be left."""


def check_no_annotations(mod) -> None:
    """Raise PartitionError naming the function and the value if mod (an IRModule or a
    Function) still holds a compiler_begin / compiler_end: they only mark regions for
    partition_graph, and nothing can compile them.

    Example:
        >>> check_no_annotations(annotate_target(mod, "dnnl"))   # doctest: +SKIP
        PartitionError: @main still holds annotation.compiler_begin(compiler="dnnl") of %x ...
    """
    functions = mod.items() if isinstance(mod, IRModule) else [("main", mod)]
    for name, func in functions:
        for n in post_order(func):
            if is_annotation(n):
                raise PartitionError(
                    f'@{name} still holds {n.op.name}(compiler="{n.attrs.compiler}") of '
                    f"{describe(n.args[0])}: compiler annotations only mark regions; run "
                    f"kiln.graph.transform.partition_graph (after annotate_target and "
                    f"merge_compiler_regions) before compiling")


def _binds(bind_constants, compiler: str) -> bool:
    return bool(bind_constants(compiler) if callable(bind_constants) else bind_constants)


class _Partitioner:
    """One function's partition: `new[node]` is the node's value in the rewritten function."""

    def __init__(self, fname: str, mod_names, bind_constants):
        self.fname = fname
        self.taken = set(mod_names)
        self.bind_constants = bind_constants
        self.count: dict = {}        # compiler -> regions made so far
        self.new: dict = {}
        self.outputs: dict = {}      # compiler_end -> its value outside the region
        self.functions: dict = {}    # name -> Function

    def run(self, func: Function) -> Function:
        regions, self.region_of = find_regions(func.body)
        if not regions:
            for n in post_order(func.body, enter_functions=False):
                if is_annotation(n, BEGIN):
                    self.value(n)           # raises: a begin with no end after it
            return func
        for item in self._order(func.body):
            if isinstance(item, Region):
                self._extract(item)
            else:
                self.new[item] = self._rebuild(item)
        return Function(func.params, self.value(func.body), func.attrs, func.span)

    # -- the order: nodes outside regions and whole regions, each after what it uses ---------
    def _unit(self, e):
        return self.region_of.get(e, e)

    def _deps(self, item) -> list:
        if isinstance(item, Region):
            return [self._unit(b.args[0]) for b in item.begins]
        if isinstance(item, Function):
            return []
        return [self._unit(a) for a in inputs(item)]

    def _order(self, root) -> list:
        """Post order of the graph of units; a region met again while its inputs are being
        ordered means the regions form a cycle."""
        order, done, active = [], set(), set()
        stack = [(self._unit(root), False)]
        while stack:
            item, expanded = stack.pop()
            if expanded:
                active.discard(item)
                done.add(item)
                order.append(item)
                continue
            if item in done:
                continue
            if item in active:
                raise PartitionError(f"@{self.fname}: compiler regions depend on each other in "
                                     f"a cycle (through {describe(_first(item))}); run "
                                     f"merge_compiler_regions, which never makes one, or fix "
                                     f"the annotations")
            active.add(item)
            stack.append((item, True))
            for d in reversed(self._deps(item)):
                if d not in done:
                    stack.append((d, False))
        return order

    # -- rewriting ---------------------------------------------------------------------------
    def value(self, e):
        """e's value outside the regions: a region's output, or e rewritten."""
        if isinstance(e, (Var, Constant, Function)):
            return e
        region = self.region_of.get(e)
        if region is not None:
            if not is_annotation(e, END):
                raise PartitionError(f"@{self.fname}: {describe(e)} of a region of "
                                     f"{region.compiler!r} is used outside it without a "
                                     f"compiler_end")
            return self.outputs[e]
        if is_annotation(e, BEGIN):
            raise PartitionError(f"@{self.fname}: compiler_begin(compiler="
                                 f"{e.attrs.compiler!r}) of {describe(e.args[0])} is not "
                                 f"closed by a compiler_end")
        return self.new[e]

    def _rebuild(self, n):
        return _with_inputs(n, [self.value(a) for a in inputs(n)])

    def _name(self, compiler: str) -> str:
        k = self.count.get(compiler, 0)
        while f"{compiler}_{self.fname}_{k}" in self.taken:
            k += 1
        self.count[compiler] = k + 1
        name = f"{compiler}_{self.fname}_{k}"
        self.taken.add(name)
        return name

    def _extract(self, region: Region):
        name = self._name(region.compiler)
        bind = _binds(self.bind_constants, region.compiler)
        params, args, inner = [], [], {}
        for b in region.begins:
            outside = b.args[0]
            if outside in inner:
                inner[b] = inner[outside]
                continue
            if isinstance(outside, Constant) and bind:
                inner[outside] = outside
            else:
                inner[outside] = Var(f"{name}_i{len(params)}", outside.checked_type)
                params.append(inner[outside])
                args.append(self.value(outside))
            inner[b] = inner[outside]

        def inside(e):
            return e if isinstance(e, (Constant, Function)) else inner[e]

        for n in region.nodes:
            inner[n] = _with_inputs(n, [inside(a) for a in inputs(n)])
        outs, index = [], {}
        for end in region.ends:        # two ends of one value are one output
            value = inside(end.args[0])
            index.setdefault(value, len(outs))
            if index[value] == len(outs):
                outs.append(value)
        body = outs[0] if len(outs) == 1 else Tuple(outs)
        fn = Function(params, body, {"Compiler": region.compiler, "global_symbol": name,
                                     "Primitive": 1})
        self.functions[name] = fn
        result = Call(GlobalVar(name, fn.checked_type), args)
        per_output = [result] if len(outs) == 1 else \
            [TupleGetItem(result, k) for k in range(len(outs))]
        for end in region.ends:
            self.outputs[end] = per_output[index[inside(end.args[0])]]


def _first(item):
    return item.ends[0] if isinstance(item, Region) else item


def _with_inputs(n, new_inputs):
    """n rebuilt on new inputs (itself when they are the same)."""
    if all(a is b for a, b in zip(new_inputs, inputs(n))):
        return n
    if isinstance(n, Call):
        return Call(n.op, new_inputs, n.attrs, n.span)
    if isinstance(n, Tuple):
        return Tuple(new_inputs, n.span)
    if isinstance(n, TupleGetItem):
        (value,) = new_inputs
        if isinstance(value, Tuple):
            return value.fields[n.index]
        return TupleGetItem(value, n.index, n.span)
    raise PartitionError(f"partition_graph cannot rebuild a {type(n).__name__} (Let and If "
                         f"are not partitioned)")


class _InlineComposites(ExprMutator):
    enter_functions = False

    def rewrite_Call(self, call, op, args):
        fn = call.op
        if isinstance(fn, Function) and fn.attrs.get("Composite"):
            inline = ExprMutator()
            inline.memo.update(zip(fn.params, args))
            return inline.visit(fn.body)
        return super().rewrite_Call(call, op, args)


def _inline_composites(func: Function) -> Function:
    """func with the composites no region took put back as the ops they group: kiln compiles
    those itself (a composite is a primitive function, which kiln's fusion and layout passes
    would take for one of its own kernels)."""
    if not any(isinstance(n, Call) and isinstance(n.op, Function) and n.op.attrs.get("Composite")
               for n in post_order(func.body, enter_functions=False)):
        return func
    return Function(func.params, _InlineComposites().visit(func.body), func.attrs, func.span)


def partition_graph(mod, bind_constants=True) -> IRModule:
    """Turn every compiler region of mod (an IRModule, or a Function taken as its main) into
    an external function of the module called through a GlobalVar; see the module docstring.
    bind_constants: True (constants bound inside), False (passed as arguments) or a callable
    compiler -> bool deciding per compiler.

    Example:
        >>> mod = merge_compiler_regions(annotate_target(mod, "dnnl"))   # doctest: +SKIP
        >>> print(partition_graph(mod))   # def @main ...; def @dnnl_main_0 ...  # doctest: +SKIP
    """
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    if not isinstance(mod, IRModule):
        raise TypeError(f"partition_graph takes an IRModule or a Function, got "
                        f"{type(mod).__name__}")
    return PartitionGraph(bind_constants)(mod)


def _partition_module(mod: IRModule, bind_constants) -> IRModule:
    out, extracted, changed = IRModule(), {}, False
    for fname, func in mod.items():
        if func.attrs.get("Primitive") or func.attrs.get("Compiler"):
            out[fname] = func
            continue
        p = _Partitioner(fname, list(mod) + list(extracted), bind_constants)
        new = _inline_composites(p.run(func))
        out[fname] = new
        extracted.update(p.functions)
        changed = changed or new is not func
    for name, fn in extracted.items():
        out[name] = fn
    return out if changed else mod


def PartitionGraph(bind_constants=True):
    """The PartitionGraph module pass (opt_level 0); see partition_graph.

    Example:
        >>> mod = Sequential([AnnotateTarget("dnnl"), MergeCompilerRegions(),
        ...                   PartitionGraph()])(mod)   # doctest: +SKIP
    """
    if not (isinstance(bind_constants, bool) or callable(bind_constants)):
        raise TypeError(f"bind_constants must be a bool or a callable compiler -> bool, got "
                        f"{bind_constants!r}")
    return ModulePass(lambda mod: _partition_module(mod, bind_constants), opt_level=0,
                      name="PartitionGraph")

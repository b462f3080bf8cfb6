"""from_pytorch: an nn.Module (or a torch.export ExportedProgram) to kiln's graph IR.

The model is traced with torch.export, decomposed only as far as needed (ATen ops kiln
translates directly, such as linear or layer_norm, are kept whole, so the graph shows
nn.dense rather than transpose + matmul), then walked node by node. Weights and buffers become
parameters of main, named as in the state_dict; their values come back in `params`.
"""
from __future__ import annotations

from ...timings import phase

import operator

import numpy as np
import torch
from torch.export.graph_signature import InputKind, OutputKind

from ...graph import (Expr, Function, IRModule, TensorType, Tuple, call, const, post_order,
                      var)
from ...tir.expr import SymbolicBoolError
from ...tir.op import IRError
from ...graph import Var as GraphVar
from ..common import FrontendError, UniqueNamer, UnsupportedOpsError
from . import (ops_create, ops_elemwise, ops_index, ops_math, ops_nn,  # noqa: F401 (registers)
               ops_quantized, ops_reduce, ops_shape)
from .registry import CONVERTERS, Node, Unsupported, kiln_dtype, lookup, static_shape, target_name
from .symbols import SymbolTable, active, torch_dim
from .training import RandomInputs, TrainingImport

__all__ = ["from_pytorch", "export_program", "import_for_training"]

# Ops with no value at inference: runtime checks torch.export leaves in the graph.
_IGNORED = {"aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
            "aten.sym_constrain_range.default", "aten.sym_constrain_range_for_size.default",
            "aten._assert_async.msg", "aten._assert_async.default"}

_MISSING = object()   # the value of a node that could not be converted


def from_pytorch(model, example_inputs=None, input_names=None, dynamic_shapes=None):
    """Import a PyTorch model into kiln's graph IR.

    `model` is an nn.Module in eval mode (traced with torch.export on `example_inputs`, a tensor
    or a tuple of them) or an ExportedProgram. `input_names` renames the model's inputs (by
    default the forward() argument names). Returns (IRModule, params): main takes the inputs
    first, then one parameter per weight/buffer named as in the state_dict, whose values are
    `params[name]` (numpy arrays). float64 models stay float64.

    `dynamic_shapes` (torch.export's: per input, {axis: torch.export.Dim(name, min=, max=)})
    exports those dimensions as symbolic: main's types name them and its "dim_ranges" attr
    holds their ranges, so kiln.compile makes one library for every size in the ranges. An
    ExportedProgram exported with dynamic shapes imports the same way (its sizes named after
    torch's symbols, s0 ..., unless the `dynamic_shapes` it was exported with are given too).

    Every op the importer cannot translate is reported in one UnsupportedOpsError.

    Example:
        >>> mod, params = from_pytorch(resnet18().eval(), (torch.randn(1, 3, 224, 224),))
        ... # doctest: +SKIP
        >>> lib = kiln.compile(mod, target="llvm", params=params)   # doctest: +SKIP
    """
    with phase("frontend.torch_export"):
        program = export_program(model, example_inputs, dynamic_shapes=dynamic_shapes)
    with phase("frontend.pytorch"):
        mod, params, _ = _Importer(program, input_names,
                                   symbol_names=_dim_names(program, dynamic_shapes)).run()
    return mod, params


def _dim_names(program, dynamic_shapes) -> dict:
    """{torch symbol: Dim name} for the dimensions `dynamic_shapes` made dynamic."""
    if not dynamic_shapes:
        return {}
    specs = {s.arg.name: s for s in program.graph_signature.input_specs
             if hasattr(s.arg, "name")}
    users = [n for n in program.graph.nodes if n.op == "placeholder"
             and specs[n.name].kind == InputKind.USER_INPUT]
    if isinstance(dynamic_shapes, dict):
        per_input = [dynamic_shapes.get(specs[n.name].arg.name, dynamic_shapes.get(n.target))
                     for n in users]
    else:
        per_input = _flat_specs(dynamic_shapes)      # (*args come as one nested tuple)
        per_input += [None] * max(0, len(users) - len(per_input))
    names = {}
    for node, axes in zip(users, per_input):
        val = node.meta.get("val")
        if not isinstance(axes, dict) or not isinstance(val, torch.Tensor):
            continue
        for axis, dim in axes.items():
            d = val.shape[axis]
            name = getattr(dim, "__name__", None)
            if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol and name:
                names[str(d.node.expr)] = name
    return names


def import_for_training(model, example_inputs, input_names=None) -> TrainingImport:
    """Import `model`'s computation in its current mode, training mode included: dropout masks
    become parameters of main and batch norm's new running statistics its extra outputs (see
    kiln.frontend.pytorch.training).

    Example:
        >>> imported = import_for_training(model.train(), (x,))      # doctest: +SKIP
        >>> [m.p for m in imported.masks], imported.mutations       # doctest: +SKIP
        ([0.1], ('bn.running_mean', 'bn.running_var', 'bn.num_batches_tracked'))
    """
    with phase("frontend.torch_export"):
        program = export_program(model, example_inputs, training=True)
    with phase("frontend.pytorch"):
        importer = _Importer(program, input_names, training=True)
        mod, params, mutations = importer.run()
    return TrainingImport(mod, params, tuple(importer.random.masks), mutations,
                          importer.num_outputs)


def export_program(model, example_inputs=None, training=False, dynamic_shapes=None):
    """The model as an ExportedProgram decomposed to ATen ops kiln translates; a module in
    training mode only with `training` (its dropout and batch norm differ from inference).

    Example:
        >>> ep = export_program(torch.nn.ReLU().eval(), (torch.randn(2),))   # doctest: +SKIP
    """
    if isinstance(model, torch.export.ExportedProgram):
        program = model
    elif isinstance(model, torch.nn.Module):
        if model.training and not training:
            raise FrontendError(f"{type(model).__name__} is in training mode; call model.eval() "
                                f"before importing (dropout and batch norm differ)")
        if example_inputs is None:
            raise FrontendError("from_pytorch needs example_inputs to trace an nn.Module")
        if isinstance(example_inputs, torch.Tensor):
            example_inputs = (example_inputs,)
        try:
            program = torch.export.export(model, tuple(example_inputs),
                                          dynamic_shapes=dynamic_shapes)
        except Exception as err:   # torch raises many kinds; say which stage failed
            raise FrontendError(f"torch.export could not trace {type(model).__name__}: "
                                f"{type(err).__name__}: {err}") from err
    else:
        raise FrontendError(f"from_pytorch takes an nn.Module or an ExportedProgram, got "
                            f"{type(model).__name__}")
    if not _needs_decomposition(program, training):
        return program
    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        if target_name(op) in CONVERTERS:
            table.pop(op)
    try:
        return program.run_decompositions(table)
    except Exception as err:   # an op torch itself cannot decompose or functionalize
        raise FrontendError(f"torch could not decompose the exported program to ATen ops: "
                            f"{type(err).__name__}: {err}") from err


def _needs_decomposition(program, training=False) -> bool:
    """Whether the graph has an op kiln cannot translate as it stands, or an in-place op that
    only functionalization can remove (in training mode, batch norm's update of its running
    statistics). Decomposing costs 0.1 s for a tiny graph and seconds for a ResNet, so a graph
    kiln can read directly is read directly."""
    return any(node.op == "call_function" and node.target is not operator.getitem
               and (not translates(node) or training and _updates_statistics(node))
               for node in program.graph.nodes)


def _updates_statistics(node) -> bool:
    return (node.target is torch.ops.aten.batch_norm.default and len(node.args) > 5
            and node.args[5] and node.args[3] is not None)


def translates(node) -> bool:
    """Whether the importer translates the call_function `node` as it stands: an ATen op with
    a converter (or one the importer ignores), or an in-place op with a functional twin.

    Example:
        >>> translates(relu_node)   # doctest: +SKIP
        True
    """
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target._schema.is_mutable:
        return functional_twin(node) is not None
    name = target_name(target)
    return name in CONVERTERS or name in _IGNORED


def functional_twin(node):
    """For an in-place op (relu_, hardtanh_) whose mutated input is an intermediate value
    nobody else reads, the name of the functional op it equals; otherwise None.

    Example:
        >>> functional_twin(relu_node)   # `x = relu_(conv(x))`  # doctest: +SKIP
        'aten.relu.default'
    """
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return None
    schema = target._schema
    writes = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    packet, overload = target.name().split("::")[-1], target._overloadname
    if not packet.endswith("_") or len(writes) != 1 or writes[0] is not schema.arguments[0]:
        return None
    twin = f"aten.{packet[:-1]}.{overload}"
    first = node.args[0] if node.args else None
    if twin not in CONVERTERS or not isinstance(first, torch.fx.Node) \
            or first.op != "call_function" or len(first.users) != 1 or _aliases(first):
        return None
    return twin


def _aliases(node) -> bool:
    """Whether a node's output may share memory with another value (a view, or the result
    of an in-place op): mutating it would then change that value too."""
    if node.target is operator.getitem:
        return False
    if not isinstance(node.target, torch._ops.OpOverload):
        return True
    return any(r.alias_info is not None for r in node.target._schema.returns)


def _span(fx_node) -> str:
    stack = fx_node.meta.get("nn_module_stack")
    if stack:
        path = list(stack.values())[-1][0]
        path = path.removeprefix("L['self'].").removeprefix("L['self']")
        if path:
            return f"{fx_node.name} ({path})"
    return fx_node.name


class _NotEmpty(Exception):
    """An operand with elements: the node is not folded."""


def _np_dtype(t: torch.Tensor):
    return np.dtype(np.bool_ if t.dtype == torch.bool else kiln_dtype(t.dtype))


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    # np.array rather than ascontiguousarray, which turns 0-d arrays into 1-d ones
    return np.array(t.detach().cpu().resolve_conj().numpy(), order="C", copy=True)


class _Importer:
    def __init__(self, program, input_names, training=False, symbol_names=None):
        self.program = program
        self.training = training
        self.input_names = None if input_names is None else list(input_names)
        self.env: dict = {}
        self.unsupported: list = []
        self.namer = UniqueNamer()
        self.user_vars: list = []
        self.weight_vars: list = []
        self.params: dict = {}
        self.random = RandomInputs(self.namer) if training else None
        self.mutations: list = []      # (main parameter name, new value) in training mode
        self.num_outputs = 0
        self.symbols = SymbolTable(program, symbol_names or {})

    # --- inputs -----------------------------------------------------------------------------
    def _placeholders(self):
        specs = {s.arg.name: s for s in self.program.graph_signature.input_specs
                 if hasattr(s.arg, "name")}
        nodes = [n for n in self.program.graph.nodes if n.op == "placeholder"]
        user = [n for n in nodes if specs[n.name].kind == InputKind.USER_INPUT]
        names = self.input_names
        user_tensors = [n for n in user if isinstance(n.meta.get("val"), torch.Tensor)]
        if names is not None and len(names) != len(user_tensors):
            raise FrontendError(f"input_names has {len(names)} names but the model takes "
                                f"{len(user_tensors)} tensor inputs "
                                f"({', '.join(n.name for n in user_tensors)})")
        k = 0
        for n in user:
            val = n.meta.get("val")
            if not isinstance(val, torch.Tensor):
                # torch.export specializes non-tensor inputs to their example value.
                self.env[n] = val
                continue
            name = self.namer(names[k] if names is not None else n.target)
            k += 1
            v = var(name, static_shape(val.shape, n.name), self._dtype(val.dtype, n.name))
            self.user_vars.append(v)
            self.env[n] = v
        # a training-mode output that mutates an input names it by its spec's target
        self._mutated = {specs[n.name].target or n.name: self.env[n] for n in user
                         if isinstance(self.env.get(n), GraphVar)}
        for n in nodes:
            spec = specs[n.name]
            if spec.kind == InputKind.USER_INPUT:
                continue
            if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER,
                                 InputKind.CONSTANT_TENSOR):
                raise FrontendError(f"input {n.name} of kind {spec.kind.name} is not supported")
            if not n.users:
                continue
            self.env[n] = self._weight(spec.target, self._value_of(spec), n.name)
            self._mutated[spec.target] = self.env[n]

    def _value_of(self, spec):
        target = spec.target
        if target in self.program.state_dict:
            return self.program.state_dict[target]
        if target in self.program.constants:
            return self.program.constants[target]
        raise FrontendError(f"no value for {spec.kind.name.lower()} {target!r}")

    def _weight(self, fqn, tensor, where):
        if not isinstance(tensor, torch.Tensor):
            raise FrontendError(f"{where}: constant {fqn!r} of type {type(tensor).__name__}")
        dtype = self._dtype(tensor.dtype, where)
        array = _to_numpy(tensor)
        if dtype == "bool":
            array = array.astype(np.bool_)
        v = var(self.namer(fqn), array.shape, dtype)
        self.weight_vars.append(v)
        self.params[v.name_hint] = array
        return v

    @staticmethod
    def _dtype(dtype, where):
        try:
            return kiln_dtype(dtype)
        except Unsupported:
            raise FrontendError(f"{where}: dtype {dtype} is not supported by kiln") from None

    # --- nodes ------------------------------------------------------------------------------
    def _value(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._value(x) for x in a)
        if isinstance(a, dict):
            return {k: self._value(x) for k, x in a.items()}
        return a

    @staticmethod
    def _has_missing(v):
        if v is _MISSING:
            return True
        if isinstance(v, (list, tuple)):
            return any(_Importer._has_missing(x) for x in v)
        if isinstance(v, dict):
            return any(_Importer._has_missing(x) for x in v.values())
        return False

    def _call(self, fx_node):
        target = fx_node.target
        name = target_name(target)
        val = fx_node.meta.get("val")
        if name in _IGNORED:
            return None
        if target is operator.getitem:
            return self._getitem(fx_node)
        if isinstance(val, torch.SymInt) and not val.node.is_constant():
            # Size arithmetic (sym_size, operator.mul, ...) over dynamic dimensions: its value
            # as torch recorded it, a kiln size expression.
            return torch_dim(val, _span(fx_node))
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            val = _concrete(val, fx_node)
        if isinstance(val, (bool, int, float)):
            # Size arithmetic (sym_size, operator.mul, ...) is already known statically.
            return val
        fn = lookup(target)
        if fn is None and isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            twin = functional_twin(fx_node)
            fn = CONVERTERS.get(twin) if twin else None
        if fn is None:
            self.unsupported.append((name, fx_node.name))
            return _MISSING
        args = self._value(fx_node.args)
        kwargs = self._value(fx_node.kwargs)
        if self._has_missing(args) or self._has_missing(kwargs):
            return _MISSING
        folded = self._fold_empty(fx_node, val)
        if folded is not None:
            return folded
        n = Node(fx_node, args, kwargs, _span(fx_node), self.random)
        try:
            out = fn(n)
        except Unsupported as why:
            self.unsupported.append((f"{name} ({why})", fx_node.name))
            return _MISSING
        except (SymbolicBoolError, IRError) as err:
            if not self.symbols.vars:
                raise
            # a converter that needs a known size where a dynamic dimension flows
            self.unsupported.append((f"{name} (with dynamic sizes: {err})", fx_node.name))
            return _MISSING
        return self._checked(fx_node, out, val)

    def _fold_empty(self, fx_node, val):
        """The value of a node that computes nothing, or None: every tensor it writes has no
        elements, or every tensor it reads has none. Such a value is known at import (an empty
        tensor holds no data), so it becomes a constant: empty arrays, or what the op gives
        for empty operands (the sum of nothing is 0, the variance of nothing nan), which torch
        itself evaluates on empty tensors here."""
        outs = tuple(val) if isinstance(val, (tuple, list)) else (val,)
        if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
            return None
        target = fx_node.target
        if not isinstance(target, torch._ops.OpOverload) or target._schema.is_mutable \
                or torch.Tag.nondeterministic_seeded in target.tags:
            return None
        try:
            shapes = [static_shape(o.shape, fx_node.name) for o in outs]
            if all(0 in shape for shape in shapes):
                arrays = [np.zeros(shape, dtype=_np_dtype(o)) for shape, o in zip(shapes, outs)]
            else:
                arrays = self._eval_on_empty(fx_node)
        except (Unsupported, FrontendError):   # dynamic shapes, dtypes kiln lacks
            return None
        if arrays is None:
            return None
        consts = tuple(const(a) for a in arrays)
        return consts if isinstance(val, (tuple, list)) else consts[0]

    def _eval_on_empty(self, fx_node):
        """The node's outputs evaluated by torch when all its tensor operands are empty;
        None if one is not."""
        empty = []

        def operand(a):
            if isinstance(a, torch.fx.Node):
                meta = a.meta.get("val")
                if isinstance(meta, torch.Tensor):
                    shape = static_shape(meta.shape, a.name)
                    if 0 not in shape:
                        raise _NotEmpty
                    t = torch.empty(shape, dtype=meta.dtype)
                    empty.append(t)
                    return t
                return self.env[a]
            if isinstance(a, (list, tuple)):
                return type(a)(operand(x) for x in a)
            return a

        try:
            args = operand(fx_node.args)
            kwargs = {k: operand(v) for k, v in fx_node.kwargs.items()}
        except _NotEmpty:
            return None
        if not empty:
            return None
        try:
            with torch.no_grad():
                out = fx_node.target(*args, **kwargs)
        except Exception:   # torch refuses empty operands here (a max of nothing): the
            return None     # converter meets them instead
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if not all(isinstance(o, torch.Tensor) for o in outs):
            return None
        arrays = []
        for o in outs:
            kiln_dtype(o.dtype)   # Unsupported for dtypes kiln lacks
            arrays.append(_to_numpy(o).astype(_np_dtype(o)))
        return arrays

    def _getitem(self, fx_node):
        src, index = fx_node.args
        value = self.env[src]
        if value is _MISSING:
            return _MISSING
        try:
            item = value[index]
        except (TypeError, IndexError):
            raise FrontendError(f"{fx_node.name}: cannot index output of {src.name} "
                                f"with {index!r}") from None
        if item is None:
            if not fx_node.users:
                return None   # an output kiln does not compute (pooling indices), unused
            self.unsupported.append((f"{target_name(src.target)} output {index}", fx_node.name))
            return _MISSING
        return item

    @staticmethod
    def _checked(fx_node, out, val):
        """A converter's result must have the type torch recorded: a mismatch is a kiln bug,
        caught here where the node is known rather than as a wrong number later. Dynamic sizes
        that are equal but written differently (n + n where torch records 2*n) take torch's
        form, through a reshape that moves nothing, so later types compare equal."""
        outs, vals = (out, val) if isinstance(out, tuple) else ((out,), (val,))
        if not isinstance(vals, (tuple, list)) or len(vals) != len(outs):
            return out
        fixed = []
        for o, v in zip(outs, vals):
            if isinstance(o, Expr) and isinstance(v, torch.Tensor):
                want = TensorType(static_shape(v.shape, fx_node.name), kiln_dtype(v.dtype))
                got = o.checked_type
                if want != got and _same_sizes(got, want):
                    o = call("reshape", o, newshape=tuple(want.shape), span=_span(fx_node))
                elif want != got:
                    raise FrontendError(f"{_span(fx_node)}: {target_name(fx_node.target)} was "
                                        f"converted to {got} but torch records {want}")
            fixed.append(o)
        return tuple(fixed) if isinstance(out, tuple) else fixed[0]

    # --- outputs ----------------------------------------------------------------------------
    def _outputs(self, out_node):
        specs = self.program.graph_signature.output_specs
        results = []
        for spec, a in zip(specs, out_node.args[0]):
            mutates = self.training and spec.kind in (OutputKind.BUFFER_MUTATION,
                                                      OutputKind.USER_INPUT_MUTATION)
            if spec.kind != OutputKind.USER_OUTPUT and not mutates:
                raise FrontendError(f"the model mutates {spec.target!r} during "
                                    f"{'training' if self.training else 'inference'} "
                                    f"({spec.kind.name}); kiln imports pure functions")
            v = self._value(a)
            if v is _MISSING:
                return None
            if mutates:             # named as main's parameter holding the mutated value
                held = self._mutated.get(spec.target)
                if held is None:
                    raise FrontendError(f"the model overwrites {spec.target!r} without reading "
                                        f"it; kiln trains models that update what they read")
                self.mutations.append((held.name_hint, v))
                continue
            if isinstance(v, (bool, int, float)):
                v = const(np.asarray(v))
            if not isinstance(v, Expr):
                raise FrontendError(f"output {spec.arg.name} is a {type(v).__name__}, "
                                    f"not a tensor")
            results.append(v)
        if not results:
            raise FrontendError("the model returns no tensors")
        self.num_outputs = len(results)
        if self.mutations:
            return Tuple([*results, *(v for _, v in self.mutations)])
        return results[0] if len(results) == 1 else Tuple(results)

    def run(self):
        with active(self.symbols):
            return self._run()

    def _run(self):
        self._placeholders()
        body = None
        for fx_node in self.program.graph.nodes:
            if fx_node.op == "placeholder":
                continue
            if fx_node.op == "call_function":
                self.env[fx_node] = self._call(fx_node)
            elif fx_node.op == "get_attr":
                # Sub-graphs of control flow (torch.cond, ...): their users are reported.
                self.env[fx_node] = _MISSING
            elif fx_node.op == "output":
                body = self._outputs(fx_node)
            else:
                self.unsupported.append((fx_node.op, fx_node.name))
        if self.unsupported:
            raise UnsupportedOpsError(self.unsupported, frontend="PyTorch")
        used = {id(e) for e in post_order(body) if isinstance(e, GraphVar)}
        weights = [v for v in self.weight_vars if id(v) in used]
        params = {v.name_hint: self.params[v.name_hint] for v in weights}
        masks = self.random.vars if self.random else []
        attrs = {"dim_ranges": dict(self.symbols.ranges)} if self.symbols.ranges else None
        func = Function(self.user_vars + masks + weights, body, attrs)
        return IRModule.from_expr(func), params, tuple(name for name, _ in self.mutations)


def _flat_specs(specs) -> list:
    """The per-tensor entries of positional dynamic_shapes, nested tuples flattened."""
    out = []
    for spec in specs:
        if isinstance(spec, (tuple, list)) and any(_is_dim(x) for x in spec):
            # one input's dims per axis, (Dim("b"), None): as {axis: Dim}
            out.append({k: x for k, x in enumerate(spec) if _is_dim(x)})
        elif isinstance(spec, (tuple, list)):
            out += _flat_specs(spec)
        else:
            out.append(spec)
    return out


def _is_dim(x) -> bool:
    return x is not None and not isinstance(x, (tuple, list, dict, int)) and \
        hasattr(x, "__name__")


def _same_sizes(got, want) -> bool:
    """Types of one dtype and rank whose sizes are equal, symbolic ones proved so."""
    from ...arith import Analyzer
    ana = Analyzer()
    return isinstance(got, TensorType) and got.dtype == want.dtype and \
        got.ndim == want.ndim and all(a is b or ana.can_prove_equal(a, b)
                                      for a, b in zip(got.shape, want.shape))


def _concrete(v, fx_node):
    if v.node.is_constant():
        kind = int if isinstance(v, torch.SymInt) else float if isinstance(v, torch.SymFloat) \
            else bool
        return kind(v)
    raise FrontendError(f"{_span(fx_node)}: dynamic value {v}; kiln imports models with "
                        f"static shapes")

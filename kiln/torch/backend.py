"""torch.compile(model, backend="kiln"): kiln as a TorchDynamo backend.

Dynamo hands over one FX graph per captured region (a graph break makes several). Each is
traced to ATen ops with torch.export, imported by kiln's PyTorch frontend and compiled; the
module's weights, which dynamo passes as graph inputs, are bound as constants so kiln can fold
and re-layout them. A graph whose inputs require grad (training) is differentiated by kiln's
own gradient pass instead (TrainingGraph, kiln.torch.training), not through AOT autograd: kiln
then chooses what the forward saves for its backward, and the backward needs no ATen backward
ops (convolution_backward, native_layer_norm_backward, ...) translated. A graph kiln cannot
take (an unsupported op, dynamic shapes, a tensor off the CPU, ...) runs with PyTorch instead,
with one warning on the "kiln.torch" logger saying why. A graph with ops kiln lacks is
compiled in parts instead (kiln.torch.partition): kiln compiles what it can, PyTorch runs
those ops between the parts, and one warning names them.

Weights are checked on every call: if a weight input is another tensor (a second instance of
the module) or was changed in place (its version counter moved), the graph is compiled again
for the new values.

torch finds the backend through the `torch_dynamo_backends` entry point in pyproject.toml, so
`import kiln` is not needed first. Options: `torch.compile(m, backend="kiln",
options={"target": "llvm", "tuning_log": "tune.jsonl", "opt_level": 3})`.

Example:
    >>> fast = torch.compile(model.eval(), backend="kiln")   # doctest: +SKIP
    >>> with torch.no_grad():                                # doctest: +SKIP
    ...     y = fast(x)
"""
from __future__ import annotations

import logging
import threading
import weakref

import torch

from kiln.cli.errors import one_line
from kiln.frontend.common import FrontendError, UnsupportedOpsError
from kiln.target import as_target
from kiln.torch.optimize import TorchRunner

__all__ = ["kiln_backend", "KilnGraph", "DeferredGraph", "TrainingGraph", "OPTIONS"]

log = logging.getLogger("kiln.torch")

# option -> (default, meaning); torch.compile passes them as options={...}.
OPTIONS = {
    "target": ("llvm", "the kiln target to compile for"),
    "tuning_log": (None, "a tuning log (JSON lines) whose best configs to use"),
    "opt_level": (None, "graph optimization level (default 3)"),
}

_MAX_WEIGHT_SETS = 4      # compiled weight sets kept per graph (module instances sharing code)
_MAX_NUMBER_SETS = 4      # compilations per set of the numbers dynamo passes as tensors


def kiln_backend(gm: torch.fx.GraphModule, example_inputs, *, mode=None, options=None):
    """The TorchDynamo backend: a callable running `gm` with kiln, or `gm.forward` (with one
    warning naming the reason) when kiln cannot take the graph.

    Example:
        >>> fast = torch.compile(model, backend=kiln_backend)   # doctest: +SKIP
    """
    settings = _settings(mode, options)
    name = _graph_name()
    reason = _refusal(gm, example_inputs)
    lacks_ops = False
    kind = TrainingGraph if _needs_grad(gm, example_inputs) else KilnGraph
    if reason is None and _tensor_dims(gm):
        if kind is TrainingGraph:
            reason = ("dynamic shapes in a training graph; kiln trains static shapes: use "
                      "torch.compile(..., dynamic=False)")
        else:
            return DeferredGraph(gm, settings, name)
    if reason is None:
        try:
            compiled = kind(gm, example_inputs, settings, name)
        except Exception as err:      # whatever kiln fails on, the model must still run
            log.debug("graph %s: kiln failed", name, exc_info=True)
            reason = _reason_of(err)
            # parts are compiled for inference only
            lacks_ops = isinstance(err, UnsupportedOpsError) and kind is KilnGraph
        else:
            log.info("compiled graph %s with kiln: %s", name, compiled.summary())
            return compiled
    if lacks_ops:                     # the rest may still compile, in parts
        compiled, why_not = _in_parts(gm, example_inputs, settings, name)
        if compiled is not None:
            return compiled
        reason = f"{reason}; {why_not}"
    log.warning("kiln cannot compile graph %s, running it with PyTorch: %s", name, reason)
    return gm.forward


def _in_parts(gm, example_inputs, settings, name):
    """(`gm` as kiln-compiled parts with PyTorch running the ops kiln lacks, None) or, when
    no part compiles, (None, why)."""
    from kiln.torch.partition import PartitionedGraph
    try:
        compiled = PartitionedGraph(gm, example_inputs, settings, name)
    except Exception as err:
        log.debug("graph %s: no part of it compiles with kiln", name, exc_info=True)
        return None, one_line(err)
    log.warning("compiled graph %s with kiln in parts: %s", name, compiled.summary())
    return compiled, None


def _settings(mode, options) -> dict:
    if mode not in (None, "default"):
        raise ValueError(f"the kiln backend has no mode {mode!r}; pass options= "
                         f"({', '.join(OPTIONS)}) instead")
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown kiln option(s) {unknown}; the kiln backend takes "
                         f"{', '.join(f'{k} ({m})' for k, (_, m) in OPTIONS.items())}")
    settings = {k: options.get(k, default) for k, (default, _) in OPTIONS.items()}
    as_target(settings["target"])        # a bad target is the caller's error, not a fallback
    if settings["tuning_log"] is not None:
        from kiln.driver.compile import check_tuning_log
        check_tuning_log(settings["tuning_log"])     # the caller's error, not a fallback
    return settings


def _graph_name() -> str:
    compile_id = torch._guards.CompileContext.current_compile_id()
    return str(compile_id) if compile_id is not None else "(outside torch.compile)"


# ---------------------------------------------------------------------------------------------
# Why a graph is refused before kiln sees it: each check returns a reason or None.

def _placeholders(gm):
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _source_name(node) -> str:
    source = getattr(node, "_dynamo_source", None)
    name = getattr(source, "name", None)
    if callable(name):
        name = name()
    return name or node.target


def _needs_grad(gm, inputs) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                           for t in inputs)


def _off_cpu(gm, inputs):
    for p, t in zip(_placeholders(gm), inputs):
        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            return f"input {_source_name(p)} is on {t.device}; kiln compiles for the CPU"
    return None


def _dynamic(gm, inputs):
    # A size input (dynamo's s0) is fine when a tensor input has it as a dimension: kiln
    # reads it from that tensor (_size_inputs_as_dims). A dimension that is an expression of
    # sizes (s0 + 1) would be exported static.
    sizes = _tensor_dims(gm)
    for p, t in zip(_placeholders(gm), inputs):
        example = p.meta.get("example_value")
        if isinstance(example, torch.Tensor) and any(
                isinstance(d, torch.SymInt) and not d.node.is_constant() and
                not _expr(d).is_Symbol and not _expr(d).is_number for d in example.shape):
            return (f"input {_source_name(p)} is of size {tuple(example.shape)}; kiln takes "
                    f"dynamic dimensions that are sizes by themselves")
        if isinstance(example, torch.SymInt) and _expr(example) in sizes:
            continue
        if not isinstance(t, torch.Tensor) or isinstance(example, torch.SymInt):
            what = "a symbolic size no tensor input has" \
                if isinstance(example, torch.SymInt) else f"a {type(t).__name__}"
            return f"input {_source_name(p)} is {what}; kiln compiles tensor inputs"
    return None


def _expr(d):
    return d.node.expr


def _tensor_dims(gm) -> dict:
    """{torch size symbol: (tensor placeholder, axis)} of the graph's symbolic dimensions,
    the first place each appears."""
    found = {}
    for p in _placeholders(gm):
        example = p.meta.get("example_value")
        if isinstance(example, torch.Tensor):
            for axis, d in enumerate(example.shape):
                if isinstance(d, torch.SymInt) and not d.node.is_constant() and \
                        _expr(d).is_Symbol:
                    found.setdefault(_expr(d), (p, axis))
    return found


def _scalar_inputs(gm) -> list:
    """The placeholders of Python numbers dynamo passes as 0-d tensors with dynamic=True (a
    layer norm's eps, a dropout's p, read with .item()): their names."""
    out = []
    for p in _placeholders(gm):
        example = p.meta.get("example_value")
        if isinstance(example, torch.Tensor) and example.dim() == 0 and p.users and all(
                u.op == "call_method" and u.target == "item" for u in p.users):
            out.append(p.name)
    return out


def _size_inputs_as_dims(gm, scalars=None):
    """`gm` without its size inputs: each use of one reads the size from a tensor input's
    dimension instead (aten.sym_size), so the graph's inputs are tensors, exported with
    their symbolic dimensions as torch.export Dims. `scalars` ({placeholder name: value})
    are folded in as constants (DeferredGraph checks them at each call)."""
    dims = _tensor_dims(gm)
    sizes = [p for p in _placeholders(gm)
             if isinstance(p.meta.get("example_value"), torch.SymInt)]
    if not sizes and not scalars:
        return gm
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    gm = torch.fx.GraphModule(gm, graph)        # (a deep copy's forward takes *args)
    by_name = {p.name: p for p in _placeholders(gm)}
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    for old in sizes:
        p = by_name[old.name]
        source, axis = dims[_expr(p.meta["example_value"])]
        with gm.graph.inserting_before(first):
            size = gm.graph.call_function(torch.ops.aten.sym_size.int,
                                          (by_name[source.name], axis))
        size.meta["example_value"] = p.meta["example_value"]
        p.replace_all_uses_with(size)
        gm.graph.erase_node(p)
    for name, value in (scalars or {}).items():
        p = by_name[name]
        for item in list(p.users):
            item.replace_all_uses_with(value)
            gm.graph.erase_node(item)
        gm.graph.erase_node(p)
    gm.recompile()
    return gm


def _non_tensor_outputs(gm, inputs):
    (outs,) = gm.graph.output_node().args
    for o in outs if isinstance(outs, (tuple, list)) else (outs,):
        value = o.meta.get("example_value") if isinstance(o, torch.fx.Node) else o
        if not isinstance(value, torch.Tensor):
            return f"the graph returns a {type(value).__name__}, not a tensor"
    return None


_CHECKS = (_off_cpu, _dynamic, _non_tensor_outputs)


def _refusal(gm, inputs):
    for check in _CHECKS:
        reason = check(gm, inputs)
        if reason is not None:
            return reason
    return None


# ---------------------------------------------------------------------------------------------
# Why kiln failed, in one line (kiln.cli.errors.one_line, as the CLI reports errors):
# describers by exception type (the nearest base class wins).

def _describe_unsupported(err) -> str:
    ops = err.op_types
    parts = []
    for op in ops[:4]:
        nodes = err.nodes_of(op)
        parts.append(f"{op} (node{'s' if len(nodes) > 1 else ''} {', '.join(nodes[:3])}"
                     f"{', ...' if len(nodes) > 3 else ''})")
    more = f" and {len(ops) - 4} more" if len(ops) > 4 else ""
    return f"unsupported op{'s' if len(ops) > 1 else ''} {', '.join(parts)}{more}"


class ExportError(RuntimeError):
    """torch.export could not trace a graph dynamo captured."""


_DESCRIBE = {
    UnsupportedOpsError: _describe_unsupported,
    FrontendError: lambda err: f"kiln cannot import the graph: {one_line(err)}",
    ExportError: lambda err: one_line(err),
    Exception: lambda err: f"kiln failed to compile it: {type(err).__name__}: {one_line(err)}",
}


def _reason_of(err) -> str:
    for kind in type(err).__mro__:
        if kind in _DESCRIBE:
            return _DESCRIBE[kind](err)
    return one_line(err)


# ---------------------------------------------------------------------------------------------
# A graph compiled by kiln.

def _is_weight(t) -> bool:
    # Dynamo marks the parameters and buffers of the modules it inlines as static inputs.
    return isinstance(t, torch.nn.Parameter) or getattr(t, "_dynamo_static_input_type", None) \
        is not None


def _version(t):
    try:
        return t._version
    except RuntimeError:          # inference tensors keep no version counter
        return None


def _export(gm, inputs, scalars=None):
    """gm as an ExportedProgram; a graph with symbolic sizes (torch.compile's dynamic=True)
    without its size inputs and `scalars` (_size_inputs_as_dims), its tensors' symbolic
    dimensions exported as Dims."""
    dims = _tensor_dims(gm)
    if dims:
        reduced = _size_inputs_as_dims(gm, scalars)
        keep = {p.name for p in _placeholders(reduced)}
        inputs = [t for p, t in zip(_placeholders(gm), inputs) if p.name in keep]
        gm = reduced
    # torch.export marks the dynamic dimensions on the tensors it is given, which dynamo's
    # guards on the caller's tensors would then see: it gets fresh tensor objects (sharing the
    # data) for those.
    args = tuple(t.detach() if not dims or _is_weight(t) else
                 torch.empty(0, dtype=t.dtype).set_(t.detach()) for t in inputs)
    shapes = None
    if dims:
        from torch.export import Dim
        named = {s: Dim(f"d{k}") for k, s in enumerate(dims)}
        shapes = tuple({axis: named[_expr(d)] for axis, d in
                        enumerate(p.meta["example_value"].shape)
                        if isinstance(d, torch.SymInt) and _expr(d) in named} or None
                       for p in _placeholders(gm))
    try:
        return torch.export.export(gm, args, dynamic_shapes=shapes, strict=False)
    except Exception as err:      # torch raises many kinds
        raise ExportError(f"torch.export could not trace the graph: {type(err).__name__}: "
                          f"{one_line(err)}") from err


class KilnGraph:
    """One dynamo graph compiled by kiln; called by dynamo with the graph's inputs.

    Example:
        >>> g = KilnGraph(gm, example_inputs, {"target": "llvm", "tuning_log": None,
        ...                                    "opt_level": None})   # doctest: +SKIP
        >>> outputs = g(*example_inputs)                              # doctest: +SKIP
    """

    def __init__(self, gm, example_inputs, settings, name="graph", scalars=None):
        from kiln.frontend.pytorch import from_pytorch

        self.name = name
        self._settings = settings
        placeholders = _placeholders(gm)
        self._names = [str(p.target) for p in placeholders]
        self._weights = [k for k, t in enumerate(example_inputs) if _is_weight(t)]
        (outs,) = gm.graph.output_node().args
        self._pack = type(outs) if isinstance(outs, (tuple, list)) else None
        program = _export(gm, example_inputs, scalars)
        tensors = [str(p.target) for p in placeholders
                   if not isinstance(p.meta.get("example_value"), torch.SymInt)
                   and p.name not in (scalars or {})]
        self._mod, self._params = from_pytorch(program, input_names=tensors)
        self._compiled = {}           # weight key -> (weak refs to the weights, TorchRunner)
        self.runner = self._runner(example_inputs)
        positions = {n: k for k, n in enumerate(self._names)}
        self._user = [positions[s.name] for s in self.runner.inputs]

    def summary(self) -> str:
        """One line: what the last compilation holds.

        Example:
            >>> g.summary()   # doctest: +SKIP
            '1 input(s), 62 weight input(s) bound, 1 output(s), 17 kernel calls'
        """
        runner = self.runner
        g = runner.lib.graph
        return (f"{len(runner.inputs)} input(s), {len(self._weights)} weight input(s) bound, "
                f"{len(runner.outputs)} output(s), {len(g['kernels'])} kernel calls")

    def __call__(self, *args):
        outs = self._runner(args)([args[k] for k in self._user])
        if self._pack is None:
            return outs[0]
        return self._pack(outs)

    def _runner(self, args) -> TorchRunner:
        from kiln.driver.compile import compile_with_log
        key = tuple((id(args[k]), _version(args[k])) for k in self._weights)
        entry = self._compiled.get(key)
        if entry is not None and all(ref() is args[k] for ref, k in zip(entry[0],
                                                                         self._weights)):
            self.runner = entry[1]
            return self.runner
        if self._compiled:
            log.info("graph %s: weight inputs changed since they were compiled (another module "
                     "instance, or an in-place update); compiling for the new values", self.name)
        params = dict(self._params)
        for k in self._weights:     # no copy: kiln.compile copies what it keeps of them
            params[self._names[k]] = args[k].detach().cpu().numpy()
        s = self._settings
        lib = compile_with_log(self._mod, params, s["target"], s["tuning_log"], s["opt_level"])
        if len(self._compiled) >= _MAX_WEIGHT_SETS:
            self._compiled.pop(next(iter(self._compiled)))
        self.runner = TorchRunner(lib)
        self._compiled[key] = ([weakref.ref(args[k]) for k in self._weights], self.runner)
        return self.runner


class DeferredGraph:
    """A dynamo graph with symbolic sizes (torch.compile(..., dynamic=True)), compiled by kiln
    at its first call into one library for every size (KilnGraph over torch.export Dims; see
    docs/dynamic_shapes.md), or run with PyTorch when kiln cannot take it (one warning, as for
    any graph). Not at dynamo's compile time: torch.export would then trace the graph on the
    very tensors dynamo is building guards for, and those guards would fail.

    Example:
        >>> g = DeferredGraph(gm, settings, "0/0"); outputs = g(*args)   # doctest: +SKIP
    """

    def __init__(self, gm, settings, name="graph"):
        self.gm, self.name, self._settings = gm, name, settings
        # Python numbers dynamo passes as tensors (eps, p): compiled as the constants they are,
        # one compilation per set of values seen (dynamo does not guard them), a few at most
        names = set(_scalar_inputs(gm))
        self._scalars = [(k, p.name) for k, p in enumerate(_placeholders(gm)) if p.name in names]
        self._compiled: dict = {}          # values -> KilnGraph or gm.forward
        self._lock = threading.Lock()
        self.compiled = None               # the last one made

    def __call__(self, *args):
        values = tuple(args[k].item() for k, _ in self._scalars)
        with self._lock:
            compiled = self._compiled.get(values)
            if compiled is None:
                if self._compiled:
                    log.info("graph %s: a number it reads changed; compiling it again",
                             self.name)
                compiled = self._compile(args, values) \
                    if len(self._compiled) < _MAX_NUMBER_SETS else self.gm.forward
                self._compiled[values] = self.compiled = compiled
        return compiled(*args)

    def _compile(self, args, values):
        scalars = {name: v for (_, name), v in zip(self._scalars, values)}
        try:
            compiled = KilnGraph(self.gm, args, self._settings, self.name, scalars)
        except Exception as err:      # whatever kiln fails on, the model must still run
            log.debug("graph %s: kiln failed", self.name, exc_info=True)
            log.warning("kiln cannot compile graph %s, running it with PyTorch: %s", self.name,
                        _reason_of(err))
            return self.gm.forward
        dims = ", ".join(f"{n} in [{lo}, {'...' if hi is None else hi}]"
                         for n, (lo, hi) in compiled.runner.lib.graph.get("dims", {}).items())
        log.info("compiled graph %s with kiln for every size (%s), once: %s", self.name, dims,
                 compiled.summary())
        return compiled


class TrainingGraph:
    """A dynamo graph whose inputs require grad, forward and backward compiled by kiln
    (kiln.torch.training): gradients reach the graph's inputs that require grad (the module's
    parameters, which dynamo passes as inputs), dropout draws PyTorch's masks, and batch norm
    updates its running statistics in place.

    Example:
        >>> g = TrainingGraph(gm, example_inputs, {"target": "llvm", "tuning_log": None,
        ...                                        "opt_level": None})   # doctest: +SKIP
        >>> g(*example_inputs)[0].sum().backward()                        # doctest: +SKIP
    """

    def __init__(self, gm, example_inputs, settings, name="graph"):
        from kiln.torch.training import optimize_for_training

        self.name = name
        (outs,) = gm.graph.output_node().args
        self._pack = type(outs) if isinstance(outs, (tuple, list)) else None
        self.module = optimize_for_training(gm, example_inputs, **settings)

    def summary(self) -> str:
        """One line: what the forward saves for the backward.

        Example:
            >>> g.summary()   # doctest: +SKIP
            'forward and backward, the forward saving 2359296 bytes in 4 tensors for the backward'
        """
        split = self.module.split
        return (f"forward and backward, the forward saving {split.saved_bytes} bytes in "
                f"{len(split.saved)} tensors for the backward")

    def __call__(self, *args):
        out = self.module(*args)
        if self._pack is None:
            return out
        return self._pack(out if isinstance(out, tuple) else [out])

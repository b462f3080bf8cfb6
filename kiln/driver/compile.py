"""kiln.compile: a graph IRModule (+ params) → a compiled model (execution graph, kernels, params).

Steps: bind params as constants, run the graph passes, fuse (those three are
kiln.driver.stages.module_at_stage(..., "fused")), lower every distinct fused function to a loop
program, compile all of them into one kernels module, and lay out the execution graph
with a static memory plan. The result runs with kiln.runtime.GraphExecutor alone.

A call of a partitioned region (a global function with a "Compiler" attr, see
kiln.graph.transform.partition_graph) is a call of an external function: the region goes to
its compiler's external codegen (kiln.codegen.external) and the executor calls the external
module's function in its place; the graph carries the modules ("external_modules").

A fused function that only reshapes (reshape / squeeze / expand_dims, or a chain of them) gets
no kernel: its output entry is a view of its input's bytes ("view_of" in the execution graph),
and the memory plan keeps that storage alive until the last reader of any of its views.
"""
from __future__ import annotations

import bisect
import itertools
import json
from pathlib import Path

import numpy as np

from .. import heap
from ..arith.size_bounds import declare_size_bounds
from ..codegen.external import build_external
from ..graph.expr import Call, Constant, Function, GlobalVar, Tuple, TupleGetItem
from ..graph.module import IRModule
from ..graph.printer import to_text
from ..graph.transform.fold_constant import param_memory
from ..graph.transform.fuse_ops import is_primitive
from ..graph.transform.memory_plan import plan_storage
from ..graph.transform.partition_graph import check_no_annotations
from ..graph.ty import TensorType, TupleType
from ..graph.visitor import ExprMutator, post_order
from ..runtime.describe import byte_text
from ..runtime.external import save_external, with_external
from ..runtime.gpu import DeviceModule
from ..runtime.model import ModelLibrary
from ..runtime.symbolic import evaluate
from ..tir import dtype as dt
from ..timings import phase
from .build_kernels import build_kernels, prestart_workers
from .lower_graph import size_arguments
from .stages import CompileError, module_at_stage
from .symbolic_dims import (check_bindable, dim_ranges, dim_text, planning_sizes,
                            symbolic_vars)

GRAPH_FORMAT_VERSION = 2       # 2: entries may be views of another entry ("view_of")
EXTERNAL_GRAPH_VERSION = 3     # 3: external functions ("external_modules"), see runtime.external
SYMBOLIC_GRAPH_VERSION = 4     # 4: symbolic dimensions ("dims"), see runtime.symbolic

# Operators that change only the shape of a row-major tensor, never its bytes.
VIEW_OPS = frozenset({"reshape", "squeeze", "expand_dims"})


def is_view_only(fn) -> bool:
    """True when a primitive function only re-shapes its one tensor parameter (a chain of
    VIEW_OPS with the same dtype throughout), so its result can share the parameter's bytes.

    Example:
        >>> x = var("x", (2, 3)); is_view_only(Function([x], call("reshape", x, newshape=(6,))))  # doctest: +SKIP
        True
    """
    if not isinstance(fn, Function) or len(fn.params) != 1:
        return False
    (param,) = fn.params
    if not isinstance(param.checked_type, TensorType):
        return False
    node = fn.body
    while isinstance(node, Call):
        op = node.op
        if getattr(op, "name", None) not in VIEW_OPS or len(node.args) != 1:
            return False
        ty = node.checked_type
        if not isinstance(ty, TensorType) or ty.dtype != param.checked_type.dtype:
            return False
        node = node.args[0]
    return node is param and fn.body is not param


def kernel_calls(main: Function) -> dict:
    """The kernel name of every primitive call of the fused `main` that runs one (all but the
    view-only reshapes), in execution order: calls of the same function (equal text) share a
    kernel, named after the function's "Name" attribute and the number of kernels before it.
    kiln.compile names its kernels with this; kiln.autotvm.extract_tasks maps tasks to them.

    Example:
        >>> kernel_calls(module_at_stage(mod, "fused", target)["main"])  # doctest: +SKIP
        {Call(...): 'fused_nn_contrib_conv2d_nchwc_add_nn_relu_0', ...}
    """
    names: dict = {}
    calls: dict = {}
    for node in post_order(main.body, enter_functions=False):
        if isinstance(node, Call) and is_primitive(node.op) and not is_view_only(node.op) \
                and node not in calls:
            key = to_text(node.op)
            if key not in names:
                names[key] = f"{node.op.attrs.get('Name', 'fused')}_{len(names)}"
            calls[node] = names[key]
    return calls


class _GraphBuilder:
    """Walks the fused main and records entries, kernels, inputs, constants and outputs."""

    def __init__(self, planning: dict | None = None):
        self.planning = planning or {}  # symbolic dimension -> the size the plan is made at
        self.entries: list = []       # {"shape", "dtype"}
        self.kernels: list = []       # (func name, input entries, output entries)
        self.inputs: list = []        # (name, entry)
        self.constants: list = []     # (name, entry, array)
        self.value: dict = {}
        self.view_of: dict = {}       # view entry → the entry owning its bytes (never a view)
        self.sizes: dict = {}         # kernel index → symbolic sizes it takes as arguments

    def new_entry(self, ty: TensorType) -> int:
        if not isinstance(ty, TensorType):
            raise CompileError(f"expected a tensor type, got {ty!r}")
        self.entries.append({"shape": [dim_text(d) for d in ty.shape], "dtype": ty.dtype})
        return len(self.entries) - 1

    def new_view(self, base: int, ty: TensorType) -> int:
        root = self.view_of.get(base, base)
        entry = self.new_entry(ty)
        if self.entry_bytes(entry) != self.entry_bytes(root):
            raise CompileError(f"a reshape from {self.entries[root]['shape']} to "
                               f"{self.entries[entry]['shape']} changes the number of bytes")
        self.view_of[entry] = root
        self.entries[entry]["view_of"] = root
        return entry

    def entry_bytes(self, k: int) -> int:
        e = self.entries[k]
        dims = [evaluate(d, self.planning) for d in e["shape"]]
        return int(np.prod(dims, dtype=np.int64)) * dt.bytes_of(e["dtype"])

    def root(self, k: int) -> int:
        return self.view_of.get(k, k)

    def entries_of(self, node) -> list:
        v = self.value[node]
        return v if isinstance(v, list) else [v]


def compile(mod, target="llvm", params=None, opt_level: int | None = None):
    """Compile a graph module for a target. The optimization level is `opt_level`, else that
    of an entered `PassContext` (whose disabled passes and instruments apply too), else 3.
    The target is the current one while the graph passes and schedules run (layouts and
    register tiles follow its vector width).

    Example:
        >>> lib = kiln.compile(mod, target="llvm", params=params)   # doctest: +SKIP
        >>> m = kiln.runtime.GraphExecutor(lib)
    """
    from ..target import as_target

    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    target = as_target(target)
    with target, heap.frozen():
        return _compile(mod, target, params, opt_level)


def check_tuning_log(path) -> Path:
    """`path` as a Path, or a FileNotFoundError naming it when it is not a file.

    Example:
        >>> check_tuning_log("none.jsonl")   # doctest: +SKIP
        FileNotFoundError: tuning log none.jsonl does not exist
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tuning log {path} does not exist")
    return path


def compile_with_log(mod, params=None, target="llvm", tuning_log=None,
                     opt_level: int | None = None):
    """kiln.compile, under the best configs of `tuning_log` (kiln.autotvm.apply_history_best)
    when one is given; a missing log is a FileNotFoundError (check_tuning_log).

    Example:
        >>> lib = compile_with_log(mod, params, "llvm", tuning_log="tune.jsonl")   # doctest: +SKIP
    """
    if tuning_log is None:
        return compile(mod, target=target, params=params, opt_level=opt_level)
    log = check_tuning_log(tuning_log)
    from ..autotvm import apply_history_best       # the tuner loads only when a log is used
    with apply_history_best(str(log)):
        return compile(mod, target=target, params=params, opt_level=opt_level)


def _compile(mod, target, params, opt_level):
    check_no_annotations(mod)      # before the passes, which cannot evaluate annotations
    ranges = {}
    if "main" in mod:
        prestart_workers(target, sum(isinstance(n, Call)
                                     for n in post_order(mod["main"].body)))
        # Declared before the passes, which may simplify with them; the kernels assume them
        # and the runtime refuses inputs outside them.
        sizes = symbolic_vars(mod["main"])
        ranges = dim_ranges(mod["main"], sizes)
        check_bindable(mod["main"], sizes)
        for name, (low, high) in ranges.items():
            declare_size_bounds(sizes[name], low, high)
    # The params are borrowed, not copied: most of a model's weights are repacked or folded by
    # the passes, and what survives unchanged is copied (_owned).
    fused = _owned(module_at_stage(mod, "fused", target, params, opt_level,
                                   borrow_params=True), params)
    check_no_annotations(fused)
    main = fused["main"]
    regions: dict = {}        # symbol -> partitioned function, for the external codegens

    kernel_of = kernel_calls(main)
    g = _GraphBuilder(planning_sizes(ranges))
    for p in main.params:
        if not isinstance(p.checked_type, TensorType):
            raise CompileError(f"input {p.name_hint} of main must be a tensor, got {p.checked_type!r}")
        g.value[p] = g.new_entry(p.checked_type)
        g.inputs.append((p.name_hint, g.value[p]))
    for node in post_order(main.body, enter_functions=False):
        if node in g.value or isinstance(node, Function):
            continue
        if isinstance(node, Constant):
            g.value[node] = g.new_entry(node.checked_type)
            g.constants.append((f"const_{len(g.constants)}", g.value[node], node.data))
        elif isinstance(node, Tuple):
            g.value[node] = [e for f in node.fields for e in g.entries_of(f)]
        elif isinstance(node, TupleGetItem):
            g.value[node] = g.entries_of(node.tuple_value)[node.index]
        elif isinstance(node, Call) and is_primitive(node.op) and is_view_only(node.op):
            (base,) = g.entries_of(node.args[0])
            g.value[node] = g.new_view(base, node.checked_type)
        elif isinstance(node, Call) and (is_primitive(node.op) or
                                         isinstance(node.op, GlobalVar)):
            if isinstance(node.op, GlobalVar):          # a partitioned region's function
                name = node.op.name_hint
                regions[name] = _region(fused, name)
            else:
                name = kernel_of[node]
            ins = [e for a in node.args for e in g.entries_of(a)]
            ty = node.checked_type
            outs = [g.new_entry(t) for t in (ty.fields if isinstance(ty, TupleType) else [ty])]
            g.kernels.append((name, ins, outs))
            if not isinstance(node.op, GlobalVar):
                g.sizes[len(g.kernels) - 1] = [v.name for v in size_arguments(node.op)]
            g.value[node] = outs if isinstance(ty, TupleType) else outs[0]
        else:
            raise CompileError(f"cannot execute a {type(node).__name__} at the top level of main")
    outputs = g.entries_of(main.body)
    # Every distinct primitive function once, in the order kernel_calls named them.
    calls = list({name: call.op for call, name in kernel_of.items()}.items())
    module, flops, sources = build_kernels(calls, target) if calls else (None, {}, [])
    externals = []
    if regions:
        if isinstance(module, DeviceModule):
            raise CompileError(f"partitioned regions {sorted(regions)} cannot run beside "
                               f"kernels for device target {target}: external functions run "
                               f"on the host")
        with phase("codegen.external"):
            externals = build_external(regions, target)
        module = with_external(module, externals, {f: len(i) for f, i, _ in g.kernels})
        flops = {**flops, **dict.fromkeys(regions)}

    # Plan on the entries owning bytes: reading a view reads its root, so the root's storage
    # lives until the last reader of any of its views; an output's root is pinned.
    entry_bytes = {k: g.entry_bytes(k) for k in range(len(g.entries))}
    with phase("graph.memory_plan"):
        storage_of, sizes = plan_storage([([g.root(e) for e in i], o) for _, i, o in g.kernels],
                                         entry_bytes, {g.root(e) for e in outputs})
    for k, e in enumerate(g.entries):
        e["storage"] = storage_of.get(g.root(k), -1)
    graph = {
        "version": GRAPH_FORMAT_VERSION,
        "entries": g.entries,
        "storages": sizes,
        "inputs": [{"name": n, "entry": e} for n, e in g.inputs],
        "constants": [{"name": n, "entry": e} for n, e, _ in g.constants],
        "kernels": [{"func": f, "inputs": i, "outputs": o,
                     **({"sizes": g.sizes[k]} if g.sizes.get(k) else {})}
                    for k, (f, i, o) in enumerate(g.kernels)],
        "outputs": outputs,
        "functions": {n: module.function_info(n).to_dict()
                      for n in [n for n, _ in calls] + list(regions)},
        "flops": flops,         # float operations per call of each kernel (None: not fixed)
    }
    if externals:
        graph["external_modules"] = [save_external(m) for m in externals]
        graph["version"] = EXTERNAL_GRAPH_VERSION     # older runtimes must refuse it
    if ranges:
        # Sizes of storages and entries are then those at the planning sizes; the runtime
        # sizes them from each run's inputs (kiln.runtime.symbolic).
        graph["dims"] = ranges
        graph["version"] = SYMBOLIC_GRAPH_VERSION
    if isinstance(module, DeviceModule):
        if ranges:
            raise CompileError(f"symbolic dimensions {sorted(ranges)} are not supported for "
                               f"device target {target} yet: compile for one shape")
        # GPU kernels (source or PTX) and their launch plans travel in the graph: an exported
        # library holds no native kernels.
        graph["device_module"] = module.to_dict()
    # np.require, not np.ascontiguousarray, which turns a 0-d constant into a 1-d one.
    consts = {n: np.require(a, requirements="C") for n, _, a in g.constants}
    return CompiledModel(json.dumps(graph), module, consts, target, sources)


def _owned(mod: IRModule, params) -> IRModule:
    """`mod` with every constant that shares memory with a value of `params` copied, in every
    function (the fused kernels' too: printing a compiled model's kernels lowers them again):
    a compiled model must not change when its caller later writes to the arrays it passed."""
    spans = []
    for value in (params or {}).values():
        arr = np.asarray(param_memory(value))
        if arr.flags.c_contiguous:      # bind_params copied any other: nothing to borrow
            start = arr.__array_interface__["data"][0]
            spans.append((start, start + arr.nbytes))
    if not spans:
        return mod
    spans.sort()
    starts = [s for s, _ in spans]
    # spans may overlap (two params viewing one buffer): the largest end among those that
    # start before an array's end says whether any reaches into it
    reach = list(itertools.accumulate((e for _, e in spans), max))

    class _Own(ExprMutator):
        def rewrite_Constant(self, c):
            lo = c.data.__array_interface__["data"][0]
            k = bisect.bisect_left(starts, lo + c.data.nbytes)
            return Constant(np.array(c.data), c.span) if k and reach[k - 1] > lo else c

    out = mod
    for name, func in mod.items():
        owned = _Own().visit(func)
        if owned is not func:
            out = out.with_function(name, owned)
    return out


def _region(mod: IRModule, symbol: str) -> Function:
    """The partitioned function `symbol` of the fused module (a CompileError unless it is one:
    a global function with a "Compiler" attr)."""
    func = mod[symbol] if symbol in mod else None
    if func is None or not func.attrs.get("Compiler"):
        raise CompileError(f"main calls @{symbol}, which is not a partitioned region (a "
                           f"function of the module with a 'Compiler' attribute)")
    return func


class CompiledModel(ModelLibrary):
    """What kiln.compile returns: the execution graph, the kernels module and the constants,
    runnable by kiln.runtime.GraphExecutor and exportable as one shared library."""

    def __init__(self, graph_json, module, params, target, prim_funcs):
        super().__init__(graph_json, module, params)
        self.target = target
        self.prim_funcs = prim_funcs

    def export_library(self, path: str) -> None:
        """Write kernels, graph and weights into one shared library loadable with
        kiln.runtime.load_module(path)."""
        from .export import export_library
        export_library(self, path)

    def __repr__(self):
        inputs = [str(spec) for spec in self.input_specs()]
        outputs = [spec.type_text() for spec in self.output_specs()]
        nbytes = sum(int(np.asarray(a).nbytes) for a in self.params.values())
        return (f"<kiln.CompiledModel target={str(self.target)!r}: {len(self.prim_funcs)} "
                f"kernels, {len(self.graph['kernels'])} kernel calls; inputs "
                f"{_listing(inputs)}; outputs {_listing(outputs)}; {len(self.params)} params, "
                f"{byte_text(nbytes)}>")


def _listing(items: list, limit: int = 4) -> str:
    # a BERT has a few inputs, but a model may have dozens: the repr stays one readable line
    shown = items[:limit] + ([f"... {len(items) - limit} more"] if len(items) > limit else [])
    return "(" + ", ".join(shown) + ")"

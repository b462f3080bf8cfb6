"""Task extraction: the tunable kernels of a whole model (TVM paper §5, "Task").

kiln.compile's own graph passes and fusion run on the model; in every fused function the
anchor of the master op (the conv2d of conv2d+bias+relu) is built as a tensor expression,
and when an x86 template covers it (kiln.autotvm.templates: convolutions NCHWc, NCHW,
grouped, depthwise and Winograd; dense, matmul, batch_matmul) it becomes a task with the args
that the topi hook computes for the same op, so the keys agree with what kiln.compile asks for.
Ops without a template (pooling, reductions, layout transforms, ...) are skipped.

Example:
    >>> tasks = extract_tasks(mod, params, target="llvm")  # doctest: +SKIP
    >>> [(t.name, t.count) for t in tasks][:2]             # doctest: +SKIP
    [('conv2d_nchwc.x86', 2), ('conv2d_nchwc.x86', 1)]
"""
from __future__ import annotations

from .. import te
from ..driver.compile import kernel_calls
from ..driver.stages import module_at_stage
from ..graph.expr import Call, Constant, Function, Tuple, TupleGetItem
from ..graph.ty import TupleType
from ..graph.visitor import post_order
from ..target import as_target
from ..te.tensor import ComputeOp
from .task import Task
from .templates import anchor_task_args

__all__ = ["extract_tasks"]


def _placeholders(fn: Function) -> dict:
    env = {}
    for k, p in enumerate(fn.params):
        ty = p.checked_type
        if isinstance(ty, TupleType):
            env[p] = [te.placeholder(t.shape, t.dtype, name=f"p{k}_{j}")
                      for j, t in enumerate(ty.fields)]
        else:
            env[p] = te.placeholder(ty.shape, ty.dtype, name=f"p{k}")
    return env


def _flat(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _master_tensors(fn: Function) -> list:
    """The te outputs of the master call of a fused function (highest fusion pattern, the
    last such call: the same choice as kiln.driver.lower_graph), built from its computes."""
    env = _placeholders(fn)
    master = None
    for node in post_order(fn.body):
        if node in env:
            continue
        if isinstance(node, Constant):
            dtype = node.checked_type.dtype
            value = node.data.reshape(-1)[0].item()
            env[node] = te.compute(node.checked_type.shape,
                                   lambda *i: te.const(value, dtype), name="const")
        elif isinstance(node, Tuple):
            env[node] = [t for f in node.fields for t in _flat(env[f])]
        elif isinstance(node, TupleGetItem):
            env[node] = env[node.tuple_value][node.index]
        elif isinstance(node, Call):
            if node.op.compute is None:
                return []
            inputs = [t for a in node.args for t in _flat(env[a])]
            outs = _flat(node.op.compute(node.attrs, inputs, node.checked_type))
            env[node] = outs if isinstance(node.checked_type, TupleType) else outs[0]
            if master is None or node.op.pattern >= master.op.pattern:
                master = node
    return _flat(env[master]) if master is not None else []


def _anchor_task(fn: Function):
    """(template name, args) of the fused function's anchor, or None. The anchor is the
    first compute with a template found walking back from the master's outputs (a dense
    with bias returns its bias stage; the dense is behind it)."""
    todo, seen = [t.op for t in _master_tensors(fn)], set()
    while todo:
        op = todo.pop()
        if op in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(op)
        found = anchor_task_args(op)
        if found is not None:
            return found
        todo.extend(t.op for t in op.input_tensors())
    return None


def extract_tasks(mod, params=None, target="llvm", opt_level: int = 3) -> list:
    """One Task per distinct (template, args, target) among the fused kernels kiln.compile
    would build for `mod`, with `task.count` (how many kernel calls of the model it covers)
    and `task.kernels` (the names of those kernels in the compiled model, as a profile of it
    shows them); sorted by task.flop * count, largest first. Ops without a template are
    skipped.

    Example:
        >>> tasks = extract_tasks(mod, params, "llvm")  # doctest: +SKIP
        >>> tasks[0].flop * tasks[0].count >= tasks[-1].flop * tasks[-1].count  # doctest: +SKIP
        True
    """
    def make_task(fn, kernel, target):
        found = _anchor_task(fn)
        return Task(found[0], found[1], target) if found is not None else None

    return collect_tasks(mod, params, target, opt_level, make_task)


def collect_tasks(mod, params, target, opt_level: int, make_task) -> list:
    """The tasks `make_task(fused function, kernel name, target)` gives for the kernels
    kiln.compile builds for `mod` (None: no task), one per key, with `count` and `kernels`;
    sorted by flop * count, largest first (a task whose FLOPs cannot be counted last).

    Example:
        >>> collect_tasks(mod, params, "llvm", 3, lambda fn, k, t: None)   # doctest: +SKIP
        []
    """
    target = as_target(target)
    tasks: dict = {}
    with target:
        main = module_at_stage(mod, "fused", target, params, opt_level,
                               borrow_params=True)["main"]
        memo: dict = {}
        for node, kernel in kernel_calls(main).items():
            fn = node.op
            if fn not in memo:
                memo[fn] = make_task(fn, kernel, target)
            task = memo[fn]
            if task is None:
                continue
            if task.key in tasks:
                task = tasks[task.key]
                task.count += 1
            else:
                tasks[task.key] = task
            if kernel not in task.kernels:
                task.kernels.append(kernel)

    def flop(t):
        try:
            return float(t.flop)
        except ValueError:
            return 0.0
    return sorted(tasks.values(), key=lambda t: (-flop(t) * t.count, t.key))

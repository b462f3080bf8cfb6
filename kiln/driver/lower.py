"""kiln.lower: a schedule and its arguments → a PrimFunc of the loop IR, through the pass pipeline."""
from __future__ import annotations

import time

from ..te.bound import enclosing_loops, infer_bound
from ..te.inline import effective_bodies, effective_consumers
from ..te.schedule import Schedule, ScheduleError
from ..te.schedule_ops import schedule_to_stmt
from ..te.tensor import ComputeOp, Tensor
from ..tir.buffer import Buffer
from ..tir.expr import Var
from ..tir.function import PrimFunc
from ..timings import phase
from ..tir.functor import free_vars
from ..tir.op import IRError
from .pipeline import PassInstrument, default_pipeline


class LoweringError(IRError):
    """The schedule and arguments cannot be lowered: an unbound size, a missing argument, ..."""


def _check_attachments(sch, consumers):
    for st in sch.stages:
        if st.attach_type != "scope":
            continue
        host = st.attach_stage
        if host.attach_type == "inline":
            raise ScheduleError(f"stage '{st.op.name}' is computed at a loop of '{host.op.name}', "
                                "which was inlined")
        if st.attach_ivar not in host.leaf_iter_vars:
            raise ScheduleError(f"stage '{st.op.name}' is computed at axis "
                                f"'{st.attach_ivar.var.name}' of '{host.op.name}', which was split "
                                "or fused afterwards; call compute_at with a current loop")
        env = {iv for _, iv in enclosing_loops(st)}
        for c in consumers[st]:
            visible = {iv for _, iv in enclosing_loops(c)} | set(c.leaf_iter_vars)
            if not env <= visible:
                raise ScheduleError(f"stage '{st.op.name}' is computed at axis "
                                    f"'{st.attach_ivar.var.name}' of '{host.op.name}', but its "
                                    f"consumer '{c.op.name}' is computed outside that loop")


def _bind_args(sch, args):
    params, arg_buffers, seen = [], {}, set()
    # Parameter names must differ (they name native arguments and appear in errors); two
    # tensors may share a name, e.g. two te.placeholder calls without name=.
    taken = {a.name for a in args if isinstance(a, Var)}
    for k, a in enumerate(args):
        if isinstance(a, Tensor):
            cur = sch.current(a) if a.op in sch.stage_map else a
            if cur in seen:
                raise LoweringError(f"argument #{k} ('{a.name}') is given twice")
            seen.add(cur)
            buf = Buffer.make(_unique(a.name, taken), a.dtype, a.op.shape)
            arg_buffers[cur] = buf
            params.append(buf)
        elif isinstance(a, Buffer):
            params.append(a)
        elif isinstance(a, Var):
            params.append(a)
        else:
            raise LoweringError(f"argument #{k} must be a tensor or a size variable, got {a!r}")
    for st in sch.outputs:
        for t in st.op.outputs:
            if t not in arg_buffers and isinstance(st.op, ComputeOp):
                raise LoweringError(f"output '{t.name}' of the schedule is not in the argument list")
    return params, arg_buffers


def _unique(name: str, taken: set) -> str:
    candidate, k = name, 0
    while candidate in taken:
        k += 1
        candidate = f"{name}_{k}"
    taken.add(candidate)
    return candidate


def lower(sch, args, name: str = "main", instruments=(), pipeline=None, target=None) -> PrimFunc:
    """Lower a schedule to a loop program (PrimFunc) and run the lowering passes (those of
    `target` when given: a GPU target's make kernels of the thread-bound loops).

    Example:
        >>> f = kiln.lower(s, [A, B, C], name="matmul")  # doctest: +SKIP
        >>> print(f)                                       # readable loop program
    """
    if isinstance(sch, PrimFunc):
        return sch
    if not isinstance(sch, Schedule):
        raise LoweringError(f"lower takes a schedule (te.create_schedule) or a PrimFunc, got {sch!r}")
    params, arg_buffers = _bind_args(sch, args)
    with phase("tir.schedule_to_stmt"):
        eff = effective_bodies(sch)
        consumers = effective_consumers(sch, eff)
        _check_attachments(sch, consumers)
        ranges = infer_bound(sch, eff, consumers)
        body = schedule_to_stmt(sch, eff, ranges, arg_buffers)

    scalars = [p for p in params if isinstance(p, Var)]
    shape_vars = []
    for p in params:
        if isinstance(p, Buffer):
            for extent in p.shape:
                for v in free_vars(extent):
                    if v not in scalars and v not in shape_vars:
                        shape_vars.append(v)
    known = set(scalars) | set(shape_vars) | {p.data for p in params if isinstance(p, Buffer)}
    func = PrimFunc(name, params, body, shape_vars)
    for stage_pass in (default_pipeline(target) if pipeline is None else pipeline):
        func = _run_pass(stage_pass, func, instruments)
    unbound = [v for v in free_vars(func.body) if v not in known and v.dtype != "handle"]
    if unbound:
        raise LoweringError(f"{', '.join(repr(v.name) for v in unbound)} is used but not bound by "
                            "any argument's shape; pass it in the argument list")
    return func


def _run_pass(p, func, instruments):
    for ins in instruments:
        ins.before(p.name, func)
    t0 = time.perf_counter()
    with phase(f"tir.{p.name}"):
        out = p(func)
    elapsed = time.perf_counter() - t0
    for ins in instruments:
        ins.after(p.name, out, elapsed)
    return out


__all__ = ["lower", "LoweringError", "PassInstrument"]

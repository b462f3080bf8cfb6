"""Compile-time use of auto-scheduled programs: kiln.compile asks the dispatch context (e.g.
autotvm.apply_history_best over a log the auto-scheduler wrote) for each kernel's program.

The question is a task key like every template's, `["auto_schedule",["<digest>"],"<target>"]`,
where the digest names the kernel's fused graph function (its JSON form, constants included),
so a record applies to every kernel of that exact computation in any model. The question is
asked (and noted in kiln's kernel-cache keys) for every kernel of a target with sketch rules; without an answer, or with
the default config's answer, the kernel keeps the schedule its operator registers.

Example:
    >>> with kiln.autotvm.apply_history_best("auto.jsonl"):     # doctest: +SKIP
    ...     lib = kiln.compile(mod, params=params)
"""
from __future__ import annotations

import hashlib
import json
import warnings

__all__ = ["AUTO_TASK", "workload_digest", "workload_key", "auto_scheduled",
           "supports_target"]

AUTO_TASK = "auto_schedule"


def workload_digest(function_json: dict) -> str:
    """A 16-hex-digit digest of a fused function's JSON form.

    Example:
        >>> len(workload_digest({"nodes": []}))
        16
    """
    text = json.dumps(function_json, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def workload_key(function_json: dict, target) -> str:
    """The task key of the kernel computing this fused function on `target`.

    Example:
        >>> workload_key({"nodes": []}, "llvm")[:18]
        '["auto_schedule",['
    """
    from ..autotvm.task import task_key
    return task_key(AUTO_TASK, [workload_digest(function_json)], target)


def supports_target(target) -> bool:
    """Whether sketch rules are registered for the target (kiln.auto_schedule.rules).

    Example:
        >>> from kiln.target import Target
        >>> supports_target(Target("llvm")), supports_target(Target("opencl"))
        (True, True)
    """
    from .rules import rules_for
    return rules_for(target) is not None


def auto_scheduled(fn, args, outputs, target):
    """The schedule of a fused function's `outputs` (its arguments `args`) from the program
    the dispatch context answers for it, or None (its operator's registered schedule is
    used; also, with a warning, when the program no longer replays or lowers).

    Example:
        >>> sch = auto_scheduled(fused_fn, args, outputs, Target("llvm"))   # doctest: +SKIP
    """
    from ..autotvm.task import dispatch_answer, log_dispatch
    from ..graph.serialize import function_to_json
    from .compute_dag import ComputeDAG, UnsupportedDAG
    from .program import ProgramError, replay

    if not supports_target(target):
        return None
    try:
        ComputeDAG(outputs)
    except UnsupportedDAG:
        return None
    key = workload_key(function_to_json(fn), target)
    record = dispatch_answer(key)
    log_dispatch(key, __name__, record)
    program = (record or {}).get("knobs", {}).get("program")
    if program is None:
        return None
    # The key is a digest of the graph function, not of the tensor expressions kiln's
    # operators build for it: after a change to those, a program may no longer fit (or a log
    # may be damaged). The kernel then keeps its registered schedule, which always works.
    from ..driver.lower import lower
    try:
        schedule = replay(outputs, program).schedule
        lower(schedule, list(args), target=target)
    except Exception as e:      # noqa: BLE001 - whatever a stale program breaks
        why = str(e) if isinstance(e, ProgramError) else f"{type(e).__name__}: {e}"
        warnings.warn(f"auto-scheduled program for {key} does not apply ({why}); the "
                      f"kernel uses its registered schedule", stacklevel=2)
        return None
    return schedule

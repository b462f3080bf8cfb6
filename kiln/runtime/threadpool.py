"""How many threads the pool generated code runs parallel loops on (threadpool.c, part of the
support library, support_lib.py) uses.

Generated code calls

    int32_t kiln_parallel_launch(int32_t (*task)(int32_t task_id, int32_t num_tasks, void*),
                                 void* closure, int32_t num_tasks)

which runs task(0 .. num_tasks-1) on the pool and returns the lowest-numbered task's non-zero
result (0 when all succeed); num_tasks <= 0 means one task per pool thread.

Processes that use the pool must not fork afterwards (OpenMP's threads do not survive fork):
start worker processes with the "spawn" or "forkserver" method.
"""
from __future__ import annotations

import os

_explicit_threads: int | None = None


def num_threads() -> int:
    """Threads the pool uses: set_num_threads(n) if called, else $KILN_NUM_THREADS, else the CPUs
    this process may run on (its affinity mask). The pool takes this value when it is first
    used; later changes go through set_num_threads.

    Example:
        >>> num_threads() >= 1
        True
    """
    if _explicit_threads is not None:
        return _explicit_threads
    value = os.environ.get("KILN_NUM_THREADS")
    if value is not None and value.strip():
        try:
            count = int(value.strip())
        except ValueError:
            count = 0
        if count <= 0:
            raise ValueError(f"KILN_NUM_THREADS must be a positive integer, got {value!r}")
        return count
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def set_num_threads(n: int) -> None:
    """Use `n` threads for parallel launches from now on (overrides $KILN_NUM_THREADS).

    Example:
        >>> set_num_threads(num_threads())
    """
    from . import support_lib

    global _explicit_threads
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"set_num_threads: expected a positive int, got {n!r}")
    with support_lib.lock:
        _explicit_threads = n
        if support_lib.loaded is not None:
            support_lib.loaded.kiln_set_num_threads(n)

"""How many threads the pool generated code runs parallel loops on (threadpool.c, part of the
support library, support_lib.py) uses.

Generated code calls

    int32_t kiln_parallel_launch(int32_t (*task)(int32_t task_id, int32_t num_tasks, void*),
                                 void* closure, int32_t num_tasks)

which runs task(0 .. num_tasks-1) on the pool and returns the lowest-numbered task's non-zero
result (0 when all succeed); num_tasks <= 0 means one task per pool thread.

Processes that use the pool must not fork afterwards (OpenMP's threads do not survive fork):
start worker processes with the "spawn" or "forkserver" method.

The pool has at most MAX_THREADS threads: 1024, or the machine's CPU count where that is more.
Past it, libgomp fails: starting a team, it puts 128-256 bytes per thread on the launching
thread's stack (alloca; measured: with a 1 MiB stack 4,096 threads start and 8,192 crash), so
100,000 threads overflow an 8 MiB stack (SIGSEGV), and at 32,768 it cannot create the threads
(EAGAIN) and exits the process. 1024 threads need at most 256 KiB of stack and run (checked: a
16,384-task loop on 1024 threads, 2 CPUs); more threads than CPUs only slow parallel loops down,
so the bound costs nothing.
"""
from __future__ import annotations

import os

MAX_THREADS = max(1024, os.cpu_count() or 1)

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
        if count > MAX_THREADS:
            raise ValueError(f"KILN_NUM_THREADS={count} is more than kiln's thread pool allows: "
                             f"at most {_bound_text()}")
        return count
    return usable_cpus()


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one).

    Example:
        >>> usable_cpus() >= 1
        True
    """
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def set_num_threads(n: int) -> None:
    """Use `n` threads for parallel launches from now on (overrides $KILN_NUM_THREADS);
    at most MAX_THREADS.

    Example:
        >>> set_num_threads(num_threads())
    """
    from . import support_lib

    global _explicit_threads
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"set_num_threads: expected a positive int, got {n!r}")
    if n > MAX_THREADS:
        raise ValueError(f"set_num_threads({n}): more than kiln's thread pool allows: "
                         f"at most {_bound_text()}")
    with support_lib.lock:
        _explicit_threads = n
        if support_lib.loaded is not None:
            support_lib.loaded.kiln_set_num_threads(n)


def _bound_text() -> str:
    return (f"{MAX_THREADS} threads (1024, or the CPU count where that is more: this machine has "
            f"{os.cpu_count()}; more threads than CPUs only slow parallel loops down)")

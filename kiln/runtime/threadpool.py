"""The thread pool generated code runs parallel loops on (threadpool.c, built on first use).

Generated code calls

    int32_t kiln_parallel_launch(int32_t (*task)(int32_t task_id, int32_t num_tasks, void*),
                                 void* closure, int32_t num_tasks)

which runs task(0 .. num_tasks-1) on the pool and returns the lowest-numbered task's non-zero
result (0 when all succeed); num_tasks <= 0 means one task per pool thread. The library is
loaded RTLD_GLOBAL, so shared objects loaded after it (the C back-end's) resolve the symbol too;
the LLVM JIT gets its address from `parallel_launch_address()`.

Processes that use the pool must not fork afterwards (OpenMP's threads do not survive fork):
start worker processes with the "spawn" or "forkserver" method.
"""
from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

from .native_build import build_shared_library

_SOURCE = Path(__file__).with_name("threadpool.c")
_lock = threading.Lock()
_library: ctypes.CDLL | None = None
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
    global _explicit_threads
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"set_num_threads: expected a positive int, got {n!r}")
    with _lock:
        _explicit_threads = n
        if _library is not None:
            _library.kiln_set_num_threads(n)


def library() -> ctypes.CDLL:
    """The loaded thread-pool library (built with the system C compiler on first use).

    Example:
        >>> library().kiln_get_num_threads() == num_threads()
        True
    """
    global _library
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            path = build_shared_library(_SOURCE.read_text(), "kiln_threadpool",
                                        ("-O2", "-fopenmp"))
            lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            lib.kiln_set_num_threads.argtypes = [ctypes.c_int32]
            lib.kiln_set_num_threads.restype = None
            lib.kiln_get_num_threads.argtypes = []
            lib.kiln_get_num_threads.restype = ctypes.c_int32
            lib.kiln_parallel_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                                 ctypes.c_int32]
            lib.kiln_parallel_launch.restype = ctypes.c_int32
            lib.kiln_set_num_threads(num_threads())
            _library = lib
    return _library


def parallel_launch_address() -> int:
    """Address of kiln_parallel_launch, for the JIT (llvmlite's add_symbol).

    Example:
        >>> parallel_launch_address() > 0
        True
    """
    return ctypes.cast(library().kiln_parallel_launch, ctypes.c_void_p).value

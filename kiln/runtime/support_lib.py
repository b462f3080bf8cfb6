"""The native support library generated code links against, built from C on first use:

    threadpool.c   kiln_parallel_launch: runs a parallel loop's tasks on the thread pool
    workspace.c    kiln_workspace_alloc / kiln_workspace_free: heap temporaries, kept per thread
                   for reuse so a kernel's scratch is not mapped and faulted in on every call

It is loaded RTLD_GLOBAL, so shared objects loaded after it (the C back-end's, exported model
libraries) resolve its symbols; the LLVM JIT gets their addresses from `symbol_addresses()`.
"""
from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

from .native_build import build_shared_library
from .threadpool import num_threads

_SOURCES = ("threadpool.c", "workspace.c")
# name -> (restype, argtypes): every symbol generated code or tests may call.
_SIGNATURES = {
    "kiln_parallel_launch": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]),
    "kiln_workspace_alloc": (ctypes.c_void_p, [ctypes.c_uint64]),
    "kiln_workspace_free": (None, [ctypes.c_void_p]),
    "kiln_set_num_threads": (None, [ctypes.c_int32]),
    "kiln_get_num_threads": (ctypes.c_int32, []),
    "kiln_workspace_release_thread": (None, []),
    "kiln_workspace_kept_blocks": (ctypes.c_int32, []),
    "kiln_workspace_kept_bytes": (ctypes.c_uint64, []),
}
# What generated code calls (the JIT links these).
GENERATED_CODE_SYMBOLS = ("kiln_parallel_launch", "kiln_workspace_alloc", "kiln_workspace_free")

lock = threading.Lock()
loaded: ctypes.CDLL | None = None


def library() -> ctypes.CDLL:
    """The loaded support library (built with the system C compiler on first use).

    Example:
        >>> library().kiln_get_num_threads() == num_threads()
        True
    """
    global loaded
    if loaded is not None:
        return loaded
    with lock:
        if loaded is None:
            here = Path(__file__).parent
            source = "\n".join((here / name).read_text() for name in _SOURCES)
            path = build_shared_library(source, "kiln_support", ("-O2", "-fopenmp", "-pthread"))
            lib = _load_with_omp_env(path)
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes
            lib.kiln_set_num_threads(num_threads())
            loaded = lib
    return loaded


def _load_with_omp_env(path) -> ctypes.CDLL:
    """Load the library with OMP_NUM_THREADS set while libgomp reads its environment.

    Measured here: with OMP_NUM_THREADS unset, libgomp's idle pool threads spin so briefly
    that each parallel launch pays a wake-up (a Winograd conv ran 270 us instead of 180 us,
    in any process that did not set the variable: the tuner's runner, a user's script). Any
    value gives the documented default spin (~300,000 spins); kiln's launches ask for their
    thread count explicitly, so the value itself does not matter. The variable is set only
    while the library (and with it libgomp) loads, then restored: other runtimes and child
    processes see the environment as it was. If libgomp was already loaded, it keeps its
    settings.
    """
    unset = "OMP_NUM_THREADS" not in os.environ
    if unset:
        os.environ["OMP_NUM_THREADS"] = str(num_threads())
    try:
        return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    finally:
        if unset:
            del os.environ["OMP_NUM_THREADS"]


def symbol_addresses() -> dict[str, int]:
    """Addresses of what generated code calls, for the JIT (llvmlite's import_symbol).

    Example:
        >>> symbol_addresses()["kiln_parallel_launch"] > 0
        True
    """
    lib = library()
    return {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
            for name in GENERATED_CODE_SYMBOLS}


def parallel_launch_address() -> int:
    """Address of kiln_parallel_launch (loads the library first).

    Example:
        >>> parallel_launch_address() > 0
        True
    """
    return symbol_addresses()["kiln_parallel_launch"]

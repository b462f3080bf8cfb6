"""Timing compiled functions: the measurement behind benchmarks and the tuner.

Arguments are checked once; the timed loop then calls the native function directly from C
(timer.c), so a few-microsecond kernel is not measured together with the interpreter.
"""
from __future__ import annotations

import ctypes
import math
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import _dtype
from .native_build import NativeBuildError, build_shared_library
from .packed_func import PackedFunction

_GOLDEN_RATIO = 1.618
_lock = threading.Lock()
_timer = None


@dataclass(frozen=True)
class TimingResult:
    """Seconds per call, one entry per repeat, and their statistics.

    Example:
        >>> r = TimingResult((1e-3, 3e-3))
        >>> r.mean, r.min
        (0.002, 0.001)
    """

    results: tuple

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    @property
    def std(self) -> float:
        """Population standard deviation (numpy's default, ddof=0)."""
        return statistics.pstdev(self.results)

    def __repr__(self):
        values = "".join(f"{v * 1e3:>14.4f}" for v in
                         (self.mean, self.median, self.max, self.min, self.std))
        return ("Execution time summary:\n"
                f"{'mean (ms)':>14}{'median (ms)':>14}{'max (ms)':>14}{'min (ms)':>14}"
                f"{'std (ms)':>14}\n{values}")


def _native_timer():
    """The compiled timer.c library (None without a C compiler: time from Python instead)."""
    global _timer
    with _lock:
        if _timer is None:
            try:
                source = Path(__file__).with_name("timer.c").read_text()
                lib = ctypes.CDLL(str(build_shared_library(source, "kiln_timer")))
                lib.kiln_time_calls.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                                                ctypes.c_int64, ctypes.POINTER(ctypes.c_double)]
                lib.kiln_time_calls_flushed.argtypes = [
                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64,
                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                    ctypes.POINTER(ctypes.c_double)]
                for fn in (lib.kiln_time_calls, lib.kiln_time_calls_flushed, lib.kiln_can_flush):
                    fn.restype = ctypes.c_int32
                _timer = (lib,)
            except NativeBuildError:
                _timer = (None,)
        return _timer[0]


def can_flush_cache() -> bool:
    """Whether time_evaluator(..., cache_flush=True) works here: it needs a C compiler (for
    timer.c) and an x86 CPU (for clflush).

    Example:
        >>> isinstance(can_flush_cache(), bool)
        True
    """
    lib = _native_timer()
    return lib is not None and bool(lib.kiln_can_flush())


def check_cache_flush(value, where: str) -> bool:
    """`value` when it is a bool that this machine can honour (can_flush_cache), else a
    ValueError that starts with `where` (the caller and its argument's name).

    Example:
        >>> check_cache_flush(False, "LocalRunner: enable_cpu_cache_flush")
        False
    """
    if not isinstance(value, bool):
        raise ValueError(f"{where} must be True or False, got {value!r}")
    if value and not can_flush_cache():
        raise ValueError(f"{where} needs a C compiler (to build timer.c) and an x86-64 or AArch64 "
                         f"CPU (to evict cache lines); this machine lacks one")
    return value


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"time_evaluator: {name} must be a positive int, got {value!r}")
    return value


def time_evaluator(func: PackedFunction, number: int = 10, repeat: int = 1,
                   min_repeat_ms: float = 0, cache_flush: bool = False):
    """A callable that times `func` on given arguments and returns a TimingResult.

    Each of `repeat` measurements runs `number` calls and records the mean seconds per call.
    With `min_repeat_ms`, `number` grows (to what one measurement needs, and at least by the
    golden ratio each time) until a measurement lasts that long; later repeats keep it. One
    untimed call warms caches first.

    With `cache_flush`, every buffer argument but the first is evicted from the CPU caches
    before each call, and only the calls are timed. That is the regime of a kernel inside a
    model: its input (the previous kernel's output) is still cached, its weights were pushed
    out by the other layers' (the split TVM's enable_cpu_cache_flush makes too).

    Example:
        >>> timer = time_evaluator(module["vadd"], number=100, repeat=3)   # doctest: +SKIP
        >>> timer(a, b, c).median                                        # doctest: +SKIP
    """
    number = _positive_int("number", number)
    repeat = _positive_int("repeat", repeat)
    if isinstance(min_repeat_ms, bool) or not isinstance(min_repeat_ms, (int, float)) \
            or min_repeat_ms < 0:
        raise ValueError(f"time_evaluator: min_repeat_ms must be a number >= 0, got "
                         f"{min_repeat_ms!r}")
    check_cache_flush(cache_flush, "time_evaluator: cache_flush")

    def evaluate(*args) -> TimingResult:
        values, keep = func.prepare(*args)
        run = _runner(func, values, cache_flush)
        run(1)
        calls, results = number, []
        for _ in range(repeat):
            while True:
                elapsed = run(calls)
                if elapsed * 1e3 >= min_repeat_ms:
                    break
                per_call = max(elapsed / calls, 1e-9)
                calls = max(int(min_repeat_ms / 1e3 / per_call) + 1, int(calls * _GOLDEN_RATIO))
            results.append(elapsed / calls)
        del keep
        return TimingResult(tuple(results))

    return evaluate


def _runner(func: PackedFunction, values, cache_flush: bool = False):
    """run(calls) -> seconds the calls took, through timer.c when it could be built."""
    address, count = ctypes.addressof(values), func._num_values
    lib = _native_timer()
    seconds = ctypes.c_double()
    if cache_flush:
        ranges = _flush_ranges(func, values)
        addresses = (ctypes.c_void_p * max(len(ranges), 1))(*(a for a, _ in ranges))
        sizes = (ctypes.c_int64 * max(len(ranges), 1))(*(n for _, n in ranges))

        def timed(calls: int) -> int:
            return lib.kiln_time_calls_flushed(func.address, address, count, calls, addresses,
                                               sizes, len(ranges), ctypes.byref(seconds))
    elif lib is not None:
        def timed(calls: int) -> int:
            return lib.kiln_time_calls(func.address, address, count, calls,
                                       ctypes.byref(seconds))
    else:
        native = func._native

        def timed(calls: int) -> int:
            start, status = time.perf_counter(), 0
            for _ in range(calls):
                status = native(address, count)
                if status:
                    break
            seconds.value = time.perf_counter() - start
            return status

    def run(calls: int) -> float:
        status = timed(calls)
        if status:
            raise func.status_error(status, " while being timed")
        return seconds.value
    return run


def _flush_ranges(func: PackedFunction, values) -> list[tuple[int, int]]:
    """(address, bytes) of every buffer argument after the first, from the packed `values`
    (PackedFunction.prepare): a buffer's address sits at its parameter's position, the values
    bound for symbolic extents follow the parameters."""
    info = func.info
    bound = {name: values[len(info.params) + j] for j, (name, _) in enumerate(info.shape_vars)}
    ranges = []
    for k in [k for k, p in enumerate(info.params) if p.kind == "buffer"][1:]:
        param = info.params[k]
        elements = math.prod(bound[e] if isinstance(e, str) else e for e in param.shape)
        ranges.append((values[k], elements * _dtype.to_numpy(param.dtype).itemsize))
    return ranges

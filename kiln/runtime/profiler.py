"""Per-kernel profile of a compiled model: where one run's time goes.

Each kernel is timed as it runs inside the model. The graph runs in order on the arguments the
GraphExecutor bound (the same arrays, so every kernel finds the caches its predecessors left, as
in a real run), and one clock read after each kernel call splits a run into consecutive
intervals, one per kernel: the kernel times tile the run with nothing left between them. The
loop runs in C (one native call per run, as GraphExecutor.run makes), so no interpreter time
lands in a kernel.

Batches of plain runs (GraphExecutor.benchmark) alternate with the profiled batches, so the
end-to-end latency the kernel times are compared with is measured under the same load.
GraphExecutor.run itself is untouched: nothing is timed unless a profile is asked for.

Example:
    >>> report = profile(lib, number=20)                 # doctest: +SKIP
    >>> print(report)                                    # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import json
import statistics
import threading
import time
from dataclasses import dataclass

import numpy as np

from . import _dtype, peak as _peak
from .graph_executor import GraphExecutor, GraphIO
from .model import ModelLibrary
from .native_build import NativeBuildError, build_shared_library
from .threadpool import num_threads

__all__ = ["profile", "random_inputs", "KernelProfile", "ProfileReport"]

_SOURCE = r"""
#include <stdint.h>
#include <time.h>

typedef int32_t (*kiln_function)(void* args, int32_t num_args);

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* graph_runner.c's loop, `runs` times, adding each kernel's interval to elapsed_ns[k]. */
int32_t kiln_profile_graph(int32_t num_kernels, kiln_function* fns, void** args,
                           const int32_t* num_args, int64_t runs, int64_t* elapsed_ns,
                           int32_t* failed) {
  for (int64_t r = 0; r < runs; ++r) {
    int64_t before = now_ns();
    for (int32_t k = 0; k < num_kernels; ++k) {
      int32_t status = fns[k](args[k], num_args[k]);
      int64_t after = now_ns();
      elapsed_ns[k] += after - before;
      before = after;
      if (status != 0) {
        *failed = k;
        return status;
      }
    }
  }
  return 0;
}
"""

_lock = threading.Lock()
_native = None


def _native_profiler():
    global _native
    with _lock:
        if _native is None:
            try:
                lib = ctypes.CDLL(str(build_shared_library(_SOURCE, "kiln_profiler")))
            except NativeBuildError:
                _native = (None, None)       # no C compiler: time from Python instead
            else:
                fn = lib.kiln_profile_graph
                fn.argtypes = [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                               ctypes.POINTER(ctypes.c_int32)]
                fn.restype = ctypes.c_int32
                _native = (lib, fn)
        return _native[1]


@dataclass(frozen=True)
class KernelProfile:
    """One kernel (compiled function) of a model: how often one run calls it, the median time
    of those calls per run, and their float operations per run (None: not recorded).

    Example:
        >>> KernelProfile("fused_nn_dense_0", 1, 2e-6, 8000).gflops
        4.0
    """

    name: str
    calls: int
    seconds: float
    flop: int | None
    bytes: int | None = None        # its calls' inputs and outputs per run (None: unknown)
    shape: tuple | None = None      # its output's shape (the first output's)

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte of its inputs and outputs (arithmetic intensity), or None."""
        if not self.flop or not self.bytes:
            return None
        return self.flop / self.bytes

    @property
    def gflops(self) -> float | None:
        """GFLOP/s, or None when the kernel does no float arithmetic or its count is unknown."""
        if not self.flop or self.seconds <= 0:
            return None
        return self.flop / self.seconds / 1e9


@dataclass(frozen=True)
class ProfileReport:
    """The per-kernel table of one profile, slowest kernel first, with the end-to-end latency
    it is checked against and this machine's peak (GFLOP/s; None when unknown).

    Example:
        >>> r = ProfileReport((KernelProfile("k", 1, 1e-3, 10**9),), 1.05e-3, 2000.0, 10, 5, 2)
        >>> round(r.coverage, 3), round(r.peak_fraction(r.kernels[0]), 2)
        (0.952, 0.5)
    """

    kernels: tuple
    end_to_end: float
    peak_gflops: float | None
    number: int
    repeat: int
    threads: int

    @property
    def total(self) -> float:
        """Sum of the kernels' times per run (seconds)."""
        return sum(k.seconds for k in self.kernels)

    @property
    def coverage(self) -> float:
        """Sum of kernel times over the end-to-end latency (1.0: the kernels are the run)."""
        return self.total / self.end_to_end if self.end_to_end > 0 else 0.0

    def share(self, kernel: KernelProfile) -> float:
        return kernel.seconds / self.total if self.total > 0 else 0.0

    def peak_fraction(self, kernel: KernelProfile) -> float | None:
        gflops = kernel.gflops
        if gflops is None or not self.peak_gflops:
            return None
        return gflops / self.peak_gflops

    def slow(self, kernel: KernelProfile) -> bool:
        """Whether a kernel is compute bound (at least COMPUTE_BOUND_INTENSITY FLOPs per byte
        it reads and writes, and SLOW_MIN_FLOP per call: a tiny kernel's launch and tails are
        its time) yet below SLOW_PEAK_FRACTION of the peak: a schedule that falls short, worth
        a look (and a report), not the machine's memory.

        Example:
            >>> report.slow(report.kernels[0])            # doctest: +SKIP
            False
        """
        fraction, intensity = self.peak_fraction(kernel), kernel.intensity
        return (fraction is not None and intensity is not None
                and intensity >= COMPUTE_BOUND_INTENSITY and fraction < SLOW_PEAK_FRACTION
                and kernel.flop >= SLOW_MIN_FLOP * kernel.calls)

    def slow_kernels(self) -> list:
        """The kernels `slow` marks, slowest first.

        Example:
            >>> [k.name for k in report.slow_kernels()]   # doctest: +SKIP
            ['fused_nn_conv2d_add_3']
        """
        return [k for k in self.kernels if self.slow(k)]

    def _overall(self) -> KernelProfile:
        flops = [k.flop for k in self.kernels]
        flop = None if any(f is None for f in flops) else sum(flops)
        return KernelProfile("total", sum(k.calls for k in self.kernels), self.total, flop)

    def to_dict(self) -> dict:
        """The table as plain data (times in seconds, shares and fractions in [0, 1]).

        Example:
            >>> report.to_dict()["kernels"][0]["name"]    # doctest: +SKIP
            'fused_nn_conv2d_add_nn_relu_1'
        """
        def row(k):
            return {"name": k.name, "calls": k.calls, "seconds": k.seconds, "share": self.share(k),
                    "flop": k.flop, "gflops": k.gflops, "peak_fraction": self.peak_fraction(k),
                    "bytes": k.bytes, "intensity": k.intensity, "slow_schedule": self.slow(k)}
        return {"kernels": [row(k) for k in self.kernels], "total": row(self._overall()),
                "end_to_end_seconds": self.end_to_end, "coverage": self.coverage,
                "peak_gflops": self.peak_gflops, "threads": self.threads,
                "number": self.number, "repeat": self.repeat}

    def to_json(self) -> str:
        """to_dict() as JSON text.

        Example:
            >>> json.loads(report.to_json())["coverage"]  # doctest: +SKIP
            0.97
        """
        return json.dumps(self.to_dict(), indent=1)

    def __str__(self):
        unit, scale, digits = next(u[1:] for u in _TIME_UNITS if self.end_to_end >= u[0])
        rows = [self._cells(k, scale, digits) for k in self.kernels]
        total = self._cells(self._overall(), scale, digits)
        header = ("kernel", "calls", f"time ({unit})", "share", "GFLOPS", "% peak")
        widths = [max(len(r[c]) for r in [header, total, *rows]) for c in range(len(header))]

        def line(cells):
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths)))
        rule = "-" * len(line(header))
        peak = (f"peak: {self.peak_gflops:.1f} GFLOPS (float32, {self.threads} threads)"
                if self.peak_gflops else "peak: unknown (it is measured with the C compiler, "
                "which was not found)")
        slow = [f"slow schedule: {k.name} (output {list(k.shape or ())}): "
                f"{self.peak_fraction(k):.0%} of peak, compute bound ({k.intensity:.0f} "
                f"FLOP/byte)" for k in self.slow_kernels()]
        return "\n".join([line(header), rule, *map(line, rows), rule, line(total), *slow, peak,
                          f"sum of kernel times {self.total * scale:.{digits}f} {unit} vs "
                          f"end-to-end latency {self.end_to_end * scale:.{digits}f} {unit} "
                          f"({self.coverage:.1%})"])

    def _cells(self, k: KernelProfile, scale: float, digits: int) -> tuple:
        gflops, fraction = k.gflops, self.peak_fraction(k)
        # "-": no float arithmetic (a copy, a layout change); "?": count not recorded.
        no_rate = "?" if k.flop is None else "-"
        return (k.name, str(k.calls), f"{k.seconds * scale:.{digits}f}", f"{self.share(k):.1%}",
                no_rate if gflops is None else f"{gflops:.2f}",
                no_rate if fraction is None else f"{fraction:.1%}" + (" slow" if self.slow(k)
                                                                      else ""))

    def __repr__(self):
        return (f"<ProfileReport: {len(self.kernels)} kernels, {self.total * 1e3:.4f} ms of "
                f"{self.end_to_end * 1e3:.4f} ms end to end>")


# A kernel doing at least this many FLOPs per byte it reads and writes is compute bound on
# these CPUs (peak ~100-200 GFLOP/s against ~10-20 GB/s from memory), so below
# SLOW_PEAK_FRACTION of the peak its schedule is the problem (issue 34's performance floor).
COMPUTE_BOUND_INTENSITY = 10.0
SLOW_PEAK_FRACTION = 0.25
SLOW_MIN_FLOP = 10**7

# (shortest end-to-end latency, unit, seconds -> unit, decimals): the table's time unit.
_TIME_UNITS = ((10e-3, "ms", 1e3, 3), (0.0, "us", 1e6, 1))

# dtype kind -> random values. Integers and booleans are 0 or 1: valid token ids, masks and
# indices for any model, where larger values could index out of bounds.
_RANDOM_BY_KIND = {
    "f": lambda rng, shape, dtype: rng.standard_normal(shape).astype(dtype),
}


def _zeros_and_ones(rng, shape, dtype):
    return rng.integers(0, 2, size=shape).astype(dtype)


def random_inputs(lib, seed: int = 0) -> dict:
    """Seeded random arrays for every input of a compiled model, in its shapes and dtypes:
    floats standard normal, integers and booleans 0 or 1.

    Example:
        >>> {n: a.shape for n, a in random_inputs(lib).items()}   # doctest: +SKIP
        {'x': (1, 3, 64, 64)}
    """
    rng = np.random.default_rng(seed)
    arrays = {}
    symbolic = [str(s) for s in lib.input_specs() if not all(isinstance(d, int) for d in s.shape)]
    if symbolic:
        raise ValueError(f"inputs {', '.join(symbolic)} have symbolic sizes; give the inputs "
                         f"to time the model with")
    for spec in lib.input_specs():
        dtype = np.dtype(spec.dtype)
        arrays[spec.name] = _RANDOM_BY_KIND.get(dtype.kind, _zeros_and_ones)(rng, spec.shape,
                                                                             dtype)
    return arrays


def _executor(executor_or_lib, inputs) -> GraphExecutor:
    if isinstance(executor_or_lib, GraphIO):          # a GraphExecutor, on the CPU or a GPU
        executor = executor_or_lib
    elif isinstance(executor_or_lib, ModelLibrary):
        executor = GraphExecutor(executor_or_lib)
        if inputs is None:
            inputs = random_inputs(executor_or_lib)
    else:
        raise TypeError(f"profile takes a GraphExecutor or a compiled model (kiln.compile, "
                        f"kiln.runtime.load_module), got {type(executor_or_lib).__name__}")
    for name, value in (inputs or {}).items():
        executor.set_input(name, value)
    return executor


def _kernel_timer(executor: GraphExecutor):
    """runs -> seconds spent in each kernel call of the graph over `runs` runs, on the calls
    the executor's own run loop makes (GraphExecutor.kernel_calls); on a GPU, each call timed
    by the device's events (DeviceGraphExecutor.kernel_seconds)."""
    if not isinstance(executor, GraphExecutor):
        return executor.kernel_seconds
    calls = executor.kernel_calls()
    n = len(calls)
    native = _native_profiler()

    def fail(k, status):
        raise calls.functions[k].status_error(status, " while the model was being profiled")

    if native is not None:
        elapsed = (ctypes.c_int64 * max(n, 1))()
        failed = ctypes.c_int32(-1)

        def run(runs: int) -> list:
            ctypes.memset(elapsed, 0, ctypes.sizeof(elapsed))
            # One native call per run, as GraphExecutor.run makes, so the pause between runs
            # (in which the pool's threads may go to sleep) is the same in both.
            for _ in range(runs):
                status = native(n, calls.fns, calls.args, calls.num_args, 1, elapsed,
                                ctypes.byref(failed))
                if status:
                    fail(failed.value, status)
            return [elapsed[k] * 1e-9 for k in range(n)]
        return run

    def run_in_python(runs: int) -> list:
        totals = [0] * n
        for _ in range(runs):
            before = time.perf_counter_ns()
            for k in range(n):
                status = calls.call(k)
                after = time.perf_counter_ns()
                totals[k] += after - before
                before = after
                if status:
                    fail(k, status)
        return [t * 1e-9 for t in totals]
    return run_in_python


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"profile: {name} must be a positive int, got {value!r}")
    return value


def _kernel_rows(graph: dict, per_call: list) -> tuple:
    """One row per compiled function: its calls' times summed per repeat, then the median."""
    flops = graph.get("flops") or {}
    entries = graph["entries"]

    def entry_bytes(e) -> int:
        return int(np.prod(entries[e]["shape"], dtype=np.int64)) \
            * _dtype.to_numpy(entries[e]["dtype"]).itemsize

    calls_of: dict = {}
    for k, kern in enumerate(graph["kernels"]):
        calls_of.setdefault(kern["func"], []).append(k)
    rows = []
    for name, calls in calls_of.items():
        per_repeat = [sum(per_call[k][r] for k in calls) for r in range(len(per_call[calls[0]]))]
        flop = flops.get(name)
        kerns = [graph["kernels"][k] for k in calls]
        moved = sum(entry_bytes(e) for kern in kerns for e in kern["inputs"] + kern["outputs"])
        outs = kerns[0]["outputs"]
        rows.append(KernelProfile(name, len(calls), statistics.median(per_repeat),
                                  None if flop is None else int(flop) * len(calls), moved,
                                  tuple(entries[outs[0]]["shape"]) if outs else None))
    return tuple(sorted(rows, key=lambda row: -row.seconds))


def profile(executor_or_lib, inputs: dict | None = None, number: int = 10, repeat: int = 5,
            peak_gflops: float | None = None) -> ProfileReport:
    """Time every kernel of a compiled model inside its runs: `repeat` batches of `number`
    runs, each alternating with a batch of plain runs for the end-to-end latency; a kernel's
    time is the median over the batches. Takes a GraphExecutor (its inputs set, or given in
    `inputs`) or a compiled model (inputs: `inputs`, else random_inputs). `peak_gflops`
    overrides this machine's measured, cached peak (kiln.runtime.peak).

    Example:
        >>> report = kiln.runtime.profile(lib, number=20, repeat=5)   # doctest: +SKIP
        >>> print(report)                                             # doctest: +SKIP
        >>> report.coverage                                           # doctest: +SKIP
        0.98
    """
    number, repeat = _positive_int("number", number), _positive_int("repeat", repeat)
    executor = _executor(executor_or_lib, inputs)
    # Measured before timing the model: the first measurement loads every core for a moment.
    # (It is the CPU's: a GPU's is not measured, so its kernels get no share of a peak.)
    on_cpu = isinstance(executor, GraphExecutor)
    peak = float(peak_gflops) if peak_gflops is not None else \
        _peak.peak_gflops() if on_cpu else None
    executor.run()                 # warm-up, and the check that every input is set
    # A model with symbolic sizes is timed as the static graph of the sizes it just ran at.
    executor = getattr(executor, "bound_executor", lambda: executor)()
    timer = _kernel_timer(executor)
    kernels = executor.lib.graph["kernels"]
    per_call = [[] for _ in kernels]      # seconds per run of each kernel call, per repeat
    end_to_end = []
    for _ in range(repeat):
        end_to_end.append(executor.benchmark(number=number, repeat=1, warmup=0).results[0])
        for k, seconds in enumerate(timer(number)):
            per_call[k].append(seconds / number)
    return ProfileReport(_kernel_rows(executor.lib.graph, per_call),
                         statistics.median(end_to_end), peak, number, repeat, num_threads())

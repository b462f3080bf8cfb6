"""This machine's single-precision peak FLOP/s, measured once and cached.

The measurement: every thread of kiln's pool runs twelve independent chains of fused
multiply-adds on the widest float vector the C compiler targets for this host (-march=native:
64 bytes with AVX-512, 32 with AVX, else 16). Twelve chains cover an FMA's latency on two FMA
units, so the units never wait; the best of a few timed launches is the peak.

The figure is cached in cache_dir()/peak.json under a key made of the CPU's name, a hash of its
feature flags and the pool's thread count: another machine, CPU or thread count gets a fresh
measurement. A cache that cannot be read is measured over (and that file, kiln's own, rewritten);
one that cannot be written only costs a measurement next time. Without a C compiler there is no
figure (None), never an error.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from .native_build import NativeBuildError, build_shared_library, cache_dir
from .threadpool import num_threads

__all__ = ["peak_gflops", "measure_peak_gflops", "host_key", "PEAK_CACHE_NAME"]

PEAK_CACHE_NAME = "peak.json"
_FORMAT = "kiln-peak"
_VERSION = 1
_MIN_SECONDS = 0.02        # one timed launch lasts at least this long...
_TRIALS = 5                # ...and the best of this many is the peak

_SOURCE = r"""
#include <stdint.h>
#include <time.h>

#if defined(__AVX512F__)
#define VEC_BYTES 64
#elif defined(__AVX__)
#define VEC_BYTES 32
#else
#define VEC_BYTES 16
#endif
#define LANES (VEC_BYTES / 4)
#define CHAINS 12

typedef float vec __attribute__((vector_size(VEC_BYTES)));
typedef int32_t (*task_fn)(int32_t task, int32_t num_tasks, void* closure);
typedef int32_t (*launch_fn)(task_fn task, void* closure, int32_t num_tasks);

struct job { int64_t iterations; float* sink; };

static vec splat(float x) {
  vec v;
  for (int l = 0; l < LANES; ++l) v[l] = x;
  return v;
}

#define STEP(a) a = a * m + c

static int32_t fma_chains(int32_t task, int32_t num_tasks, void* closure) {
  struct job* job = (struct job*)closure;
  /* a -> a * m + c converges to c / (1 - m): values stay normal and bounded. */
  vec m = splat(0.999999f), c = splat(1e-6f);
  vec a0 = splat(1.00f), a1 = splat(1.01f), a2 = splat(1.02f), a3 = splat(1.03f);
  vec a4 = splat(1.04f), a5 = splat(1.05f), a6 = splat(1.06f), a7 = splat(1.07f);
  vec a8 = splat(1.08f), a9 = splat(1.09f), a10 = splat(1.10f), a11 = splat(1.11f);
  for (int64_t i = 0; i < job->iterations; ++i) {
    STEP(a0); STEP(a1); STEP(a2); STEP(a3); STEP(a4); STEP(a5);
    STEP(a6); STEP(a7); STEP(a8); STEP(a9); STEP(a10); STEP(a11);
  }
  vec s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11));
  float total = 0.0f;
  for (int l = 0; l < LANES; ++l) total += s[l];
  job->sink[task] = total;   /* a result someone reads: the chains cannot be optimized away */
  (void)num_tasks;
  return 0;
}

int32_t kiln_peak_flop_per_iteration(void) { return CHAINS * LANES * 2; }

int32_t kiln_peak_run(launch_fn launch, int32_t num_tasks, int64_t iterations, float* sink,
                      double* seconds) {
  struct job job = {iterations, sink};
  struct timespec start, stop;
  clock_gettime(CLOCK_MONOTONIC, &start);
  int32_t status = launch(fma_chains, &job, num_tasks);
  clock_gettime(CLOCK_MONOTONIC, &stop);
  *seconds = (double)(stop.tv_sec - start.tv_sec) + 1e-9 * (double)(stop.tv_nsec - start.tv_nsec);
  return status;
}
"""
# -march=native picks the vector width; contraction turns a * m + c into one FMA instruction.
_FLAG_SETS = (("-O2", "-march=native", "-ffp-contract=fast"), ("-O2", "-ffp-contract=fast"))


def _cpu_description() -> tuple[str, str]:
    """(CPU model name, its feature flags) from /proc/cpuinfo, else what platform knows."""
    name, features = "", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "cpu model", "hardware") and not name:
                    name = value.strip()
                elif key in ("flags", "features") and not features:
                    features = value.strip()
                if name and features:
                    break
    except OSError:
        pass
    return name or platform.processor() or platform.machine() or "unknown cpu", features


def host_key(threads: int | None = None) -> str:
    """The cache key of a peak figure: CPU name, a hash of its feature flags, thread count.

    Example:
        >>> host_key(4).endswith("|4 threads")
        True
    """
    name, features = _cpu_description()
    digest = hashlib.sha256(" ".join(sorted(features.split())).encode()).hexdigest()[:12]
    return f"{name}|{platform.machine()} features {digest}|{threads or num_threads()} threads"


def _kernel_library():
    for flags in _FLAG_SETS:
        try:
            lib = ctypes.CDLL(str(build_shared_library(_SOURCE, "kiln_peak", flags)))
        except (NativeBuildError, OSError):
            continue
        lib.kiln_peak_run.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64,
                                      ctypes.c_void_p, ctypes.POINTER(ctypes.c_double)]
        lib.kiln_peak_run.restype = ctypes.c_int32
        lib.kiln_peak_flop_per_iteration.restype = ctypes.c_int32
        return lib
    return None


def measure_peak_gflops() -> float | None:
    """Measure the peak now (about half a second), on all of the pool's threads; None when the
    kernel cannot be built (no C compiler).

    Example:
        >>> measure_peak_gflops() > 0                     # doctest: +SKIP
        True
    """
    from .support_lib import parallel_launch_address

    lib = _kernel_library()
    if lib is None:
        return None
    tasks = num_threads()
    sink = (ctypes.c_float * tasks)()
    seconds = ctypes.c_double()
    launch = parallel_launch_address()

    def run(iterations: int) -> float:
        if lib.kiln_peak_run(launch, tasks, iterations, sink, ctypes.byref(seconds)):
            raise RuntimeError("the peak FLOP/s kernel failed in kiln's thread pool")
        return seconds.value

    iterations = 1 << 14
    while run(iterations) < _MIN_SECONDS and iterations < 1 << 40:
        iterations *= 2
    best = min(run(iterations) for _ in range(_TRIALS))
    flop = lib.kiln_peak_flop_per_iteration() * iterations * tasks
    return flop / best / 1e9


def _read_entries(path: Path) -> dict:
    """The cache's entries; {} for a missing, unreadable or foreign file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if (not isinstance(data, dict) or data.get("format") != _FORMAT
            or data.get("version") != _VERSION or not isinstance(data.get("entries"), dict)):
        return {}
    return data["entries"]


def _cached_gflops(entries: dict, key: str) -> float | None:
    entry = entries.get(key)
    value = entry.get("gflops") if isinstance(entry, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _write_entries(path: Path, entries: dict) -> None:
    """Store the entries; a cache that cannot be written (read-only home, the path is a
    directory...) is left as it is: the figure then serves this call only."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".peak.", suffix=".tmp", dir=path.parent)
    except OSError:
        return
    # Written under a temporary name and renamed, so a concurrent reader never sees half a file.
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"format": _FORMAT, "version": _VERSION, "entries": entries}, f, indent=1)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


def peak_gflops(cache_file=None, refresh: bool = False) -> float | None:
    """This machine's single-precision peak in GFLOP/s on kiln's pool threads: from the cache
    (default cache_dir()/peak.json) when it holds a figure for this host_key(), else measured
    and stored there. `refresh` measures again. None when it cannot be measured.

    Example:
        >>> peak_gflops() > 0                              # doctest: +SKIP
        True
    """
    path = Path(cache_file) if cache_file is not None else cache_dir() / PEAK_CACHE_NAME
    key = host_key()
    entries = _read_entries(path)
    cached = None if refresh else _cached_gflops(entries, key)
    if cached is not None:
        return cached
    gflops = measure_peak_gflops()
    if gflops is None:
        return None
    entries[key] = {"gflops": gflops, "threads": num_threads(),
                    "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    _write_entries(path, entries)
    return gflops

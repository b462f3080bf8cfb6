"""What a dask worker runs for a tuning client: build one candidate, measure one candidate.

The jobs reuse the local measurement machinery inside the worker: a LocalBuilder / LocalRunner
kept per worker process (per thread for builders), whose isolated worker processes (workers.py)
build and time the candidate. So a candidate that aborts LLVM, segfaults or hangs costs one of
those processes, never the dask worker, and its status is classified exactly as a local
tuning run classifies it. A built candidate travels back to the client as bytes (a shared
library, or a device module's JSON) and from there to a measuring worker.

Arguments and results are JSON-like data (dicts, lists, strings, numbers, bytes); the client
turns results back into BuildResult / MeasureResult, which validate them.
"""
from __future__ import annotations

import itertools
import os
import tempfile
import threading
import time
from pathlib import Path

from ..measure import BuildResult, LocalBuilder, LocalRunner
from ..task import Task

__all__ = ["build", "measure", "simulated_build", "simulated_measure"]

_local = threading.local()              # this thread's LocalBuilder and its options
_runners: dict[str, LocalRunner] = {}   # options (JSON text) -> runner
_runner_lock = threading.Lock()
_files = itertools.count()
_dir: tempfile.TemporaryDirectory | None = None


def _worker_name() -> str:
    try:
        from distributed import get_worker
        return get_worker().address
    except (ImportError, ValueError):    # called outside a dask worker (tests)
        return f"pid {os.getpid()}"


def _key(options: dict) -> str:
    return repr(sorted(options.items()))


def _builder(options: dict) -> LocalBuilder:
    """This thread's LocalBuilder with `options` (one isolated build process per dask thread:
    the dask worker's threads are its build slots)."""
    key = _key(options)
    if getattr(_local, "key", None) != key:
        if getattr(_local, "builder", None) is not None:
            _local.builder.close()
        _local.builder = LocalBuilder(n_parallel=1, **options)
        _local.key = key
    return _local.builder


def build(task: dict, config: dict, options: dict) -> dict:
    """Build `config` of `task` (Task.to_json) with LocalBuilder(**options); returns
    {"status", "message", "seconds", "worker", "built"} where "built" (status ok) is the
    runner's description of it, its file replaced by the file's bytes ("data") and suffix.

    Example:
        >>> build(task.to_json(), config.to_json(), {"timeout": 10.0})["status"]  # doctest: +SKIP
        'ok'
    """
    (result,) = _builder(options).build(Task.from_json(task), [config])
    out = {"status": result.status, "message": result.message, "seconds": result.seconds,
           "worker": _worker_name(), "built": None}
    if result.ok:
        path = Path(result.built["file"])
        wire = {k: v for k, v in result.built.items() if k != "file"}
        out["built"] = {**wire, "suffix": path.suffix, "data": path.read_bytes()}
        result.discard()
    return out


def _runner(options: dict) -> LocalRunner:
    """The LocalRunner with `options` (one at a time: a client with other options replaces
    it, and its process)."""
    key = _key(options)
    with _runner_lock:
        if key not in _runners:
            for old in _runners.values():
                old.close()
            _runners.clear()
            _runners[key] = LocalRunner(**options)
        return _runners[key]


def _check_cores(threads: int) -> None:
    from ...runtime.threadpool import usable_cpus
    cores = usable_cpus()
    if threads > cores:
        raise RuntimeError(f"worker {_worker_name()} has {cores} CPUs, fewer than the "
                           f"{threads} threads the candidates run with: its timings would "
                           f"not be the client's machine's")


def _local_file(built: dict) -> dict:
    """A built candidate from the wire written to this worker's disk: the runner's form."""
    global _dir
    with _runner_lock:
        if _dir is None:
            _dir = tempfile.TemporaryDirectory(prefix="kiln_cluster_")
        path = Path(_dir.name) / f"candidate{next(_files)}{built['suffix']}"
    path.write_bytes(built["data"])
    local = {k: v for k, v in built.items() if k not in ("data", "suffix")}
    return {**local, "file": str(path)}


def measure(task: dict, config: dict, built: dict, build_seconds: float, options: dict) -> dict:
    """Time a built candidate (from `build`) with LocalRunner(**options) on this worker's
    device; returns a MeasureResult's fields as a dict, plus "worker".

    Example:
        >>> measure(task.to_json(), cfg, b["built"], b["seconds"], {})["status"]  # doctest: +SKIP
        'ok'
    """
    _check_cores(options["num_threads"])
    runner = _runner(options)
    result = BuildResult(config, _local_file(built), "ok", "", build_seconds)
    try:
        with _runner_lock:              # one measurement at a time on this device
            (res,) = runner.run(Task.from_json(task), [result])
    finally:
        result.discard()
    return {"costs": list(res.costs), "status": res.status, "message": res.message,
            "all_cost": res.all_cost, "timestamp": res.timestamp, "worker": _worker_name()}


# ------------------------------------------------------------------ simulated devices
def simulated_build(seconds: float) -> dict:
    """Occupy a build slot for `seconds`, as building a candidate would (cluster scaling
    without compiling: kiln.autotvm.cluster.simulate).

    Example:
        >>> simulated_build(0.0)["status"]
        'ok'
    """
    time.sleep(seconds)
    return {"status": "ok", "message": "", "seconds": seconds, "worker": _worker_name(),
            "built": {"suffix": ".sim", "data": b"", "simulated": True}}


def simulated_measure(cost: float, hold: float, repeat: int) -> dict:
    """Occupy this worker's simulated device for `hold` seconds and report `cost` (from the
    client's cost table) `repeat` times.

    Example:
        >>> simulated_measure(1e-3, 0.0, 2)["costs"]
        [0.001, 0.001]
    """
    time.sleep(hold)
    return {"costs": [cost] * repeat, "status": "ok", "message": "", "all_cost": hold,
            "timestamp": time.time(), "worker": _worker_name()}

"""Measuring candidates: build them in parallel worker processes, time them in another.

    option = measure_option(builder=LocalBuilder(timeout=10), runner=LocalRunner(number=4))
    with create_measure_batch(task, option) as measure:
        results = measure([space.get(i) for i in (3, 17, 42)])   # list[MeasureResult]

A candidate is built once: a builder worker lowers and compiles it and links the kernel into a
shared library; the runner worker loads that library (kiln.runtime only) and times it with
seeded random inputs. Both kinds of worker are fresh interpreters (workers.py), so a candidate
that aborts LLVM, segfaults or hangs costs one worker, never the tuner. Every candidate gets a
MeasureResult whose status is one of
  ok             costs = seconds per call, one per repeat
  compile_error  the template raised, lowering / codegen failed, or the builder worker died
  runtime_error  loading or calling the kernel failed, or the runner worker died
  timeout        building or running took longer than the builder's / runner's timeout
  wrong_answer   (check_correctness) its buffers after one call differ from the default
                 config's: np.isclose(rtol=1e-3, atol=1e-3) for floats, equality otherwise
and carries all_cost (wall seconds spent building and running it) and a timestamp.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..runtime.timing import check_cache_flush
from .record import MeasureResult
from .space import ConfigEntity, FallbackConfig
from .task import Task
from .workers import Outcome, WorkerPool

__all__ = ["BuildResult", "LocalBuilder", "LocalRunner", "MeasureBatch", "MeasureOption",
           "create_measure_batch", "measure_option"]

_JOBS = "kiln.autotvm.measure_jobs"
_MAX_MESSAGE = 2000
# A candidate's LLVM IR grows with its unrolled register tile, which a target's vector
# registers bound: past IR_LINES_PER_REGISTER lines per register, it spills. Measured on
# ResNet-18 with AVX2 (16 registers, so 24,000 lines): the 3 fastest configs of every task had
# at most 8,216 lines, and each of the 16 of 348 candidates past 24,000 ran 2.9-10x slower
# than its task's best while taking 27% of all build time (1-7 s of LLVM each). AVX-512's
# 48,000 follows from its 32 registers (not measured).
IR_LINES_PER_REGISTER = 1_500


def max_ir_lines_for(target) -> int:
    """The default bound on a candidate's LLVM IR for `target`: IR_LINES_PER_REGISTER per
    vector register.

    Example:
        >>> from kiln.target import Target
        >>> max_ir_lines_for(Target("llvm -mcpu=haswell")), max_ir_lines_for(Target("llvm -mcpu=skylake-avx512"))
        (24000, 48000)
    """
    return IR_LINES_PER_REGISTER * target.vector_registers

# Imported by a worker before it takes jobs, so that build / run timeouts do not pay for them.
_BUILD_PRELOAD = (_JOBS, "kiln.driver", "kiln.codegen.llvm", "kiln.te")
_RUN_PRELOAD = (_JOBS, "kiln.runtime")


def _positive(owner: str, name: str, value, integer: bool = False, zero: bool = False):
    kinds = (int,) if integer else (int, float)
    ok = not isinstance(value, bool) and isinstance(value, kinds)
    if ok:
        ok = value >= 0 if zero else value > 0
    if not ok:
        what = "an int" if integer else "a number"
        bound = ">= 0" if zero else "> 0"
        raise ValueError(f"{owner}: {name} must be {what} {bound}, got {value!r}")
    return value


def _worker_env(threads: int | None) -> dict:
    """Workers compile and run with `threads` threads, by default this process's kiln runtime's
    count (code generators bake it into parallel loops; the runner's pool must match)."""
    from ..runtime import num_threads
    return {"KILN_NUM_THREADS": str(num_threads() if threads is None else threads)}


def _short(text: str) -> str:
    text = str(text).strip()
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + " ..."


# ------------------------------------------------------------------------------ builder
@dataclass(frozen=True)
class BuildResult:
    """One candidate after building: `built` (the library and its signature, for the runner)
    when status is "ok", else the failure status and message; `seconds` of wall time.

    Example:
        >>> BuildResult({"index": 0, "knobs": {}}, None, "timeout", "ran past 1 s", 1.0).ok
        False
    """

    config: dict
    built: dict | None
    status: str
    message: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_measurement(self) -> MeasureResult:
        """The record of a candidate that did not build: its status and message passed on.

        Example:
            >>> failed = BuildResult({"index": 0}, None, "timeout", "ran past 1 s", 1.0)
            >>> failed.as_measurement().status
            'timeout'
        """
        return MeasureResult((), self.status, self.message, self.seconds, time.time())

    def discard(self) -> None:
        """Delete the built file (the runner has loaded it or it is not needed); a candidate
        built elsewhere (its bytes in hand) has none."""
        if self.built is not None and "file" in self.built:
            Path(self.built["file"]).unlink(missing_ok=True)


class LocalBuilder:
    """Lowers and compiles candidates in `n_parallel` worker processes (default: one per CPU
    this process may use), each build bounded by `timeout` seconds; a worker is replaced after
    `max_builds_per_worker` builds (llvmlite leaks a little per module). A candidate whose
    LLVM IR runs past `max_ir_lines` (default: max_ir_lines_for the task's target) is a
    compile error before LLVM starts: such code (a register tile of more vectors than the
    target has registers, all unrolled) spills, runs slowly, and cost seconds of LLVM (up to
    the whole timeout, and then its worker). Candidates are built for `num_threads` threads
    (default: this process's kiln.runtime.num_threads()).

    Example:
        >>> builder = LocalBuilder(timeout=10.0)
        >>> builder.n_parallel >= 1
        True
    """

    def __init__(self, timeout: float = 10.0, n_parallel: int | None = None,
                 max_builds_per_worker: int = 100, max_ir_lines: int | None = None,
                 num_threads: int | None = None):
        self.timeout = _positive("LocalBuilder", "timeout", timeout)
        self.num_threads = None if num_threads is None else \
            _positive("LocalBuilder", "num_threads", num_threads, integer=True)
        self.max_ir_lines = None if max_ir_lines is None else \
            _positive("LocalBuilder", "max_ir_lines", max_ir_lines, integer=True)
        if n_parallel is None:
            from ..runtime.threadpool import usable_cpus
            n_parallel = usable_cpus()
        self.n_parallel = _positive("LocalBuilder", "n_parallel", n_parallel, integer=True)
        self.max_builds_per_worker = _positive("LocalBuilder", "max_builds_per_worker",
                                               max_builds_per_worker, integer=True)
        self._pool: WorkerPool | None = None
        self._dir: tempfile.TemporaryDirectory | None = None
        self._count = 0
        self._lock = threading.Lock()

    def build(self, task: Task, configs: list[dict]) -> list[BuildResult]:
        """Build each config (JSON form) of `task`; results in the same order, never raises
        for a bad candidate.

        Example:
            >>> [b.status for b in builder.build(task, [space.get(0).to_json()])]  # doctest: +SKIP
            ['ok']
        """
        with self._lock:        # tuners of several tasks at once share a builder
            return self._build(task, configs)

    def _build(self, task: Task, configs: list[dict]) -> list[BuildResult]:
        if self._pool is None:
            self._pool = WorkerPool(self.n_parallel, _worker_env(self.num_threads),
                                    self.max_builds_per_worker,
                                    preload=_BUILD_PRELOAD)
            self._dir = tempfile.TemporaryDirectory(prefix="kiln_build_")
        task_json = task.to_json()
        # (the bound is on LLVM IR: a device candidate's code is not LLVM's)
        limit = self.max_ir_lines if self.max_ir_lines is not None or task.target.is_device \
            else max_ir_lines_for(task.target)
        payloads = []
        for config in configs:
            self._count += 1
            payloads.append({"task": task_json, "config": config, "dir": self._dir.name,
                             "max_ir_lines": limit,
                             "name": f"candidate{self._count}"})
        outcomes = self._pool.map(f"{_JOBS}:build_candidate", payloads, self.timeout)
        return [self._result(c, o) for c, o in zip(configs, outcomes)]

    def _result(self, config: dict, outcome: Outcome) -> BuildResult:
        where = f"config #{config.get('index')}"
        if outcome.kind == "ok":
            return BuildResult(config, outcome.value, "ok", "", outcome.seconds)
        if outcome.kind == "timeout":
            message = f"building {where} {outcome.value}"
            return BuildResult(config, None, "timeout", message, outcome.seconds)
        if outcome.kind == "crash":
            message = f"building {where} crashed the builder: {outcome.value}"
        else:
            message = f"building {where} failed: {outcome.value}"
        return BuildResult(config, None, "compile_error", _short(message), outcome.seconds)

    def close(self) -> None:
        """Stop the workers and delete built files (both come back on the next build)."""
        if self._pool is not None:
            self._pool.close()
            self._dir.cleanup()
            self._pool = self._dir = None


# ------------------------------------------------------------------------------ runner
class LocalRunner:
    """Times built candidates one at a time in an isolated worker process.

    Each measurement: one untimed call, then `repeat` timings of `number` calls (more when
    `min_repeat_ms` asks for longer timings; kiln.runtime.time_evaluator), all within
    `timeout` seconds; `cooldown_interval` seconds of sleep between candidates. With
    `enable_cpu_cache_flush`, every buffer argument but the first is evicted from the caches
    before each timed call, as a kernel inside a model finds its weights (kiln.runtime.
    time_evaluator's cache_flush; tune_model measures this way; a GPU target's candidates run
    on device 0 of its kind, timed by the device's events, without it). With
    `check_correctness`, the candidate's buffers after one call on seeded random inputs must
    match the task's default config's (computed once per task by the runner):
    np.isclose(rtol, atol) for floats, equality for integers and bools. Candidates run with
    `num_threads` threads (default: this process's kiln.runtime.num_threads()).

    Example:
        >>> runner = LocalRunner(number=4, repeat=3, check_correctness=True)
        >>> runner.repeat
        3
    """

    n_parallel = 1

    def __init__(self, number: int = 4, repeat: int = 3, min_repeat_ms: float = 0,
                 timeout: float = 10.0, cooldown_interval: float = 0.0,
                 check_correctness: bool = False, rtol: float = 1e-3, atol: float = 1e-3,
                 max_runs_per_worker: int = 100, enable_cpu_cache_flush: bool = False,
                 num_threads: int | None = None):
        self.number = _positive("LocalRunner", "number", number, integer=True)
        self.repeat = _positive("LocalRunner", "repeat", repeat, integer=True)
        self.min_repeat_ms = _positive("LocalRunner", "min_repeat_ms", min_repeat_ms, zero=True)
        self.timeout = _positive("LocalRunner", "timeout", timeout)
        self.cooldown_interval = _positive("LocalRunner", "cooldown_interval",
                                           cooldown_interval, zero=True)
        if not isinstance(check_correctness, bool):
            raise ValueError(f"LocalRunner: check_correctness must be True or False, got "
                             f"{check_correctness!r}")
        self.check_correctness = check_correctness
        self.enable_cpu_cache_flush = check_cache_flush(enable_cpu_cache_flush,
                                                        "LocalRunner: enable_cpu_cache_flush")
        self.rtol = _positive("LocalRunner", "rtol", rtol, zero=True)
        self.atol = _positive("LocalRunner", "atol", atol, zero=True)
        self.max_runs_per_worker = _positive("LocalRunner", "max_runs_per_worker",
                                             max_runs_per_worker, integer=True)
        self.num_threads = None if num_threads is None else \
            _positive("LocalRunner", "num_threads", num_threads, integer=True)
        self._pool: WorkerPool | None = None
        self._dir: tempfile.TemporaryDirectory | None = None
        self._references: dict[str, tuple[str | None, str]] = {}   # task key -> (path, why not)
        self._last_run = None
        self._lock = threading.Lock()

    def _start(self) -> None:
        if self._pool is None:
            self._pool = WorkerPool(1, _worker_env(self.num_threads), self.max_runs_per_worker,
                                    preload=_RUN_PRELOAD)
            self._dir = tempfile.TemporaryDirectory(prefix="kiln_run_")
            self._references = {}

    def _reference(self, task: Task) -> str | None:
        """Path of the task's reference outputs (.npz), computed on first use; None (with one
        warning) when the default config itself cannot be built or run."""
        if task.key not in self._references:
            path = os.path.join(self._dir.name, f"reference{len(self._references)}.npz")
            payload = {"task": task.to_json(), "path": path}
            # The default config is built in the runner's worker: allow a build and a run.
            (outcome,) = self._pool.map(f"{_JOBS}:reference_outputs", [payload],
                                        2 * self.timeout + 30.0)
            if outcome.kind == "ok":
                self._references[task.key] = (path, "")
            else:
                why = _short(f"the default config of {task.key} failed ({outcome.kind}): "
                             f"{outcome.value}")
                warnings.warn(f"check_correctness: outputs are not checked, {why}",
                              stacklevel=3)
                self._references[task.key] = (None, why)
        return self._references[task.key][0]

    def run(self, task: Task, builds: list[BuildResult]) -> list[MeasureResult]:
        """Measure each build; a failed build passes its status through. Same order; never
        raises for a bad candidate.

        Example:
            >>> [r.status for r in runner.run(task, builder.build(task, configs))]  # doctest: +SKIP
            ['ok', 'compile_error']
        """
        if task.target.is_cross:
            raise ValueError(f"LocalRunner runs candidates on this machine, which cannot run "
                             f"code for {task.target}: measure with autotvm.DeviceRunner("
                             f"{task.target.mtriple!r}) (docs/deploy_arm.md)")
        with self._lock:        # tuners of several tasks at once share a runner
            return self._run(task, builds)

    def _run(self, task: Task, builds: list[BuildResult]) -> list[MeasureResult]:
        self._start()
        reference = self._reference(task) if self.check_correctness and \
            any(b.ok for b in builds) else None
        results = []
        for build in builds:
            if not build.ok:
                results.append(build.as_measurement())
                continue
            if self.cooldown_interval and self._last_run is not None:
                time.sleep(self.cooldown_interval)
            payload = {"built": build.built, "number": self.number, "repeat": self.repeat,
                       "min_repeat_ms": self.min_repeat_ms, "reference": reference,
                       "cache_flush": self.enable_cpu_cache_flush,
                       "rtol": self.rtol, "atol": self.atol}
            (outcome,) = self._pool.map(f"{_JOBS}:run_candidate", [payload], self.timeout)
            self._last_run = time.monotonic()
            build.discard()
            results.append(self._result(task, build, outcome))
        return results

    def _result(self, task: Task, build: BuildResult, outcome: Outcome) -> MeasureResult:
        where = f"config #{build.config.get('index')}"
        all_cost = build.seconds + outcome.seconds
        if outcome.kind == "ok":
            value = outcome.value
            if value["status"] == "ok":
                note = ""
                if self.check_correctness and self._references.get(task.key, (None, ""))[1]:
                    note = f"not checked for correctness: {self._references[task.key][1]}"
                return MeasureResult(tuple(value["costs"]), "ok", _short(note), all_cost,
                                     time.time())
            return MeasureResult((), value["status"], _short(f"{where}: {value['message']}"),
                                 all_cost, time.time())
        if outcome.kind == "timeout":
            return MeasureResult((), "timeout", f"running {where} {outcome.value}", all_cost,
                                 time.time())
        if outcome.kind == "crash":
            message = f"running {where} crashed the runner: {outcome.value}"
        else:
            message = f"running {where} failed: {outcome.value}"
        return MeasureResult((), "runtime_error", _short(message), all_cost, time.time())

    def close(self) -> None:
        """Stop the worker and delete reference outputs (both come back on the next run)."""
        if self._pool is not None:
            self._pool.close()
            self._dir.cleanup()
            self._pool = self._dir = None
            self._references = {}


# ------------------------------------------------------------------------------ the batch
# A call builds its candidates on all build workers (whichever is free takes the next), then
# times them one by one. With one candidate per worker, every call waited for its slower
# build while the other worker idled, and each timing left the build workers idle too.
CANDIDATES_PER_BUILD_WORKER = 4


@dataclass(frozen=True)
class MeasureOption:
    """How to measure: a builder and a runner (see measure_option).

    Example:
        >>> measure_option().builder.timeout
        10.0
    """

    builder: LocalBuilder
    runner: LocalRunner


def measure_option(builder: LocalBuilder | None = None,
                   runner: LocalRunner | None = None) -> MeasureOption:
    """A MeasureOption; defaults LocalBuilder() and LocalRunner().

    Example:
        >>> opt = measure_option(runner=LocalRunner(number=10, repeat=3, min_repeat_ms=50))
        >>> opt.runner.number
        10
    """
    builder = LocalBuilder() if builder is None else builder
    runner = LocalRunner() if runner is None else runner
    for name, value, needs in (("builder", builder, "build"), ("runner", runner, "run")):
        if not callable(getattr(value, needs, None)) or not callable(getattr(value, "close", None)):
            raise TypeError(f"measure_option: {name} must have {needs}() and close() (like "
                            f"Local{name.capitalize()}), got {type(value).__name__}")
    return MeasureOption(builder, runner)


class MeasureBatch:
    """Measures lists of configs of one task: `batch(configs) -> list[MeasureResult]` in the
    same order. `n_parallel` is the builder's parallelism and `batch_size` how many candidates
    it likes per call (CANDIDATES_PER_BUILD_WORKER per build worker). Close it (or use it as
    a context manager) to stop its worker processes.

    Example:
        >>> with create_measure_batch(task, measure_option()) as measure:   # doctest: +SKIP
        ...     results = measure(task.config_space.sample(n=measure.n_parallel))
    """

    def __init__(self, task: Task, option: MeasureOption):
        if not isinstance(task, Task):
            raise TypeError(f"create_measure_batch: task must be a kiln.autotvm.Task, got "
                            f"{type(task).__name__}")
        if not isinstance(option, MeasureOption):
            raise TypeError(f"create_measure_batch: option must come from measure_option(), "
                            f"got {type(option).__name__}")
        module = task.to_json().get("module")
        if module == "__main__":
            raise ValueError(f"task {task.key}: its template is defined in __main__, which the "
                             f"measurement worker processes cannot import; move the template "
                             f"into a module")
        self.task = task
        self.option = option
        self.n_parallel = getattr(option.builder, "n_parallel", 1)
        self.batch_size = self.n_parallel * CANDIDATES_PER_BUILD_WORKER

    def _as_json(self, config) -> dict:
        if isinstance(config, (ConfigEntity, FallbackConfig)) or \
                (hasattr(config, "to_json") and isinstance(getattr(config, "index", None), int)):
            return config.to_json()        # (a search task's ProgramConfig too)
        if isinstance(config, dict) and "index" in config and "knobs" in config:
            return config
        if isinstance(config, int) and not isinstance(config, bool):
            return self.task.config_space.get(config).to_json()
        raise TypeError(f"measure batch of {self.task.key}: a candidate is a ConfigEntity (or "
                        f"its JSON dict, or an index), got {config!r}")

    def __call__(self, configs) -> list[MeasureResult]:
        configs = [self._as_json(c) for c in configs]
        if not configs:
            return []
        builds = self.option.builder.build(self.task, configs)
        try:
            return self.option.runner.run(self.task, builds)
        finally:
            for build in builds:
                build.discard()

    def close(self) -> None:
        """Stop the builder's and runner's worker processes."""
        self.option.builder.close()
        self.option.runner.close()

    def __enter__(self) -> "MeasureBatch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def create_measure_batch(task: Task, option: MeasureOption | None = None) -> MeasureBatch:
    """A MeasureBatch measuring configs of `task` with `option` (default: measure_option()).

    Example:
        >>> measure = create_measure_batch(task, measure_option())           # doctest: +SKIP
        >>> measure([task.config_space.get(0)])[0].status                    # doctest: +SKIP
        'ok'
    """
    return MeasureBatch(task, measure_option() if option is None else option)

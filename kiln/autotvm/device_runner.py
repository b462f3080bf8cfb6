"""DeviceRunner: time candidates on the device they are compiled for, through kiln's C runtime
(the time_kernel program, kiln/runtime/c), so that tuning for a 64-bit ARM board works from an
x86 host. Here the device is user-mode QEMU: it proves the path, and its timings say nothing
about an ARM CPU's speed. With `command`, any other prefix that runs a program built for the
target on files of this machine (another emulator, a wrapper).

    option = measure_option(builder=LocalBuilder(), runner=DeviceRunner("aarch64-linux-gnu"))
    tune_model(mod, params, target="rasp4b", measure_option=option, log_file="arm.jsonl")

Each candidate runs in its own process with a time-out: one that crashes (a signal), returns an
error status or hangs is a runtime_error or timeout result, and tuning goes on with the rest.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from ..runtime.function_info import FunctionInfo
from ..runtime.load import SYMBOL_PREFIX
from ..runtime.toolchain import run_bounded
from .measure import BuildResult, _positive, _short, _worker_env
from .measure_jobs import _mismatch, random_arguments
from .record import MeasureResult
from .task import Task
from .workers import WorkerPool

__all__ = ["DeviceRunner"]


class DeviceRunner:
    """Times built candidates one at a time on the device of `triple` (default: the task's
    target's) through the C runtime's time_kernel program, run under the device's emulator
    (QEMU for another instruction set) or `command`. Options as LocalRunner's: `number` calls per
    measurement (more when `min_repeat_ms` asks for longer ones), `repeat` measurements, each
    candidate within `timeout` seconds, `check_correctness` against the task's default config
    (run on the device too), `enable_cpu_cache_flush`, `num_threads`.

    Example:
        >>> runner = DeviceRunner("aarch64-linux-gnu", number=2, repeat=2)
        >>> runner.remote
        True
    """

    n_parallel = 1
    remote = True        # tune_model: the model is not timed here (select_in_model)

    def __init__(self, triple: str | None = None, command: list | None = None, number: int = 4,
                 repeat: int = 3, min_repeat_ms: float = 0, timeout: float = 60.0,
                 check_correctness: bool = False, rtol: float = 1e-3, atol: float = 1e-3,
                 enable_cpu_cache_flush: bool = False, num_threads: int | None = None):
        self.triple = triple
        self.command = None if command is None else [str(c) for c in command]
        self.number = _positive("DeviceRunner", "number", number, integer=True)
        self.repeat = _positive("DeviceRunner", "repeat", repeat, integer=True)
        self.min_repeat_ms = _positive("DeviceRunner", "min_repeat_ms", min_repeat_ms, zero=True)
        self.timeout = _positive("DeviceRunner", "timeout", timeout)
        self.check_correctness = bool(check_correctness)
        self.rtol = _positive("DeviceRunner", "rtol", rtol, zero=True)
        self.atol = _positive("DeviceRunner", "atol", atol, zero=True)
        if not isinstance(enable_cpu_cache_flush, bool):    # the device flushes, not this host
            raise ValueError(f"DeviceRunner: enable_cpu_cache_flush must be True or False, got "
                             f"{enable_cpu_cache_flush!r}")
        self.enable_cpu_cache_flush = enable_cpu_cache_flush
        self.num_threads = None if num_threads is None else \
            _positive("DeviceRunner", "num_threads", num_threads, integer=True)
        self._dir: tempfile.TemporaryDirectory | None = None
        self._references: dict[str, tuple[dict | None, str]] = {}    # task key -> (outputs, why)
        self._lock = threading.Lock()

    def _program(self, task) -> list[str]:
        from ..runtime.c.runner import program_for
        target = getattr(task, "target", None)
        triple = self.triple or (target.host.mtriple if target is not None else None)
        if self.triple and target is not None and \
                self.triple.split("-")[0] != target.host.machine_arch:
            raise ValueError(f"DeviceRunner({self.triple!r}) cannot measure task {task.key}, "
                             f"compiled for {target}")
        program = program_for(triple, "time_kernel")
        return [*self.command, program[-1]] if self.command is not None else program

    def run(self, task: Task, builds: list[BuildResult]) -> list[MeasureResult]:
        """Measure each build on the device; a failed build passes its status through. Same
        order; never raises for a bad candidate.

        Example:
            >>> [r.status for r in runner.run(task, builder.build(task, configs))]  # doctest: +SKIP
            ['ok', 'runtime_error']
        """
        with self._lock:
            if self._dir is None:
                self._dir = tempfile.TemporaryDirectory(prefix="kiln_device_")
            program = self._program(task)
            want = self._reference(task, program) if self.check_correctness and \
                any(b.ok for b in builds) else None
            results = []
            for build in builds:
                if not build.ok:
                    results.append(build.as_measurement())
                    continue
                results.append(self._measure(task, build, program, want))
                build.discard()
            return results

    def _measure(self, task: Task, build: BuildResult, program, want) -> MeasureResult:
        where = f"config #{build.config.get('index')}"
        start = time.perf_counter()
        outcome, value = self._call(program, build.built, dump=want is not None)

        def result(status, message="", costs=()):
            return MeasureResult(tuple(costs), status, _short(message),
                                 build.seconds + time.perf_counter() - start, time.time())
        if outcome != "ok":
            return result(outcome, f"running {where} on the device: {value}")
        costs, got = value
        if want is not None:
            why = _mismatch(got, want, self.rtol, self.atol)
            if why is not None:
                return result("wrong_answer", f"{where}: {why}")
        note = self._references.get(task.key, (None, ""))[1] if self.check_correctness else ""
        return result("ok", f"not checked for correctness: {note}" if note else "", costs)

    def _call(self, program, built: dict, dump: bool):
        """("ok", (costs, buffers after the first call or None)) or (status, message)."""
        entry = built["entry"]
        base = Path(self._dir.name) / Path(built["file"]).stem
        inputs, dumped = base.with_suffix(".in"), base.with_suffix(".out")
        try:
            info = FunctionInfo.from_dict(built["functions"][entry])
            args = [a.numpy() for a in random_arguments(info)]
            inputs.write_bytes(b"".join(a.tobytes() for a in args))
            cmd = [*program, built["file"], SYMBOL_PREFIX + entry,
                   ",".join(str(a.nbytes) for a in args), str(inputs),
                   "--number", str(self.number), "--repeat", str(self.repeat),
                   "--min-repeat-ms", str(self.min_repeat_ms),
                   "--threads", _worker_env(self.num_threads)["KILN_NUM_THREADS"]]
            if dump:
                cmd += ["--dump", str(dumped)]
            if self.enable_cpu_cache_flush:
                cmd.append("--flush")
            try:
                done = run_bounded(cmd, self.timeout, text=True)
            except subprocess.TimeoutExpired:
                return "timeout", f"no answer within {self.timeout:g} s"
            if done.returncode != 0:
                return "runtime_error", _failure(done, built)
            line = next((ln for ln in done.stdout.splitlines() if ln.startswith("costs:")), "")
            costs = [float(c) for c in line.split()[1:]]
            if not costs:
                raise ValueError(f"no timings in the program's output: {done.stdout[-300:]!r}")
            got = None
            if dump:
                data, got, at = dumped.read_bytes(), {}, 0
                for p, a in zip(info.params, args):
                    got[p.name] = np.frombuffer(data, a.dtype, a.size, at).reshape(a.shape)
                    at += a.nbytes
            return "ok", (costs, got)
        except (OSError, ValueError) as err:     # a missing program, a short dump, bad output
            return "runtime_error", f"{type(err).__name__}: {err}"
        finally:
            inputs.unlink(missing_ok=True)
            dumped.unlink(missing_ok=True)

    def _reference(self, task: Task, program) -> dict | None:
        """The buffers of the task's default config after one call on the device (built in a
        worker process), computed once per task; None, with one warning, when that fails."""
        if task.key not in self._references:
            pool = WorkerPool(1, _worker_env(self.num_threads), 1,
                              preload=("kiln.autotvm.measure_jobs",))
            try:
                payload = {"task": task.to_json(), "config": task.default_config().to_json(),
                           "dir": self._dir.name, "name": f"reference{len(self._references)}"}
                (built,) = pool.map("kiln.autotvm.measure_jobs:build_candidate", [payload],
                                    2 * self.timeout + 30.0)
            finally:
                pool.close()
            if built.kind == "ok":
                outcome, value = self._call(program, built.value, dump=True)
                os.unlink(built.value["file"])
            else:
                outcome, value = built.kind, built.value
            if outcome == "ok":
                self._references[task.key] = (value[1], "")
            else:
                why = _short(f"the default config of {task.key} failed on the device "
                             f"({outcome}): {value}")
                warnings.warn(f"check_correctness: outputs are not checked, {why}", stacklevel=3)
                self._references[task.key] = (None, why)
        return self._references[task.key][0]

    def close(self) -> None:
        """Delete the runner's files (made again on the next run)."""
        with self._lock:
            if self._dir is not None:
                self._dir.cleanup()
                self._dir = None
                self._references = {}


def _failure(done, built: dict) -> str:
    """Why time_kernel failed: a kernel's status explained by its check's message, a signal
    named, else what the program printed."""
    why = done.stderr.strip()[-1500:] or f"exit status {done.returncode}"
    if done.returncode < 0:
        return f"killed by signal {-done.returncode} ({why})"
    status = re.search(r"returned status (-?\d+)", why)
    errors = {str(k): v for k, v in built.get("errors", {}).items()}   # keys: ints or JSON's str
    message = errors.get(status.group(1)) if status else None
    return f"{why}: {message}" if message else why

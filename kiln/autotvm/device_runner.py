"""DeviceRunner: time candidates on the device they are compiled for, through kiln's C runtime
(the time_kernel program, kiln/runtime/c), so that tuning for a 64-bit ARM board works from an
x86 host. Here the device is user-mode QEMU: it proves the path, and its timings say nothing
about an ARM CPU's speed. With `command`, any other prefix that runs a program built for the
target on files of this machine (another emulator, a wrapper). With `login`, a board: a command
that runs one shell command line on it (["ssh", "pi@board"]); the programs, each candidate and
its inputs are sent through it (`cat > file` on the board) into `device_dir`, and the results
read back the same way, so the board needs a POSIX shell and nothing of kiln's.

    option = measure_option(builder=LocalBuilder(), runner=DeviceRunner("aarch64-linux-gnu"))
    tune_model(mod, params, target="rasp4b", measure_option=option, log_file="arm.jsonl")
    DeviceRunner("aarch64-linux-gnu", login=["ssh", "pi@board"])       # a real board

Each candidate runs in its own process with a time-out: one that crashes (a signal), returns an
error status or hangs is a runtime_error or timeout result, and tuning goes on with the rest.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from ..runtime.function_info import FunctionInfo
from ..runtime.c import LIBRARY
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
                 enable_cpu_cache_flush: bool = False, num_threads: int | None = None,
                 login: list | None = None, device_dir: str = "/tmp/kiln-device"):
        self.triple = triple
        self.command = None if command is None else [str(c) for c in command]
        self.login = None if login is None else [str(c) for c in login]
        if self.login is not None and self.command is not None:
            raise ValueError("DeviceRunner: give command (run here) or login (run on a board), "
                             "not both")
        self.device_dir = str(device_dir)
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
        self._device = None             # where the programs run: _LocalFiles or _LoginFiles
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
        if self.login is not None:          # the program and its library, sent to the board
            local = Path(program[-1])
            self._device.put(local.with_name(LIBRARY))
            return [self._device.put(local, executable=True)]
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
                self._device = _LocalFiles(self.timeout) if self.login is None else \
                    _LoginFiles(self.login, self.device_dir, self.timeout)
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
        entry, device = built["entry"], self._device
        base = Path(self._dir.name) / Path(built["file"]).stem
        inputs, dumped = base.with_suffix(".in"), device.path(base.with_suffix(".out"))
        sent = []
        try:
            info = FunctionInfo.from_dict(built["functions"][entry])
            args = [a.numpy() for a in random_arguments(info)]
            inputs.write_bytes(b"".join(a.tobytes() for a in args))
            sent = [device.put(Path(built["file"])), device.put(inputs)]
            cmd = [*program, sent[0], SYMBOL_PREFIX + entry,
                   ",".join(str(a.nbytes) for a in args), sent[1],
                   "--number", str(self.number), "--repeat", str(self.repeat),
                   "--min-repeat-ms", str(self.min_repeat_ms),
                   "--threads", _worker_env(self.num_threads)["KILN_NUM_THREADS"]]
            if dump:
                cmd += ["--dump", str(dumped)]
            if self.enable_cpu_cache_flush:
                cmd.append("--flush")
            try:
                done = device.run(cmd)
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
                data, got, at = device.get(dumped), {}, 0
                for p, a in zip(info.params, args):
                    got[p.name] = np.frombuffer(data, a.dtype, a.size, at).reshape(a.shape)
                    at += a.nbytes
            return "ok", (costs, got)
        except subprocess.TimeoutExpired:       # sending or fetching a file
            return "timeout", f"the device did not answer within {self.timeout:g} s"
        except (OSError, ValueError) as err:     # a missing program, a short dump, bad output
            return "runtime_error", f"{type(err).__name__}: {err}"
        finally:
            inputs.unlink(missing_ok=True)
            device.remove([p for p in sent if p != built["file"]] + [dumped])

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
    # time_kernel exits with 0, 2 or 3: past 128 is a shell's (a login's) report of a signal
    signal = -done.returncode if done.returncode < 0 else \
        done.returncode - 128 if done.returncode > 128 else None
    if signal is not None:
        return f"killed by signal {signal} ({why})"
    status = re.search(r"returned status (-?\d+)", why)
    errors = {str(k): v for k, v in built.get("errors", {}).items()}   # keys: ints or JSON's str
    message = errors.get(status.group(1)) if status else None
    return f"{why}: {message}" if message else why


class _LocalFiles:
    """The device's programs run on this machine's files (directly or under an emulator)."""

    def __init__(self, timeout: float):
        self.timeout = timeout

    def path(self, local: Path) -> str:
        return str(local)

    def put(self, local: Path, executable: bool = False) -> str:
        return str(local)

    def run(self, cmd: list) -> subprocess.CompletedProcess:
        return run_bounded(cmd, self.timeout, text=True)

    def get(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def remove(self, paths: list) -> None:
        for path in paths:
            Path(path).unlink(missing_ok=True)


class _LoginFiles:
    """A board reached by `login` (a command that runs one shell command line there): files
    go into `directory` through the login's standard input and come back through its output."""

    def __init__(self, login: list, directory: str, timeout: float):
        self.login, self.directory, self.timeout = login, directory, timeout
        self._sent: dict = {}            # local path -> (its mtime, the board's path)

    def path(self, local: Path) -> str:
        return f"{self.directory}/{local.name}"

    def _shell(self, line: str, data: bytes | None = None) -> subprocess.CompletedProcess:
        done = run_bounded([*self.login, line], self.timeout, input=data)
        if done.returncode != 0:
            raise OSError(f"{shlex.join(self.login)} {line!r} failed (exit {done.returncode}): "
                          f"{done.stderr.decode(errors='replace').strip()[-500:]}")
        return done

    def put(self, local: Path, executable: bool = False) -> str:
        stamp = local.stat().st_mtime_ns
        known = self._sent.get(local)
        if known is not None and known[0] == stamp:
            return known[1]
        remote = self.path(local)
        q = shlex.quote
        self._shell(f"mkdir -p {q(self.directory)} && cat > {q(remote)}"
                    + (f" && chmod +x {q(remote)}" if executable else ""), local.read_bytes())
        self._sent[local] = (stamp, remote)
        return remote

    def run(self, cmd: list) -> subprocess.CompletedProcess:
        done = run_bounded([*self.login, shlex.join(cmd)], self.timeout)
        return subprocess.CompletedProcess(cmd, done.returncode,
                                           done.stdout.decode(errors="replace"),
                                           done.stderr.decode(errors="replace"))

    def get(self, path: str) -> bytes:
        return self._shell(f"cat {shlex.quote(path)}").stdout

    def remove(self, paths: list) -> None:
        for path in paths:
            self._sent = {k: v for k, v in self._sent.items() if v[1] != path}
        try:
            self._shell("rm -f " + " ".join(shlex.quote(p) for p in paths))
        except (OSError, subprocess.TimeoutExpired):
            pass                # a stale file in the board's scratch directory; not worth failing

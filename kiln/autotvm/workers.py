"""A pool of isolated worker processes for untrusted jobs (building and timing candidates).

Each worker is a fresh interpreter (`python -m kiln.autotvm.workers FD`): never a fork of the
tuner, whose OpenMP threads would hang a forked child, and never a re-import of the user's
`__main__` (multiprocessing's spawn does that, so a script without a main guard would recurse).
Parent and worker talk over a socket pair in JSON messages (no pickle). A job that crashes its
worker (an LLVM abort, a segfault) or runs past its timeout costs that worker only: it is
killed and replaced on demand, and the job is reported as a crash or a timeout. Workers are
also replaced after `max_jobs` jobs, which bounds leaks (llvmlite keeps ~70 KB per module,
each loaded library stays mapped).

    pool = WorkerPool(2, env={"KILN_NUM_THREADS": "2"})
    outcomes = pool.map("kiln.autotvm.measure_jobs:build_candidate", payloads, timeout=10)
    pool.close()
"""
from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

# How long a fresh worker may take to import kiln and say it is ready (not a job's timeout).
START_TIMEOUT = 60.0
_STDERR_TAIL = 1500
# Set in every worker's environment: code may ask whether it runs isolated (fault injection).
WORKER_ENV = "KILN_MEASURE_WORKER"


class WorkerPoolError(RuntimeError):
    """The pool itself failed (a worker that cannot even start); no job is to blame."""


@dataclass(frozen=True)
class Outcome:
    """How one job went: kind "ok" (value: the job's JSON result), "error" (the job raised;
    value: "Type: message" and the last traceback lines), "crash" (the worker died; value:
    how, with the tail of its stderr) or "timeout"; `seconds` is the wall time of the job.

    Example:
        >>> Outcome("timeout", "ran past 1.0 s", 1.0).kind
        'timeout'
    """

    kind: str
    value: object
    seconds: float


def _describe_exit(code) -> str:
    if code is None:
        return "was killed"
    if code < 0:
        try:
            return f"died from signal {signal.Signals(-code).name}"
        except ValueError:
            return f"died from signal {-code}"
    return f"exited with status {code}"


class _Worker:
    """One worker process, its end of the socket pair and its stderr log."""

    def __init__(self, env: dict, log_dir: str, preload: tuple):
        parent_sock, child_sock = socket.socketpair()
        self.log = tempfile.NamedTemporaryFile(prefix="worker_", suffix=".log", dir=log_dir,
                                               delete=False)
        child_env = dict(os.environ)
        child_env.update(env)
        # The parent's import path, as multiprocessing's spawn passes it: a template defined
        # in a test folder or a script's directory must be importable by the worker.
        paths = [p for p in sys.path if isinstance(p, str)]
        child_env["PYTHONPATH"] = os.pathsep.join(paths)
        child_env[WORKER_ENV] = "1"
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kiln.autotvm.workers", str(child_sock.fileno()),
                 ",".join(preload)],
                pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL, stdout=self.log,
                stderr=self.log, env=child_env, close_fds=True)
        finally:
            child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self.jobs = 0
        self.ready = False
        self.started = time.monotonic()
        self.job: tuple | None = None        # (index, start time) of the job in flight

    def stderr_tail(self) -> str:
        try:
            self.log.flush()
            with open(self.log.name, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - _STDERR_TAIL))
                text = f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return text

    def send(self, message) -> None:
        self.conn.send_bytes(json.dumps(message).encode())

    def receive(self):
        return json.loads(self.conn.recv_bytes().decode())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._release()

    def stop(self) -> None:
        """Ask the worker to exit; kill it if it does not within a second."""
        if self.proc.poll() is None:
            try:
                self.send(None)
                self.proc.wait(timeout=1.0)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def _release(self) -> None:
        self.conn.close()
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


class WorkerPool:
    """Up to `n_workers` isolated worker processes running jobs "module:function"(payload).

    `env` is added to each worker's environment (e.g. KILN_NUM_THREADS); `max_jobs` jobs per
    worker, then it is replaced; `preload` names modules a worker imports before it says it
    is ready, so that no job's timeout pays for them. Workers start on first use and stay
    until close().

    Example:
        >>> pool = WorkerPool(1)                                                 # doctest: +SKIP
        >>> pool.map("kiln.autotvm.workers:echo", [{"x": 1}], timeout=5)[0].value  # doctest: +SKIP
        {'x': 1}
    """

    def __init__(self, n_workers: int, env: dict | None = None, max_jobs: int = 100,
                 preload=()):
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"WorkerPool: n_workers must be a positive int, got {n_workers!r}")
        if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
            raise ValueError(f"WorkerPool: max_jobs must be a positive int, got {max_jobs!r}")
        self.n_workers = n_workers
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.max_jobs = max_jobs
        self.preload = tuple(preload)
        self._workers: list[_Worker] = []
        self._pending: list[_Worker] = []       # started by prestart, not yet waited for
        self._log_dir = tempfile.TemporaryDirectory(prefix="kiln_workers_")

    # ---------------------------------------------------------------- worker lifecycle
    def prestart(self) -> None:
        """Start the workers the pool lacks without waiting for them: their start-up (an
        interpreter importing kiln and LLVM) overlaps the caller's work until the first map.

        Example:
            >>> pool.prestart()   # doctest: +SKIP
        """
        missing = self.n_workers - len(self._workers) - len(self._pending)
        self._pending += [_Worker(self.env, self._log_dir.name, self.preload)
                          for _ in range(max(0, missing))]

    def _start(self, count: int) -> None:
        """Start `count` workers at once (taking prestarted ones first) and wait until all are
        ready."""
        fresh, self._pending = self._pending[:count], self._pending[count:]
        fresh += [_Worker(self.env, self._log_dir.name, self.preload)
                  for _ in range(count - len(fresh))]
        deadline = time.monotonic() + START_TIMEOUT
        waiting = list(fresh)
        try:
            while waiting:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerPoolError(f"a worker process did not start within "
                                          f"{START_TIMEOUT:.0f} s: {waiting[0].stderr_tail()}")
                for conn in wait([w.conn for w in waiting], timeout=left):
                    worker = next(w for w in waiting if w.conn is conn)
                    try:
                        worker.receive()
                    except (EOFError, OSError):
                        code = worker.proc.wait()
                        raise WorkerPoolError(f"a worker process {_describe_exit(code)} while "
                                              f"starting: {worker.stderr_tail()}") from None
                    worker.ready = True
                    waiting.remove(worker)
        except BaseException:
            for w in fresh:
                w.kill()
            raise
        self._workers.extend(fresh)

    def _retire(self, worker: _Worker, how: str) -> None:
        self._workers.remove(worker)
        worker.kill() if how == "kill" else worker.stop()

    def close(self) -> None:
        """Stop every worker (they are started again on the next map).

        Example:
            >>> pool.close()   # doctest: +SKIP
        """
        for worker in list(self._workers):
            self._retire(worker, "stop")
        for worker in self._pending:
            worker.kill()
        self._pending = []

    def __del__(self):
        try:
            for worker in self._workers + self._pending:
                worker.kill()
        except Exception:  # interpreter shutdown: best effort only
            pass

    # ---------------------------------------------------------------- running jobs
    def map(self, func: str, payloads: list, timeout: float) -> list[Outcome]:
        """Run func(payload) for each payload in the workers; the outcomes in payload order.

        `func` is "module:function" (imported by the worker); a payload and its result are
        JSON values; `timeout` (seconds) bounds each job from the moment it is sent.

        Example:
            >>> [o.kind for o in pool.map("m:f", [{}, {}], timeout=5.0)]   # doctest: +SKIP
            ['ok', 'ok']
        """
        if ":" not in func:
            raise ValueError(f"WorkerPool.map: func must be 'module:function', got {func!r}")
        outcomes: list[Outcome | None] = [None] * len(payloads)
        todo = list(range(len(payloads)))[::-1]
        busy: list[_Worker] = []
        try:
            while todo or busy:
                idle = [w for w in self._workers if w.job is None]
                wanted = min(len(todo), self.n_workers - len(self._workers))
                if todo and not idle and wanted > 0:
                    self._start(wanted)
                    continue
                for worker in idle:
                    if not todo:
                        break
                    index = todo.pop()
                    worker.send({"func": func, "payload": payloads[index]})
                    worker.job = (index, time.monotonic())
                    busy.append(worker)
                self._collect(busy, outcomes, timeout)
        except BaseException:
            # Interrupted (Ctrl-C, a worker that cannot start): jobs in flight are abandoned,
            # so their workers cannot be trusted to be idle.
            for worker in busy:
                if worker in self._workers:
                    self._retire(worker, "kill")
            raise
        return outcomes

    def _collect(self, busy: list[_Worker], outcomes: list, timeout: float) -> None:
        """Wait for the first busy worker to answer, die or time out, and record its outcome."""
        now = time.monotonic()
        first_deadline = min(w.job[1] for w in busy) + timeout
        ready = wait([w.conn for w in busy], timeout=max(0.0, first_deadline - now))
        now = time.monotonic()
        for worker in list(busy):
            index, started = worker.job
            if worker.conn in ready:
                try:
                    reply = worker.receive()
                except (EOFError, OSError):
                    code = worker.proc.wait()
                    tail = worker.stderr_tail()
                    outcome = Outcome("crash", f"the worker process {_describe_exit(code)}"
                                      + (f"; its last output: {tail}" if tail else ""),
                                      now - started)
                    self._retire(worker, "kill")
                else:
                    kind = "ok" if "ok" in reply else "error"
                    outcome = Outcome(kind, reply.get("ok", reply.get("error")), now - started)
                    worker.job = None
                    worker.jobs += 1
                    if worker.jobs >= self.max_jobs:
                        self._retire(worker, "stop")
            elif now - started >= timeout:
                outcome = Outcome("timeout", f"ran past the timeout of {timeout:g} s",
                                  now - started)
                self._retire(worker, "kill")
            else:
                continue
            busy.remove(worker)
            outcomes[index] = outcome


# -------------------------------------------------------------------- inside a worker
def echo(payload):
    """A job that returns its payload (for tests of the pool).

    Example:
        >>> echo({"x": 1})
        {'x': 1}
    """
    return payload


def _resolve(func: str):
    module, _, name = func.partition(":")
    return getattr(importlib.import_module(module), name)


def _error_text(exc: BaseException) -> str:
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
    tail = "".join(frames[-3:]).strip()
    return f"{type(exc).__name__}: {exc}\n{tail[-_STDERR_TAIL:]}"


def _serve(fd: int, preload: str) -> None:
    conn = Connection(fd)
    for module in filter(None, preload.split(",")):
        importlib.import_module(module)
    conn.send_bytes(json.dumps({"ready": os.getpid()}).encode())
    while True:
        try:
            message = json.loads(conn.recv_bytes().decode())
        except EOFError:
            return              # the parent went away
        if message is None:
            return
        try:
            reply = {"ok": _resolve(message["func"])(message["payload"])}
            data = json.dumps(reply, allow_nan=False)
        except BaseException as exc:  # the job's failure is reported, the worker goes on
            data = json.dumps({"error": _error_text(exc)})
        conn.send_bytes(data.encode())


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "")

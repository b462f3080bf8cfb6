"""Building and measuring candidates on a dask.distributed cluster.

    option = measure_option(builder=ClusterBuilder("tls://head:8786", security=sec),
                            runner=ClusterRunner("tls://head:8786", security=sec))
    XGBTuner(task).tune(200, measure_option=option, log_file="tune.jsonl")

Builds run on any worker (one per worker thread at a time); measurements only on workers
that declare the task's device as a resource (device.device_resource: `kiln-device-<key>=1`),
one at a time per worker. A worker runs a job with the local machinery (jobs.py): the
candidate is built and timed in an isolated process, so what the candidate does wrong (it
does not compile, it crashes, hangs or computes wrong numbers) comes back inside a finished
job, with the status a local run would give it. Everything else is the cluster's fault, never
the candidate's, and is never logged as a measurement:

  a worker dies mid-job      dask runs the job again on another worker (or the restarted
                             one); past dask's allowed-failures: ClusterError
  a job is lost              (the scheduler restarted, the connection was cut and came back)
                             it is submitted again, up to RESUBMITS times; then ClusterError
  a job raises               (a worker without kiln, or with another kiln; a template module
                             it cannot import; a full disk ...) ClusterError naming the worker
  no worker has the device   after NO_DEVICE_GRACE seconds without one: ClusterError, naming
                             the device and the devices the workers do have
  the scheduler is gone      for RECONNECT_GRACE seconds: ClusterError
  a batch takes too long     past a bound from the timeouts (a worker that stays registered
                             but never runs its jobs): ClusterError

The tuning client alone writes the log, after each batch: a ClusterError stops the run with
every finished batch logged, and the same command resumes it.
"""
from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

from ..measure import BuildResult, LocalBuilder, LocalRunner
from ..record import MeasureResult
from ..task import Task
from .connection import ClusterError, connect
from .device import RESOURCE_PREFIX, device_resource, pinned_target

__all__ = ["ClusterBuilder", "ClusterRunner"]

POLL = 0.5                  # seconds between looks at the cluster while jobs are pending
RESUBMITS = 3
NO_DEVICE_GRACE = 30.0
RECONNECT_GRACE = 60.0
RESULT_TIMEOUT = 30.0       # fetching a finished job's result (lost meanwhile: resubmitted)
BATCH_ALLOWANCE = 120.0     # a batch's time beyond its jobs' bounds (queues, worker starts)
WORKER_INFO_AGE = 2.0       # seconds the scheduler's list of workers is reused
_JOBS = "kiln.autotvm.cluster.jobs"


def _job(name: str):
    import importlib
    return getattr(importlib.import_module(_JOBS), name)


class _ClusterSide:
    """What builders and runners share: the client, and running a list of jobs to the end."""

    def __init__(self, cluster, security, connect_timeout: float):
        self.cluster, self.security = cluster, security
        self.connect_timeout = connect_timeout
        self._client = None
        self._info: tuple | None = None     # (when, workers) from the scheduler
        self._info_lock = threading.Lock()

    @property
    def client(self):
        if self._client is None or self._client.status in ("closing", "closed"):
            self._client = connect(self.cluster, self.security, self.connect_timeout)
        return self._client

    def _workers(self) -> dict:
        """The scheduler's workers (address -> info), at most WORKER_INFO_AGE seconds old;
        {} while the scheduler does not answer."""
        with self._info_lock:
            now = time.monotonic()
            if self._info is None or now - self._info[0] > WORKER_INFO_AGE:
                try:
                    workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
                except (OSError, TimeoutError) as e:
                    if self._info is None:
                        raise ClusterError(f"the dask scheduler at {self.cluster!r} does not "
                                           f"answer: {e}") from None
                    return self._info[1]
                self._info = (now, workers)
            return self._info[1]

    def _device_present(self, resource: str | None) -> bool:
        workers = self._workers().values()
        if resource is None:
            return bool(workers)
        return any(resource in (w.get("resources") or {}) for w in workers)

    def _no_device(self, resource: str | None) -> ClusterError:
        if resource is None:
            return ClusterError(f"the cluster at {self.client.scheduler.address} has had no "
                                f"worker for {NO_DEVICE_GRACE:g} s: start some (`dask worker "
                                f"ADDRESS ...`, docs/tune_cluster.md)")
        have = sorted({r for w in self._workers().values() for r in (w.get("resources") or {})
                       if r.startswith(RESOURCE_PREFIX)})
        return ClusterError(
            f"no worker of the cluster at {self.client.scheduler.address} has device "
            f"{resource!r} (for {NO_DEVICE_GRACE:g} s); its workers have "
            f"{', '.join(have) if have else 'no kiln device'}. Start a worker with "
            f"`--nthreads 1 --resources {resource}=1` on a machine with that device "
            f"(`kiln device-key` prints a machine's key)")

    def run_jobs(self, submits: list, what: str, job_seconds: float,
                 resource: str | None = None) -> list:
        """Run each job (a function submitting it, returning its future) to the end; their
        results in order. `what` names the jobs in errors; `job_seconds` bounds one job
        (the batch may take BATCH_ALLOWANCE + that much per job); `resource`: the device
        the jobs need (None: any worker will do), checked while they wait. Raises
        ClusterError for anything that is not the candidates' doing (see the module)."""
        finished = threading.Event()

        def submit(i):
            future = submits[i]()
            future.add_done_callback(lambda _: finished.set())
            return future

        results: list = [None] * len(submits)
        futures = {submit(i): i for i in range(len(submits))}
        tries = [1] * len(submits)
        deadline = time.monotonic() + BATCH_ALLOWANCE + job_seconds * len(submits)
        no_device_since = lost_since = None
        try:
            while futures:
                finished.wait(POLL)
                finished.clear()
                for future in [f for f in futures if f.done()]:
                    i = futures.pop(future)
                    try:
                        results[i] = future.result(timeout=RESULT_TIMEOUT)
                        continue
                    except Exception as e:                   # noqa: BLE001 (classified below)
                        exc = e
                    name = type(exc).__name__
                    if name in ("CancelledError", "FutureCancelledError", "TimeoutError",
                                "CommClosedError") and tries[i] <= RESUBMITS:
                        tries[i] += 1               # lost with the scheduler or the connection
                        futures[submit(i)] = i
                    elif name == "KilledWorker":
                        raise ClusterError(f"{what}: dask workers kept dying while running "
                                           f"it ({exc}); look at the workers' logs")
                    elif tries[i] > RESUBMITS:
                        raise ClusterError(f"{what}: the cluster lost a job {tries[i]} times "
                                           f"({name}: {exc})")
                    else:
                        raise ClusterError(f"{what}: a job failed on a worker ({name}: {exc}); "
                                           f"is the same kiln installed there, with the "
                                           f"task's template?")
                if not futures:
                    break
                now = time.monotonic()
                if now > deadline:
                    limit = BATCH_ALLOWANCE + job_seconds * len(submits)
                    raise ClusterError(f"{what}: {len(futures)} of {len(submits)} jobs not done "
                                       f"after {limit:.0f} s")
                if self.client.status != "running":
                    lost_since = lost_since or now
                    if now - lost_since > RECONNECT_GRACE:
                        raise ClusterError(f"lost the dask scheduler at {self.cluster!r} for "
                                           f"{RECONNECT_GRACE:g} s (client status "
                                           f"{self.client.status!r})")
                    continue
                lost_since = None
                if self._device_present(resource):
                    no_device_since = None
                else:
                    no_device_since = no_device_since or now
                    if now - no_device_since > NO_DEVICE_GRACE:
                        raise self._no_device(resource)
        except BaseException:
            for future in futures:          # (Ctrl-C too) leave nothing queued behind
                future.cancel()
            raise
        return results

    def close(self) -> None:
        """Nothing to stop: the workers belong to the cluster (the connection is shared;
        kiln.autotvm.cluster.close_connections closes it)."""


def _with_threads(options: dict) -> dict:
    """Options with num_threads defaulting to this process's kiln thread count: the workers
    build and run candidates as this machine would."""
    from ...runtime import num_threads
    return {**options, "num_threads": options.get("num_threads") or num_threads()}


class ClusterBuilder(_ClusterSide):
    """Builds candidates on a dask cluster's workers (any worker; each of its threads is a
    build slot, each build isolated as LocalBuilder isolates it). A host CPU target is built
    for this machine's CPU (device.pinned_target), wherever the build runs: build workers must
    share this machine's architecture. `timeout`, `max_ir_lines`, `max_builds_per_worker` and
    `num_threads` as for LocalBuilder.

    Example:
        >>> builder = ClusterBuilder("tcp://127.0.0.1:8786", timeout=10.0)   # doctest: +SKIP
    """

    def __init__(self, cluster, security=None, connect_timeout: float = 30.0, **options):
        super().__init__(cluster, security, connect_timeout)
        options = _with_threads(options)
        local = LocalBuilder(n_parallel=1, **options)     # checks the options
        self.timeout = local.timeout
        self.options = {name: getattr(local, name) for name in options}

    @property
    def n_parallel(self) -> int:
        """Build slots: the threads of the cluster's workers."""
        return max(1, sum(w.get("nthreads", 1) for w in self._workers().values()))

    def _submit(self, task_json: dict, config: dict):
        return lambda: self.client.submit(_job("build"), task_json, config, self.options,
                                          pure=False)

    def build(self, task: Task, configs: list[dict]) -> list[BuildResult]:
        """Build each config (JSON form) of `task` on the cluster; results in order, never
        raises for a bad candidate (a ClusterError when the cluster cannot serve).

        Example:
            >>> [b.status for b in builder.build(task, [cfg.to_json()])]    # doctest: +SKIP
            ['ok']
        """
        task_json = {**task.to_json(), "target": str(pinned_target(task.target))}
        # A build job may take its timeout, or a fresh build process's start.
        values = self.run_jobs([self._submit(task_json, c) for c in configs],
                               f"building candidates of {task.key}", self.timeout + 60.0)
        return [BuildResult(config, v["built"], v["status"], v["message"], v["seconds"])
                for config, v in zip(configs, values)]


class ClusterRunner(_ClusterSide):
    """Measures built candidates on the cluster's workers that have the task's target's
    device (device.device_resource), one at a time per worker. Takes LocalRunner's options
    (number, repeat, min_repeat_ms, timeout, cooldown, check_correctness, cache flushing ...),
    applied on the worker. `parallel_tasks`: how many tasks tune_model tunes at once to keep
    the devices and build slots busy.

    Example:
        >>> runner = ClusterRunner("tcp://127.0.0.1:8786", number=4, repeat=3)  # doctest: +SKIP
    """

    remote = True

    def __init__(self, cluster, security=None, parallel_tasks: int = 3,
                 connect_timeout: float = 30.0, **options):
        super().__init__(cluster, security, connect_timeout)
        options = _with_threads(options)
        local = LocalRunner(**options)        # checks the options
        self.options = {name: getattr(local, name) for name in options}
        self.repeat, self.number, self.timeout = local.repeat, local.number, local.timeout
        if isinstance(parallel_tasks, bool) or not isinstance(parallel_tasks, int) \
                or parallel_tasks < 1:
            raise ValueError(f"ClusterRunner: parallel_tasks must be a positive int, got "
                             f"{parallel_tasks!r}")
        self.parallel_tasks = parallel_tasks
        self.measured_on: dict[str, int] = {}   # worker address -> measurements it made
        self._count_lock = threading.Lock()     # tasks tuned at once share the runner
        self._warned: set[str] = set()

    def check_device_workers(self, resource: str) -> None:
        """Warn (once per worker) about a worker with `resource` that runs several threads:
        dask may run builds on it while it measures, and they would skew the timings.

        Example:
            >>> runner.check_device_workers("kiln-device-x86_64-znver3-9a43b0f3")  # doctest: +SKIP
        """
        for address, w in self._workers().items():
            if resource in (w.get("resources") or {}) and w.get("nthreads", 1) > 1 \
                    and address not in self._warned:
                self._warned.add(address)
                warnings.warn(f"worker {address} has device {resource} and "
                              f"{w['nthreads']} threads: builds can run beside its "
                              f"measurements and skew them; start it with --nthreads 1",
                              stacklevel=3)

    def resource(self, task: Task) -> str:
        """The dask resource a worker must have to measure `task`'s candidates: its target's
        device (to tune for another machine's CPU, give the task that CPU's target).

        Example:
            >>> runner.resource(task)                                     # doctest: +SKIP
            'kiln-device-x86_64-znver3-9a43b0f3'
        """
        return device_resource(task.target)

    def _submit(self, task: Task, task_json: dict, build: BuildResult, resource: str):
        data = build.built
        if "file" in data:                  # built here (a LocalBuilder): ship its bytes
            path = Path(data["file"])
            data = {**{k: v for k, v in data.items() if k != "file"}, "suffix": path.suffix,
                    "data": path.read_bytes()}
        return lambda: self.client.submit(_job("measure"), task_json, build.config, data,
                                          build.seconds, self.options, pure=False,
                                          resources={resource: 1}, priority=1)

    def run(self, task: Task, builds: list[BuildResult]) -> list[MeasureResult]:
        """Measure each build on a worker with the task's device; a failed build passes its
        status through. Same order; never raises for a bad candidate (a ClusterError when
        the cluster cannot serve).

        Example:
            >>> [r.status for r in runner.run(task, builder.build(task, cfgs))]  # doctest: +SKIP
            ['ok', 'compile_error']
        """
        resource = self.resource(task)
        self.check_device_workers(resource)
        task_json = task.to_json()
        ok = [b for b in builds if b.ok]
        # A measurement may take its timeout, and the first one on a worker the reference
        # build and run too (check_correctness) and a fresh process's start.
        values = iter(self.run_jobs([self._submit(task, task_json, b, resource) for b in ok],
                                    f"measuring candidates of {task.key}",
                                    3 * self.timeout + 90.0, resource))
        results = []
        for build in builds:
            if not build.ok:
                results.append(build.as_measurement())
                continue
            value = dict(next(values))
            worker = value.pop("worker")
            with self._count_lock:
                self.measured_on[worker] = self.measured_on.get(worker, 0) + 1
            value["costs"] = tuple(value["costs"])
            results.append(MeasureResult(**value))
        return results

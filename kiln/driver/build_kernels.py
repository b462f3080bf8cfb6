"""A model's kernels, from fused functions to one linked Module: cached, else built in parallel.

For each fused function (kiln.driver.compile names them) the kernel cache is asked first
(kernel_key.py says what a key covers). What it lacks is lowered and compiled by LLVM: in worker
processes when two or more kernels are missing (kiln.autotvm.workers: fresh interpreters, JSON
messages; each worker writes what it builds into the cache, and this process reads it back),
else here. Each kernel is its own LLVM module, compiled the same way wherever it is built, so
the result does not depend on the number of workers. Then all objects are linked at once.

A cached kernel keeps the name it was compiled under ("kernel_" and its function key); the
Module shows it under the model's name for it (kiln.codegen.llvm.link_objects).

KILN_BUILD_JOBS sets the number of worker processes (default: the machine's cores; 1 builds
everything in this process).

Example:
    >>> module, flops, sources = build_kernels([("fused_nn_dense_0", fn)], Target("llvm"))  # doctest: +SKIP
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import tempfile
import threading

from ..codegen.llvm.jit import compile_object, link_objects
from ..graph.serialize import function_from_json, function_to_json
from ..target import as_target
from ..timings import active_timings, compile_timings, kernel, phase
from .kernel_cache import KernelCache, KernelEntry
from .kernel_key import (function_key, object_key, ops_are_kiln_code, pipeline_identity,
                         source_digest)
from .lower_graph import lower_primitive_counted
from .pipeline import default_pipeline

JOB = "kiln.driver.build_kernels:build_job"
JOB_TIMEOUT_S = 600.0
logger = logging.getLogger("kiln")


class BuildJobError(RuntimeError):
    """A worker built a kernel differently from what this process asked (its kiln differs)."""


class KernelSource:
    """A kernel of a compiled model: its name and its loop program, printed when first asked
    for (str()); a kernel read from the cache is lowered again for it, under the configs it
    was built with.

    Example:
        >>> str(KernelSource("f", lambda: "def f(...): ..."))
        'def f(...): ...'
    """

    def __init__(self, name: str, make_text):
        self.name = name
        self._make_text = make_text
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = self._make_text()
        return self._text

    def __repr__(self) -> str:
        return f"<KernelSource {self.name}>"


class _Kernel:
    """One fused function on its way to an object: keys, what it asked, its entry."""

    def __init__(self, name: str, fn):
        self.name, self.fn = name, fn
        self.json = self.key = self.inner = self.object_key = None
        self.asked: list | None = None      # [(task key, template module, answer)]
        self.entry: KernelEntry | None = None
        self.cacheable = False
        self.payload: dict | None = None    # set when a worker may build it
        self.outcome = None                 # a worker's Outcome

    @staticmethod
    def retry(k: "_Kernel") -> "_Kernel":
        """The kernel again, for this process only."""
        k.payload = None
        return k


def build_kernels(calls, target, cache: "KernelCache | None | bool" = True):
    """Build the kernels `calls` ([(name, fused function)]) for `target`: the linked Module,
    each kernel's FLOPs per call and its loop program (KernelSource). `cache`: True for the
    user's kernel cache (KernelCache.default()), a KernelCache, or None / False for none.

    Example:
        >>> module, flops, sources = build_kernels(calls, Target("llvm"))   # doctest: +SKIP
    """
    target = as_target(target)
    if target.kind != "llvm":    # C and GPU back-ends build one source; nothing is cached
        return _build_source_module(calls, target)
    if cache is True:
        cache = KernelCache.default()
    cache = cache or None
    pipeline_id = pipeline_identity(default_pipeline())
    kernels = [_Kernel(name, fn) for name, fn in calls]
    with phase("cache.lookup"):
        for k in kernels:
            _plan(k, target, cache, pipeline_id)
    missing = [k for k in kernels if k.entry is None]
    if len(missing) > 1 and _jobs() > 1:
        _build_side_by_side(missing, target, cache, pipeline_id)
    for k in kernels:
        if k.entry is None:
            with kernel(k.name):
                _build_here(k, target, cache)
    objects = [k.entry.object_code() for k in kernels]
    module = link_objects(objects, target, entry=kernels[0].name if kernels else None,
                          names={k.name: k.entry.name for k in kernels})
    flops = {k.name: k.entry.flops for k in kernels}
    sources = [KernelSource(k.name, _loop_text(k, target)) for k in kernels]
    return module, flops, sources


def _loop_text(k: _Kernel, target):
    """What prints the loop program of `k` (lowered again, as it was built)."""
    from ..autotvm.task import answering_only

    answers = _answers(k.asked)

    def text() -> str:
        with target, answering_only(answers):
            return str(lower_primitive_counted(k.fn, k.name)[0])
    return text


def _answers(asked) -> dict:
    return {key: a for key, _, a in asked or () if a is not None}


def _build_source_module(calls, target):
    from ..codegen import build_module

    prims, flops = [], {}
    for name, fn in calls:
        with kernel(name), phase("schedule"):
            prim, flops[name] = lower_primitive_counted(fn, name, target)
        prims.append(prim)
    module = build_module(prims, target, entry=prims[0].name)
    return module, flops, [KernelSource(p.name, p.__str__) for p in prims]


# --------------------------------------------------------------------------------- planning
def _plan(k: _Kernel, target, cache, pipeline_id) -> None:
    """Keys of a kernel, and its cached entry when the cache has it."""
    from ..autotvm.task import dispatch_answer
    k.cacheable = (pipeline_id is not None and ops_are_kiln_code(k.fn, "cpu"))
    if not k.cacheable:
        return
    k.json = function_to_json(k.fn)
    k.key = function_key(k.json, target, pipeline_id)
    k.inner = "kernel_" + k.key[:24]
    if cache is None:
        return
    asked = cache.get_asked(k.key)
    if asked is None:
        return
    k.asked = [(key, None, dispatch_answer(key)) for key in asked]
    k.object_key = object_key(k.key, [a for _, _, a in k.asked])
    k.entry = cache.get_kernel(k.object_key)


def _templates_are_kiln_code(asked) -> bool:
    return all(module is None or module == "kiln" or module.startswith("kiln.")
               for _, module, _ in asked)


# --------------------------------------------------------------------------------- building
def _build_here(k: _Kernel, target, cache) -> None:
    from ..autotvm.task import answering_only, dispatch_log

    name = k.inner if k.cacheable else k.name
    # A kernel whose questions were replayed already (its index entry was cached) is built
    # with those answers, not asked again.
    replayed = answering_only(_answers(k.asked)) if k.asked is not None \
        else contextlib.nullcontext()
    with replayed, dispatch_log() as asked:
        with phase("schedule"):
            prim, flops = lower_primitive_counted(k.fn, name)
        obj = compile_object([prim], target)
    k.entry = KernelEntry.of(obj, prim.name, flops)
    k.asked = asked
    if k.cacheable and cache is not None and _templates_are_kiln_code(asked):
        k.object_key = object_key(k.key, [a for _, _, a in asked])
        cache.put_asked(k.key, [key for key, _, _ in asked])
        cache.put_kernel(k.object_key, k.entry)


# --------------------------------------------------------------------------------- workers
def _jobs() -> int:
    value = os.environ.get("KILN_BUILD_JOBS", "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            logger.warning("KILN_BUILD_JOBS=%r is not a whole number; using the core count",
                           value)
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


_pools: list = []
_pools_lock = threading.Lock()


def worker_pools(count: int) -> list:
    """`count` single-worker pools of build workers for this process (each started on first
    use, all stopped at exit): one per thread that feeds a worker.

    Example:
        >>> len(worker_pools(1))            # doctest: +SKIP
        1
    """
    from ..autotvm.workers import WorkerPool
    with _pools_lock:
        while len(_pools) < count:
            pool = WorkerPool(1, max_jobs=500, preload=("kiln.driver.build_kernels",))
            atexit.register(pool.close)
            _pools.append(pool)
        return _pools[:count]


# Calls in a model's graph from which kiln.compile starts its build workers before the graph
# passes: a worker takes about a second to start (an interpreter importing kiln and LLVM), which
# then overlaps the passes instead of the first kernels' builds; a small model may need none.
PRESTART_MIN_CALLS = 16


def prestart_workers(target, calls: int) -> None:
    """Start the build workers for a compile of a graph of `calls` calls for `target`, without
    waiting for them (see PRESTART_MIN_CALLS).

    Example:
        >>> prestart_workers(Target("llvm"), 120)   # doctest: +SKIP
    """
    if as_target(target).kind == "llvm" and _jobs() > 1 and calls >= PRESTART_MIN_CALLS:
        for pool in worker_pools(_jobs() - 1):
            pool.prestart()


class _Queue:
    """Kernels waiting to be built, taken by this process and by the threads feeding workers.
    A worker can take a kernel once this thread knows what its templates ask (the dispatch
    context is this thread's); this thread takes any."""

    def __init__(self):
        self.items: list = []
        self.closed = False
        self.cond = threading.Condition()

    def put(self, k: _Kernel) -> None:
        with self.cond:
            self.items.append(k)
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def take(self, remote: bool) -> _Kernel | None:
        with self.cond:
            while True:
                for i, k in enumerate(self.items):
                    if not remote or k.payload is not None:
                        return self.items.pop(i)
                if self.closed or not remote:
                    return None
                self.cond.wait()


def _build_side_by_side(missing: list, target, cache, pipeline_id) -> None:
    """Build `missing` here and in worker processes at once (the machine's cores: this
    process and one worker per other core). A worker answers templates from a snapshot of this
    thread's dispatch contexts (so nothing is scheduled twice) and writes to the cache (or a
    temporary one); this process replays what each kernel asked on its own contexts, checks
    the answers agree and reads the kernel back. A kernel a worker failed on is left unbuilt,
    for this process to build and raise the real error."""
    from ..autotvm.task import dispatch_snapshot
    from ..autotvm.workers import WorkerPoolError

    answers = dispatch_snapshot()
    if answers is None:             # a dispatch context that cannot be copied to a worker
        return
    with tempfile.TemporaryDirectory(prefix="kiln_build_") as tmp:
        store = cache if cache is not None else KernelCache(tmp)
        queue = _Queue()

        def feed(pool):
            while (k := queue.take(remote=True)) is not None:
                try:
                    (k.outcome,) = pool.map(JOB, [k.payload], timeout=JOB_TIMEOUT_S)
                except WorkerPoolError as err:
                    logger.warning("a kernel build worker is unavailable (%s); building here",
                                   err)
                    queue.put(_Kernel.retry(k))
                    return

        feeders = [threading.Thread(target=feed, args=(pool,), daemon=True)
                   for pool in worker_pools(min(_jobs() - 1, len(missing) - 1))]
        for k in missing:
            if k.cacheable:
                k.payload = {"function": k.json, "name": k.inner, "target": str(target),
                             "answers": answers, "key": k.key, "digest": source_digest(),
                             "pipeline": pipeline_id, "dir": str(store.root),
                             "limit": store.limit_bytes}
            queue.put(k)
        queue.close()
        for t in feeders:
            t.start()
        try:
            while (k := queue.take(remote=False)) is not None:
                with kernel(k.name):
                    _build_here(k, target, cache)
        finally:
            queue.close()
            with phase("build.wait"):
                for t in feeders:
                    t.join()
        for k in missing:
            if k.entry is None and k.outcome is not None:
                _take_worker_build(k, store)


def _take_worker_build(k: _Kernel, store: KernelCache) -> None:
    """Read back what a worker built for `k`, once this thread's dispatch contexts, asked what
    the worker's templates asked, answer the same."""
    from ..autotvm.task import dispatch_answer

    outcome = k.outcome
    if outcome.kind != "ok":
        logger.debug("worker build of %s: %s %s", k.name, outcome.kind, outcome.value)
        return
    asked = outcome.value["asked"]
    if k.asked is not None:         # replayed when it was planned: not asked twice
        answers = [a for _, _, a in k.asked]
        if [key for key, _, _ in k.asked] != [key for key, _ in asked]:
            answers = None
    else:
        answers = [dispatch_answer(key) for key, _ in asked]
    if answers != [a for _, a in asked]:
        logger.debug("worker build of %s was answered otherwise; building here", k.name)
        return
    for recorder in active_timings():
        recorder.add_worker_phases(k.name, outcome.value.get("phases", {}))
    k.asked = [(key, None, a) for key, a in asked]
    k.object_key = object_key(k.key, answers)
    with phase("cache.read"):
        k.entry = store.get_kernel(k.object_key)


def build_job(payload: dict) -> dict:
    """What a build worker runs: lower and compile one fused function, its templates answered
    from payload["answers"], and store it (and what it asked) in the cache directory
    payload["dir"]; returns what it asked, the answers and the phases it spent.

    Example:
        >>> build_job({"function": ..., "name": "kernel_3f..", ...})   # doctest: +SKIP
        {'asked': [['["dense_pack.x86",...]', None]], 'phases': {...}}
    """
    from ..autotvm.task import ApplyFixedConfigs, dispatch_log

    if payload["digest"] != source_digest():
        raise BuildJobError("the worker's kiln sources differ from the compiling process's")
    if payload["pipeline"] != pipeline_identity(default_pipeline()):
        raise BuildJobError("the worker's lowering pipeline differs from the compiling "
                            "process's")
    target = as_target(payload["target"])
    fn = function_from_json(payload["function"])
    with compile_timings() as timings, target, ApplyFixedConfigs(payload["answers"]), \
            dispatch_log() as asked:
        with phase("schedule"):
            prim, flops = lower_primitive_counted(fn, payload["name"])
        obj = compile_object([prim], target)
    if not _templates_are_kiln_code(asked):
        raise BuildJobError(f"kernel {payload['name']} uses a template outside kiln")
    store = KernelCache(payload["dir"], payload["limit"])
    store.put_asked(payload["key"], [key for key, _, _ in asked])
    store.put_kernel(object_key(payload["key"], [a for _, _, a in asked]),
                     KernelEntry.of(obj, prim.name, flops))
    phases = timings.phases()
    phases.pop("other", None)
    return {"asked": [[key, a] for key, _, a in asked], "phases": phases}

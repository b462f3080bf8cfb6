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
import logging
import os
import tempfile
import threading
from dataclasses import dataclass

from ..codegen.llvm.jit import ObjectCode, compile_object, link_objects
from ..codegen.common import ErrorTable
from ..graph.serialize import function_from_json, function_to_json
from ..runtime.function_info import FunctionInfo
from ..target import as_target
from ..timings import active_timings, compile_timings, kernel, phase
from .kernel_cache import KernelCache, KernelEntry
from .kernel_key import (function_key, object_key, ops_are_kiln_code, pipeline_identity,
                         source_digest)
from .lower_graph import lower_primitive_counted, schedule_primitive
from .pipeline import default_pipeline

JOB = "kiln.driver.build_kernels:build_job"
JOB_TIMEOUT_S = 600.0
logger = logging.getLogger("kiln")


class BuildJobError(RuntimeError):
    """A worker built a kernel differently from what this process asked (its kiln differs)."""


@dataclass(frozen=True)
class KernelSource:
    """A kernel of a compiled model as text: its name and loop program (str() prints it).

    Example:
        >>> str(KernelSource("f", "primfn f(...)"))
        'primfn f(...)'
    """

    name: str
    text: str

    def __str__(self) -> str:
        return self.text


class _Kernel:
    """One fused function on its way to an object: keys, what it asked, its entry."""

    def __init__(self, name: str, fn):
        self.name, self.fn = name, fn
        self.json = self.key = self.inner = self.object_key = None
        self.asked: list | None = None      # [(task key, template module, answer)]
        self.entry: KernelEntry | None = None
        self.cacheable = False


def build_kernels(calls, target, cache: "KernelCache | None | bool" = True):
    """Build the kernels `calls` ([(name, fused function)]) for `target`: the linked Module,
    each kernel's FLOPs per call and its loop program (KernelSource). `cache`: True for the
    user's kernel cache (KernelCache.default()), a KernelCache, or None / False for none.

    Example:
        >>> module, flops, sources = build_kernels(calls, Target("llvm"))   # doctest: +SKIP
    """
    target = as_target(target)
    if target.kind != "llvm":          # the C back-end builds one source; nothing is cached
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
    remote = [k for k in missing if k.cacheable] if _jobs() > 1 and len(missing) > 1 else []
    if remote:
        _build_in_workers(remote, target, cache, pipeline_id)
    for k in kernels:
        if k.entry is None:
            with kernel(k.name):
                _build_here(k, target, cache)
    objects = [_object_code(k.entry) for k in kernels]
    module = link_objects(objects, target, entry=kernels[0].name if kernels else None,
                          names={k.name: k.entry.name for k in kernels})
    flops = {k.name: k.entry.flops for k in kernels}
    sources = [KernelSource(k.name, _renamed(k.entry.tir, k.entry.name, k.name)) for k in kernels]
    return module, flops, sources


def _build_source_module(calls, target):
    from ..codegen import build_module

    prims, flops = [], {}
    for name, fn in calls:
        with kernel(name), phase("schedule"):
            prim, flops[name] = lower_primitive_counted(fn, name)
        prims.append(prim)
    module = build_module(prims, target, entry=prims[0].name)
    return module, flops, [KernelSource(p.name, str(p)) for p in prims]


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


def _asked_here(k: _Kernel) -> None:
    """What a kernel's templates ask (and are answered here), by scheduling it without lowering."""
    from ..autotvm.task import dispatch_log
    with dispatch_log() as asked, kernel(k.name), phase("schedule"):
        schedule_primitive(k.fn, k.inner)
    k.asked = asked
    k.object_key = object_key(k.key, [a for _, _, a in asked])


def _templates_are_kiln_code(asked) -> bool:
    return all(module is None or module == "kiln" or module.startswith("kiln.")
               for _, module, _ in asked)


# --------------------------------------------------------------------------------- building
def _build_here(k: _Kernel, target, cache) -> None:
    from ..autotvm.task import dispatch_log
    name = k.inner if k.cacheable else k.name
    with dispatch_log() as asked:
        with phase("schedule"):
            prim, flops = lower_primitive_counted(k.fn, name)
        obj = compile_object([prim], target)
    k.entry = _entry(obj, prim, flops)
    if k.cacheable and cache is not None and _templates_are_kiln_code(asked):
        k.object_key = object_key(k.key, [a for _, _, a in asked])
        cache.put_asked(k.key, [key for key, _, _ in asked])
        cache.put_kernel(k.object_key, k.entry)


def _entry(obj: ObjectCode, prim, flops) -> KernelEntry:
    return KernelEntry(prim.name, obj.object,
                       {n: info.to_dict() for n, info in obj.functions.items()},
                       list(obj.errors.messages), obj.ll, obj.ll_in, obj.uses_runtime, str(prim),
                       flops)


def _object_code(entry: KernelEntry) -> ObjectCode:
    return ObjectCode(entry.object,
                      {n: FunctionInfo.from_dict(d) for n, d in entry.functions.items()},
                      ErrorTable.from_messages(entry.errors), entry.ll, entry.ll_in,
                      entry.uses_runtime)


def _renamed(text: str, old: str, new: str) -> str:
    return text if old == new else text.replace(old, new)


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


_pool = None
_pool_lock = threading.Lock()


def worker_pool():
    """The build workers of this process (started on first use, stopped at exit).

    Example:
        >>> worker_pool().n_workers            # doctest: +SKIP
        2
    """
    global _pool
    from ..autotvm.workers import WorkerPool
    with _pool_lock:
        if _pool is None or _pool.n_workers != _jobs():
            if _pool is not None:
                _pool.close()
            _pool = WorkerPool(_jobs(), max_jobs=500, preload=("kiln.driver.build_kernels",))
            atexit.register(_pool.close)
        return _pool


def _build_in_workers(kernels: list, target, cache, pipeline_id) -> None:
    """Build `kernels` in the worker processes, through `cache` (or a temporary one); a kernel
    a worker could not build is left for this process, which raises the real error."""
    for k in kernels:
        if k.asked is None:
            _asked_here(k)
    kernels = [k for k in kernels if _templates_are_kiln_code(k.asked)]
    if len(kernels) < 2:
        return
    with tempfile.TemporaryDirectory(prefix="kiln_build_") as tmp:
        store = cache if cache is not None else KernelCache(tmp)
        payloads = [{"function": k.json, "name": k.inner, "target": str(target),
                     "asked": [[key, a] for key, _, a in k.asked], "key": k.key,
                     "object_key": k.object_key, "digest": source_digest(),
                     "pipeline": pipeline_id, "dir": str(store.root),
                     "limit": store.limit_bytes} for k in kernels]
        from ..autotvm.workers import WorkerPoolError
        try:
            with phase("build.workers"):
                outcomes = worker_pool().map(JOB, payloads, timeout=JOB_TIMEOUT_S)
        except WorkerPoolError as err:
            logger.warning("kernel build workers unavailable (%s); building here", err)
            return
        for k, outcome in zip(kernels, outcomes):
            if outcome.kind != "ok":
                logger.debug("worker build of %s: %s %s", k.name, outcome.kind, outcome.value)
                continue
            for recorder in active_timings():
                recorder.add_worker_phases(k.name, outcome.value.get("phases", {}))
            with phase("cache.read"):
                k.entry = store.get_kernel(k.object_key)


def build_job(payload: dict) -> dict:
    """What a build worker runs: lower and compile one fused function under the given dispatch
    answers, and store it in the cache directory payload["dir"].

    Example:
        >>> build_job({"function": ..., "name": "kernel_3f..", ...})   # doctest: +SKIP
        {'object_key': '9a1c...'}
    """
    from ..autotvm.task import ApplyFixedConfigs, dispatch_log

    if payload["digest"] != source_digest():
        raise BuildJobError("the worker's kiln sources differ from the compiling process's")
    if payload["pipeline"] != pipeline_identity(default_pipeline()):
        raise BuildJobError("the worker's lowering pipeline differs from the compiling "
                            "process's")
    target = as_target(payload["target"])
    fn = function_from_json(payload["function"])
    answers = {key: a for key, a in payload["asked"] if a is not None}
    with compile_timings() as timings, target, ApplyFixedConfigs(answers), \
            dispatch_log() as asked:
        with phase("schedule"):
            prim, flops = lower_primitive_counted(fn, payload["name"])
        obj = compile_object([prim], target)
    if [[key, a] for key, _, a in asked] != payload["asked"]:
        raise BuildJobError(f"kernel {payload['name']}: its templates asked differently in the "
                            f"worker ({[k for k, _, _ in asked]}) than in the compiling process")
    store = KernelCache(payload["dir"], payload["limit"])
    store.put_asked(payload["key"], [key for key, _, _ in asked])
    store.put_kernel(payload["object_key"], _entry(obj, prim, flops))
    phases = timings.phases()
    phases.pop("other", None)
    return {"object_key": payload["object_key"], "phases": phases}

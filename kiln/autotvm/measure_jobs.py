"""What the measurement workers run (see workers.py): build a candidate into a file, time a
built candidate, compute a task's reference outputs. Payloads and results are JSON.

For a CPU target a build writes `<dir>/<name>.so` (the kernel object linked by the system C
compiler, as export_library does) and returns its signature, so the runner loads the kernel
with kiln.runtime alone and never compiles again. For a device target (a GPU, an accelerator)
it writes `<dir>/<name>.json`, the module's own description (to_dict) and the class that
reads it back (from_dict): a GPU's DeviceModule (device program, signature, launch plan), timed
on device 0 of the target's kind with the device's own timer, or a VDLAModule, timed by its
simulator's cycle model.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np

from ..runtime.device import Device

# Inputs are random but the same for every candidate of a task, so outputs can be compared.
INPUT_SEED = 0
WARMUP_MS = 5.0     # untimed calls before each candidate's measurement


# ------------------------------------------------------------------------------ building
def _link(obj_code: bytes, c_source: str | None, target, so_path: Path) -> None:
    """A built candidate's code (an object, or C source for the c target) as a shared library
    at so_path."""
    from ..runtime.toolchain import compiler_for
    obj = so_path.with_suffix(".o" if c_source is None else ".c")
    if c_source is None:
        obj.write_bytes(obj_code)
        sources = [str(obj)]
    else:
        from ..codegen.c.build import compile_flags
        obj.write_text(c_source)
        sources = [*compile_flags(target), str(obj)]
    # A cross target's candidate is linked by its cross tool-chain, to run on the device.
    command = [*compiler_for(target.mtriple), "-shared", "-fPIC", "-o", str(so_path), *sources,
               "-lm"]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    finally:
        obj.unlink(missing_ok=True)
    if result.returncode != 0:
        raise RuntimeError(f"linking the candidate failed ({' '.join(command)}):\n"
                           f"{result.stderr[-1500:]}")


def _compiled_candidate(task, config: dict, max_ir_lines: int | None = None):
    """(entry function, {name: FunctionInfo dict}, error messages, object bytes or None, C
    source or None) of a config of a task: from the kernel cache when it holds this candidate
    (a config measured before: re-measured, or tuned again), else built (and cached)."""
    from ..codegen.llvm.jit import compile_object
    from ..driver import build, lower
    from ..driver.kernel_cache import KernelCache, KernelEntry
    from ..driver.kernel_key import candidate_key

    module_name = task.to_json().get("module") or ""
    cache = KernelCache.default() if task.target.kind == "llvm" and \
        (module_name == "kiln" or module_name.startswith("kiln.")) else None
    key = candidate_key(task.to_json(), config, task.target) if cache is not None else None
    entry = cache.get_kernel(key) if key is not None else None
    if entry is None:
        s, tensors = task.instantiate(config)
        with task.target:
            if task.target.kind != "llvm":
                module = build(s, tensors, target=task.target)
                functions = {n: module.function_info(n).to_dict()
                             for n in module.function_names()}
                return (module.entry, functions, list(module.errors_of[module.entry].messages),
                        None, module.get_source("c"))
            # An object only: the runner links it; loading it here too would be wasted.
            prim = lower(s, tensors, name="default_function")
            entry = KernelEntry.of(compile_object([prim], task.target, max_ir_lines),
                                   prim.name, None)
        if key is not None:
            cache.put_kernel(key, entry)
    return entry.name, entry.functions, entry.errors, entry.object, None


def build_candidate(payload: dict) -> dict:
    """Instantiate payload["task"] with payload["config"], lower, compile and link it to
    payload["dir"]/payload["name"].so (a GPU target: .json, its DeviceModule); returns {"file",
    "entry", "seconds", ...}. A CPU candidate built before (by this or another tuning run)
    comes from the kernel cache.

    Example:
        >>> build_candidate({"task": t.to_json(), "config": c.to_json(), "dir": d, "name": "c0"})  # doctest: +SKIP
    """
    from .task import Task

    start = time.perf_counter()
    task = Task.from_json(payload["task"])
    if task.target.is_device:
        built = _build_device_candidate(task, payload["config"],
                                        Path(payload["dir"]) / f"{payload['name']}.json")
        return {**built, "seconds": time.perf_counter() - start}
    entry, functions, errors, code, c_source = _compiled_candidate(
        task, payload["config"], payload.get("max_ir_lines"))
    so_path = Path(payload["dir"]) / f"{payload['name']}.so"
    _link(code, c_source, task.target, so_path)
    return {"file": str(so_path), "entry": entry, "functions": functions,
            "errors": dict(enumerate(errors, 1)), "seconds": time.perf_counter() - start}


def _build_device_candidate(task, config: dict, path: Path) -> dict:
    """A device target's candidate built and its module written to `path` as JSON, with the
    class that reads it back."""
    from ..driver import build

    s, tensors = task.instantiate(config)
    with task.target:
        module = build(s, tensors, target=task.target)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(module.to_dict()), encoding="utf-8")
    os.replace(tmp, path)
    cls = type(module)
    return {"file": str(path), "entry": module.entry,
            "module_class": f"{cls.__module__}:{cls.__qualname__}"}


def _module_class(spec: str):
    """The runtime module class a built candidate names ("package.module:Class"); only kiln's
    own classes, since the name comes from a file."""
    import importlib

    where, _, name = spec.partition(":")
    if not (where == "kiln" or where.startswith("kiln.")) or not name.isidentifier():
        raise ValueError(f"a built candidate names module class {spec!r}, not one of kiln's")
    cls = getattr(importlib.import_module(where), name, None)
    if cls is None or not hasattr(cls, "from_dict"):
        raise ValueError(f"a built candidate names module class {spec!r}, which kiln lacks")
    return cls


# ------------------------------------------------------------------------------ running
class _Candidate:
    """A built candidate's entry function in a module (a host Module, a DeviceModule, an
    accelerator's module), with the device its arrays live on: a GPU module's device type,
    else the CPU (an accelerator's module takes host arrays and times itself)."""

    def __init__(self, module, entry: str):
        from ..runtime import cpu
        from ..runtime.module import Module
        self.module, self.entry = module, entry
        self.call = module.get_function(entry)
        self.info = module.function_info(entry)
        self.host_timed = isinstance(module, Module)
        device_type = getattr(module, "device_type", None)
        self.device = Device(device_type, 0) if device_type else cpu(0)

    def timer(self, number: int, repeat: int, min_repeat_ms: float, cache_flush: bool):
        # Flushing evicts the CPU's caches: it models a CPU kernel's weights coming from
        # memory, and is not done for a device's kernels.
        flush = {"cache_flush": cache_flush} if self.host_timed else {}
        return self.module.time_evaluator(self.entry, number=number, repeat=repeat,
                                          min_repeat_ms=min_repeat_ms, **flush)


def _load(built: dict) -> _Candidate:
    """A built candidate, loaded from its shared library (CPU) or module description (a
    device target)."""
    import ctypes

    from ..runtime import FunctionInfo, Module, parallel_launch_address
    from ..runtime.load import SYMBOL_PREFIX

    if "module_class" in built:
        data = json.loads(Path(built["file"]).read_text(encoding="utf-8"))
        return _Candidate(_module_class(built["module_class"]).from_dict(data), built["entry"])
    parallel_launch_address()       # the kernels resolve the support library's symbols at load
    lib = ctypes.CDLL(built["file"])
    infos = {name: FunctionInfo.from_dict(d) for name, d in built["functions"].items()}

    def address(name):
        return ctypes.cast(getattr(lib, SYMBOL_PREFIX + name), ctypes.c_void_p).value

    messages = {int(k): v for k, v in built.get("errors", {}).items()}
    module = Module(infos, address, {}, built["entry"], lib, "so", status_messages=messages)
    return _Candidate(module, built["entry"])


def random_arguments(info, seed: int = INPUT_SEED, device=None) -> list:
    """Seeded random arrays for every buffer parameter of a FunctionInfo (same seed, same
    data), on `device` (default: the CPU).

    Example:
        >>> [a.shape for a in random_arguments(func.info)]   # doctest: +SKIP
        [(16, 16), (16, 16), (16, 16)]
    """
    from ..runtime import array
    rng = np.random.default_rng(seed)
    args = []
    for p in info.params:
        if p.kind != "buffer":
            raise ValueError(f"cannot measure {info.signature()}: scalar parameter {p.name!r} "
                             f"has no value to give it")
        if any(isinstance(e, str) for e in p.shape):
            raise ValueError(f"cannot measure {info.signature()}: buffer {p.name!r} has a "
                             f"symbolic shape")
        dtype = np.dtype(p.dtype)
        if dtype.kind == "f":
            data = rng.uniform(-1.0, 1.0, p.shape).astype(dtype)
        elif dtype.kind == "b":
            data = rng.integers(0, 2, p.shape).astype(bool)
        elif dtype.kind == "u":
            data = rng.integers(0, 9, p.shape).astype(dtype)
        else:
            data = rng.integers(-4, 5, p.shape).astype(dtype)
        args.append(array(data, device=device))
    return args


def _outputs(candidate: _Candidate, args) -> dict:
    """Call once and return every buffer afterwards (outputs written, inputs unchanged)."""
    candidate.call(*args)
    return {p.name: a.numpy() for p, a in zip(candidate.info.params, args)}


def _mismatch(got: dict, want: dict, rtol: float, atol: float) -> str | None:
    """Why the outputs differ from the reference, or None when they agree within tolerance."""
    if sorted(got) != sorted(want):
        return f"the candidate's buffers {sorted(got)} differ from the reference's {sorted(want)}"
    for name, ref in want.items():
        out = got[name]
        if out.shape != ref.shape or out.dtype != ref.dtype:
            return (f"buffer {name!r} is {out.dtype}{list(out.shape)}, the reference "
                    f"{ref.dtype}{list(ref.shape)}")
        if ref.dtype.kind == "f":
            close = np.isclose(out, ref, rtol=rtol, atol=atol, equal_nan=True)
        else:
            close = out == ref
        if not close.all():
            bad = int(np.argmax(~close.ravel()))
            where = np.unravel_index(bad, ref.shape)
            return (f"buffer {name!r} differs from the reference at {int((~close).sum())} of "
                    f"{ref.size} elements (first at {tuple(int(i) for i in where)}: "
                    f"{out.flat[bad]!r} vs {ref.flat[bad]!r}; rtol={rtol:g}, atol={atol:g})")
    return None


def run_candidate(payload: dict) -> dict:
    """Load payload["built"], optionally compare one call's buffers with payload["reference"]
    (an .npz), then time it; returns {"status": "ok", "costs": [...]} or
    {"status": "wrong_answer", "message": ...}. A failing call raises (a runtime error).

    Example:
        >>> run_candidate({"built": b, "number": 4, "repeat": 3, "min_repeat_ms": 0})  # doctest: +SKIP
        {'status': 'ok', 'costs': [1.2e-06, 1.1e-06, 1.1e-06]}
    """
    candidate = _load(payload["built"])
    args = random_arguments(candidate.info, device=candidate.device)
    reference = payload.get("reference")
    if reference:
        with np.load(reference) as ref:
            want = {name: ref[name] for name in ref.files}
        why = _mismatch(_outputs(candidate, args), want, payload["rtol"], payload["atol"])
        if why is not None:
            return {"status": "wrong_answer", "message": why}
    # Warm up for a few milliseconds, not one call: the first calls in a fresh worker start
    # the thread pool and fault in code and scratch pages, and were seen to cost 100x a
    # steady call: the first candidate of each task (its default config) measured slow.
    if not getattr(candidate.module, "deterministic_timing", False):
        candidate.timer(1, 1, WARMUP_MS, False)(*args)
    timer = candidate.timer(payload["number"], payload["repeat"], payload["min_repeat_ms"],
                            payload.get("cache_flush", False))
    return {"status": "ok", "costs": list(timer(*args).results)}


def reference_outputs(payload: dict) -> dict:
    """Build payload["task"]'s default config in this worker, call it once on the seeded
    inputs and save every buffer to payload["path"] (.npz); returns {"path"}.

    Example:
        >>> reference_outputs({"task": t.to_json(), "path": "/tmp/ref.npz"})   # doctest: +SKIP
    """
    from ..driver import build
    from .task import Task

    task = Task.from_json(payload["task"])
    s, tensors = task.instantiate(task.default_config())
    with task.target:
        module = build(s, tensors, target=task.target)
    candidate = _Candidate(module, module.entry)
    outputs = _outputs(candidate, random_arguments(candidate.info, device=candidate.device))
    tmp = payload["path"] + ".tmp.npz"
    np.savez(tmp, **outputs)
    os.replace(tmp, payload["path"])
    return {"path": payload["path"]}

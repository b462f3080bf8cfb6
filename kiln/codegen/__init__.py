"""Code generators: lowered PrimFuncs -> a kiln.runtime.Module of native functions.

    mod = build_module([func], "llvm")      # or "c", or a Target
    mod(a, b, c)

A back-end is a function builder(funcs, target, entry) -> Module registered for a target kind.
The CPU back-ends (llvm/, c/) share the front half of a build (common.prepare) and the
meaning of every construct (emitter.py); each spells only its own language. The GPU back-ends
(cuda/, opencl/) share gpu/ (host/device split, the C-family kernel core, the build driver)
and return a kiln.runtime.gpu.DeviceModule.
"""
from __future__ import annotations

from typing import Callable

from ..target import Target, as_target  # noqa: F401  (Target: re-exported for users)
from ..tir.function import PrimFunc
from .common import CodegenError
from .intrinsics import lower_intrinsics

_BUILDERS: dict[str, Callable] = {}


def register_codegen(kind: str, builder: Callable | None = None):
    """Register builder(funcs, target, entry) -> kiln.runtime.Module for a target kind.

    Usable as a decorator.

    Example:
        >>> @register_codegen("mykind")            # doctest: +SKIP
        ... def build_mine(funcs, target, entry): ...
    """
    def register(fn):
        _BUILDERS[kind] = fn
        return fn
    return register if builder is None else register(builder)


def build_module(funcs, target: "Target | str", entry: str | None = None):
    """Compile PrimFuncs for a target into a Module; `entry` (default: the first) is what
    calling the module calls.

    Example:
        >>> mod = build_module([vadd], "llvm")    # doctest: +SKIP
        >>> mod(a, b, c)                          # doctest: +SKIP
    """
    target = as_target(target)
    if isinstance(funcs, PrimFunc):
        funcs = [funcs]
    funcs = list(funcs)
    if not funcs:
        raise CodegenError("build_module needs at least one PrimFunc")
    for f in funcs:
        if not isinstance(f, PrimFunc):
            raise CodegenError(f"build_module takes kiln.tir.PrimFuncs, got {type(f).__name__}")
    names = [f.name for f in funcs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise CodegenError(f"build_module: function names repeat: {repeated}")
    if entry is None:
        entry = names[0]
    elif entry not in names:
        raise CodegenError(f"build_module: entry {entry!r} is not among the functions {names}")
    builder = _BUILDERS.get(target.kind)
    if builder is None:
        raise CodegenError(f"no code generator for target kind {target.kind!r}; registered: "
                           f"{', '.join(sorted(_BUILDERS))}")
    return builder(funcs, target, entry)


def _build_llvm(funcs, target, entry):
    from .llvm import build_llvm
    return build_llvm(funcs, target, entry)


def _build_c(funcs, target, entry):
    from .c import build_c
    return build_c(funcs, target, entry)


def _build_cuda(funcs, target, entry):
    from .cuda import build_cuda
    return build_cuda(funcs, target, entry)


def _build_opencl(funcs, target, entry):
    from .opencl import build_opencl
    return build_opencl(funcs, target, entry)


def _build_vdla(funcs, target, entry):
    from ..accel.vdla.codegen import build_vdla
    return build_vdla(funcs, target, entry)


register_codegen("llvm", _build_llvm)
register_codegen("c", _build_c)
register_codegen("cuda", _build_cuda)
register_codegen("opencl", _build_opencl)
register_codegen("vdla", _build_vdla)

__all__ = ["CodegenError", "Target", "build_module", "lower_intrinsics", "register_codegen"]

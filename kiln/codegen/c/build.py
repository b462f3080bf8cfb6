"""The "c" back-end: write C, compile it once per distinct source with the system compiler
(cached by the runtime's build_shared_library, written atomically), load it with ctypes.
"""
from __future__ import annotations

import ctypes

from ...target import Target
from ..common import CodegenError, ErrorTable, prepare, symbol_of
from ..compiled import CompiledModule
from .source import CModuleEmitter

# ISO excess precision: each _Float16 result is rounded where it is assigned, as numpy does.
# Contraction into FMA is allowed (as in the LLVM back-end); nothing else that changes results.
# No loop if-conversion: GCC 12 tuning for rocketlake (what -march=native makes of a Sapphire
# Rapids VM) turned `i < 37 ? X[i] * 2 : -1` over 48 iterations into a blend whose memory
# operand reads X[32..39], past the buffer's end: a fault when the next page is unmapped.
_FLAGS = ("-O3", "-std=gnu11", "-fexcess-precision=standard", "-ffp-contract=fast",
          "-fno-math-errno", "-fno-trapping-math", "-fno-tree-loop-if-convert", "-w")


def emit_c(funcs, target: Target, errors: ErrorTable) -> tuple[str, bool]:
    """C source for PrimFuncs (already checked and lowered) and whether it uses the pool.

    Example:
        >>> source, uses_runtime = emit_c([f], Target("c"), ErrorTable())   # doctest: +SKIP
    """
    return CModuleEmitter.emit(funcs, errors)


def compile_flags(target: Target) -> tuple[str, ...]:
    """Flags for the system C compiler (it adds -shared -fPIC).

    Example:
        >>> compile_flags(Target("c"))[-1]
        '-march=native'
    """
    arch = "-march=native" if target.is_host else f"-march={target.mcpu}"
    return _FLAGS + (arch,)


def build_c(funcs, target: Target, entry: str | None) -> CompiledModule:
    """Compile PrimFuncs through C into a shared library loaded in this process.

    Example:
        >>> mod = build_c([f], Target("c"), "f")   # doctest: +SKIP
    """
    from ...runtime import NativeBuildError, build_shared_library, parallel_launch_address

    prep = prepare(funcs, target)
    names = ", ".join(prep.infos)
    try:
        source, uses_runtime = emit_c(prep.funcs, target, prep.errors)
    except ValueError as err:
        if isinstance(err, CodegenError):
            raise
        # CTypes rejects vectors C cannot declare; name the functions they came from.
        raise CodegenError(f"function(s) {names}: {err}") from None
    if uses_runtime:
        parallel_launch_address()       # loads the support library (RTLD_GLOBAL) the code links to
    try:
        path = build_shared_library(source, f"kiln_{entry}", compile_flags(target))
    except NativeBuildError as err:
        raise CodegenError(f"the C compiler rejected the code for {names}: {err}") from None
    lib = ctypes.CDLL(str(path))

    def address(name: str) -> int:
        return ctypes.cast(getattr(lib, symbol_of(name)), ctypes.c_void_p).value

    return CompiledModule(prep.infos, address, {"c": source, "errors": prep.errors.to_json()},
                          entry, lib, "c", errors=prep.errors)

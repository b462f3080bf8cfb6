"""The "c" back-end: write C, compile it once per distinct source with the system compiler
(cached by the runtime's build_shared_library, written atomically), load it with ctypes.
"""
from __future__ import annotations

import ctypes

from ...target import Target
from ..common import CodegenError, ErrorTable, cross_address, prepare, symbol_of
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
    if target.is_host:
        return _FLAGS + ("-march=native",)
    # GCC names an ARM core with -mcpu (its -march takes an architecture: armv8-a)
    return _FLAGS + (f"-{'mcpu' if target.machine_arch == 'aarch64' else 'march'}={target.mcpu}",)


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
    sources = {"c": source, "errors": prep.errors.to_json()}
    if target.is_cross:             # checked by the cross compiler; linked by export_library
        _cross_check(source, target, names)
        return CompiledModule(prep.infos, cross_address(target), sources, entry, None, "c",
                              errors=prep.errors)
    if uses_runtime:
        parallel_launch_address()       # loads the support library (RTLD_GLOBAL) the code links to
    try:
        path = build_shared_library(source, f"kiln_{entry}", compile_flags(target))
    except NativeBuildError as err:
        raise CodegenError(f"the C compiler rejected the code for {names}: {err}") from None
    lib = ctypes.CDLL(str(path))

    def address(name: str) -> int:
        return ctypes.cast(getattr(lib, symbol_of(name)), ctypes.c_void_p).value

    return CompiledModule(prep.infos, address, sources, entry, lib, "c", errors=prep.errors)


def _cross_check(source: str, target: Target, names: str) -> None:
    """Compile `source` with the target's cross compiler, only to report its errors now."""
    import subprocess
    import tempfile

    from ...runtime import NativeBuildError
    from ...runtime.toolchain import compiler_for
    try:
        cc = compiler_for(target.mtriple)
    except NativeBuildError as err:
        raise CodegenError(f"target {target}: {err}") from None
    with tempfile.TemporaryDirectory(prefix="kiln_c_") as tmp:
        c_file = f"{tmp}/kernels.c"
        with open(c_file, "w") as f:
            f.write(source)
        done = subprocess.run([*cc, *compile_flags(target), "-fPIC", "-c", c_file, "-o",
                               f"{tmp}/kernels.o"], capture_output=True, text=True)
    if done.returncode != 0:
        raise CodegenError(f"the C compiler ({cc[0]}) rejected the code for {names}:\n"
                           f"{done.stderr[-2000:]}")

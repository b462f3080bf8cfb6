"""The LLVM back-end: loop IR -> LLVM IR text -> O3 -> machine code in an in-process JIT."""
from .jit import build_llvm, emit_ir

__all__ = ["build_llvm", "emit_ir"]

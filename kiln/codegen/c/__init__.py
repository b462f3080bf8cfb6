"""The C back-end: loop IR -> C11 with GCC vector extensions -> cc -O3 -> ctypes."""
from .build import build_c, emit_c

__all__ = ["build_c", "emit_c"]

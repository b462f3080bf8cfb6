"""kiln: an end-to-end optimizing compiler for deep learning (tensor expressions → LLVM).

Example:
    >>> import kiln
    >>> from kiln import te
    >>> n = te.var("n")
    >>> A = te.placeholder((n,), name="A")
    >>> B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    >>> s = te.create_schedule(B.op)
    >>> f = kiln.build(s, [A, B], target="llvm")   # doctest: +SKIP
"""
from . import te, tir
from .driver import build, lower
from .runtime import cpu, get_global_func, register_func
from . import runtime
from .runtime import ndarray as _ndarray_module


class _NDNamespace:
    """kiln.nd: array constructors (kiln.nd.array, kiln.nd.empty, kiln.nd.from_dlpack)."""

    def __init__(self):
        from . import runtime as rt
        self.array = rt.array
        self.empty = rt.empty
        self.from_dlpack = rt.from_dlpack
        self.NDArray = rt.NDArray


nd = _NDNamespace()

__all__ = ["te", "tir", "build", "lower", "cpu", "nd", "runtime", "register_func",
           "get_global_func"]
__version__ = "0.1.0"

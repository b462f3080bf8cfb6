"""Loops of at most one iteration become branches.

A stage computed inside a GPU thread's loops covers one element of a clipped tile: its loop
runs `min(n - i, 1)` times, once or not at all. As a loop its variable is unknown, so a
register array indexed by it (`acc[f + y]`) cannot stay in registers: the CUDA compiler moves
it to local memory. As a branch the variable is the loop's start, and indices fold.

Before:
    for y in range(min(14 - floordiv(blockIdx.x*64 + threadIdx.x, 14), 1)):
      acc[f + y] = 0.0f
After:
    if 0 < min(14 - floordiv(blockIdx.x*64 + threadIdx.x, 14), 1):
      acc[f] = 0.0f
"""
from __future__ import annotations

from ..expr import IntImm
from ..function import PrimFunc
from ..functor import IRMutator, substitute
from ..op import less
from ..stmt import IfThenElse


def single_iteration_loops(func):
    """Turn every serial loop whose extent is at most 1 into a branch.

    Example:
        >>> f = single_iteration_loops(f)   # doctest: +SKIP
    """
    body = func.body if isinstance(func, PrimFunc) else func
    out = _Branches().visit(body)
    return func.with_body(out) if isinstance(func, PrimFunc) else out


class _Branches(IRMutator):
    def __init__(self):
        super().__init__()
        from ...arith import Analyzer
        self.analyzer = Analyzer()

    def visit_For(self, s):
        body = self.visit(s.body)
        if s.kind != "serial" or isinstance(s.extent, IntImm) or \
                self.analyzer.const_int_bound(s.extent).max_value > 1:
            return s if body is s.body else s.replace(body=body)
        return IfThenElse(less(IntImm(s.extent.dtype, 0), s.extent),
                          substitute(body, {s.loop_var: s.min}))

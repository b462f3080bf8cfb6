"""The length of a slice over symbolic sizes (shared by the graph's type relation and topi)."""
from __future__ import annotations

from ..tir.expr import IntImm
from .analyzer import Analyzer


def symbolic_slice_length(begin, end, step: int):
    """The length of [begin, end) by `step` > 0 where a bound or the axis is a symbolic size:
    the bounds are taken as resolved (no negative index) and within the axis, which the
    frontends check (torch records the length its guards proved). ValueError for a stride
    that is not positive.

    Example:
        >>> from kiln import te
        >>> n = te.size_var("n"); str(symbolic_slice_length(1, n, 1))
        'n - 1'
    """
    if step <= 0:
        raise ValueError(f"a slice over symbolic sizes needs a positive stride, got {step}")
    ana = Analyzer()
    length = ana.simplify(end - begin if step == 1 else (end - begin + (step - 1)) // step)
    return length.value if isinstance(length, IntImm) else length

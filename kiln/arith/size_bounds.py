"""Declared ranges of symbolic sizes: what every analysis may assume about them.

A size variable (kiln.tir SizeVar) is non-negative. A model compiled over symbolic
dimensions declares more: each dimension's range (kiln.compile takes main's "dim_ranges", and
the runtime refuses inputs outside it), typically [1, n]. Knowing that a batch is at least 1
lets the simplifier fold min(batch*196, batch*392 - 1) to batch*196, and bound inference find
one row where it would otherwise find a clipped, data-dependent region. The ranges are kept
per variable object (weakly: they go with it) and travel with a serialized function.

Example:
    >>> from kiln import te
    >>> n = te.size_var("n"); declare_size_bounds(n, 1, 512); size_bounds(n)
    (1, 512)
"""
from __future__ import annotations

import weakref

_BOUNDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def declare_size_bounds(var, low: int, high: int | None = None) -> None:
    """Declare that size variable `var` lies in [low, high] (high None: unbounded).

    Example:
        >>> declare_size_bounds(te.size_var("seq"), 1, 512)   # doctest: +SKIP
    """
    if low < 0 or (high is not None and high < low):
        raise ValueError(f"size {var} cannot range over [{low}, {high}]")
    _BOUNDS[var] = (int(low), None if high is None else int(high))


def size_bounds(var):
    """(low, high or None) declared for `var`, else None.

    Example:
        >>> size_bounds(te.size_var("m")) is None             # doctest: +SKIP
        True
    """
    return _BOUNDS.get(var)

"""Dynamic dimensions of an exported program as kiln size expressions.

torch.export records a dimension exported as dynamic (`dynamic_shapes` with torch.export.Dim)
as a sympy expression over its shape environment's symbols (s0, s77 ...), with each symbol's
range in the program's range_constraints. The importer turns every symbol into one kiln size
variable (named after its Dim when kiln ran the export, else after the symbol) and every
expression over them into the kiln.tir expression of the same value; the ranges become main's
"dim_ranges" (kiln.driver.symbolic_dims).
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import operator

import sympy
import torch

from ...arith.size_bounds import declare_size_bounds
from ...tir import op as top
from ...tir.expr import SizeVar
from ..common import FrontendError

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("kiln_torch_symbols", default=None)


class SymbolTable:
    """The size variables of one import: sympy symbol -> kiln SizeVar, with their ranges."""

    def __init__(self, program, names: dict | None = None):
        self.vars: dict = {}
        self.ranges: dict = {}         # variable name -> (low, high or None)
        self._names = dict(names or {})
        self._constraints = {str(s): r for s, r in program.range_constraints.items()}

    def var(self, symbol) -> SizeVar:
        key = str(symbol)
        v = self.vars.get(key)
        if v is None:
            name = self._names.get(key, key)
            v = self.vars[key] = SizeVar(name, "int32")
            r = self._constraints.get(key)
            # A Dim's min defaults to 0; kiln runs sizes from 1 (an empty batch is not a
            # batch), so a range starts at 1 at the lowest.
            low = max(_finite(r.lower) or 0, 1) if r is not None else 1
            high = _finite(r.upper) if r is not None else None
            self.ranges[name] = (low, high)
            declare_size_bounds(v, low, high)
        return v

    def convert(self, e, where: str = ""):
        """A sympy size expression as an int or kiln.tir expression."""
        if e.is_Integer:
            return int(e)
        if e.is_Symbol:
            return self.var(e)
        if isinstance(e, sympy.Add):
            return functools.reduce(operator.add, [self.convert(a, where) for a in e.args])
        if isinstance(e, sympy.Mul):
            return functools.reduce(operator.mul, [self.convert(a, where) for a in e.args])
        name = type(e).__name__
        if name in ("FloorDiv", "CleanDiv") and len(e.args) == 2:
            a, b = (self.convert(x, where) for x in e.args)
            return top.floordiv(a, b) if not isinstance(a, int) or not isinstance(b, int) \
                else a // b
        if name in ("Mod", "PythonMod") and len(e.args) == 2:
            a, b = (self.convert(x, where) for x in e.args)
            return top.floormod(a, b) if not isinstance(a, int) or not isinstance(b, int) \
                else a % b
        if isinstance(e, (sympy.Max, sympy.Min)):
            pick = (max, top.max_) if isinstance(e, sympy.Max) else (min, top.min_)
            return functools.reduce(lambda a, b: pick[0](a, b) if isinstance(a, int) and
                         isinstance(b, int) else pick[1](a, b),
                         [self.convert(a, where) for a in e.args])
        raise FrontendError(f"{where}: the dynamic size {e} ({name}) is not one kiln expresses "
                            f"(sizes, + - * // %, min, max)")


def _finite(v):
    """A range end as an int, None when infinite (torch's int_oo says it is finite)."""
    from torch.utils._sympy.numbers import IntInfinity, NegativeIntInfinity
    if isinstance(v, (IntInfinity, NegativeIntInfinity)) or v in (sympy.oo, -sympy.oo):
        return None
    return int(v)


@contextlib.contextmanager
def active(table: SymbolTable):
    """Make `table` the one torch_dim converts with, for the duration of an import."""
    token = _ACTIVE.set(table)
    try:
        yield table
    finally:
        _ACTIVE.reset(token)


def torch_dim(d, where: str = ""):
    """A torch size (int or SymInt) as an int, or in a dynamic import as a kiln expression.

    Example:
        >>> torch_dim(3)
        3
    """
    if isinstance(d, int):
        return d
    if isinstance(d, torch.SymInt):
        if d.node.is_constant():
            return int(d)
        table = _ACTIVE.get()
        if table is not None:
            return table.convert(d.node.expr, where)
    raise FrontendError(f"{where}: dynamic dimension {d}; kiln imports it only from an "
                        f"exported program whose dynamic dimensions are Dims (dynamic_shapes)")

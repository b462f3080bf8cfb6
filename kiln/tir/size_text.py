"""Size expressions as text the runtime evaluates (kiln.runtime.symbolic): an int, a variable's
name, or + - * // % min max of them in Python syntax, e.g. "(seq * 12)"."""
from __future__ import annotations

from . import expr as tx

_SYMBOLS = {tx.Add: "+", tx.Sub: "-", tx.Mul: "*", tx.FloorDiv: "//", tx.FloorMod: "%"}


def size_text(d):
    """A size as an int or its text; ValueError for an expression the runtime cannot evaluate.

    Example:
        >>> from kiln import te
        >>> n = te.var("n"); size_text(n * 12), size_text(7)
        ('(n * 12)', 7)
    """
    if isinstance(d, int):
        return d
    if isinstance(d, tx.IntImm):
        return d.value
    if isinstance(d, tx.Var):
        if not d.name.isidentifier():
            raise ValueError(f"symbolic size {d.name!r} is not an identifier")
        return d.name
    symbol = _SYMBOLS.get(type(d))
    if symbol is not None:
        return f"({_text(d.a)} {symbol} {_text(d.b)})"
    if isinstance(d, (tx.Min, tx.Max)):
        return f"{'min' if isinstance(d, tx.Min) else 'max'}({_text(d.a)}, {_text(d.b)})"
    raise ValueError(f"size `{d}` ({type(d).__name__}) is not an expression the runtime "
                     f"evaluates (sizes, names, + - * // %, min, max)")


def _text(d) -> str:
    return str(size_text(d))

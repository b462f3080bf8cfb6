"""kiln.arith: integer analysis and simplification shared by te and tir.

    Analyzer        bindings of variables to ranges, constraints; simplify, const_int_bound,
                    can_prove, can_prove_equal
    IntervalSet     symbolic closed intervals; eval_set, union, intersect
    detect_linear   coefficients of an expression that is linear in given variables
"""
from .analyzer import Analyzer
from .bound import ConstIntBound
from .int_set import IntervalSet, eval_set, intersect, union
from .linear import detect_linear


def simplify(expr, analyzer=None):
    """Simplify one expression (with a fresh Analyzer unless one is given).

    Example:
        >>> from kiln.tir import Var
        >>> x = Var("x")
        >>> simplify(x + x - x * 2 + 1)
        1
    """
    return (analyzer or Analyzer()).simplify(expr)


__all__ = ["Analyzer", "ConstIntBound", "IntervalSet", "eval_set", "union", "intersect",
           "detect_linear", "simplify"]

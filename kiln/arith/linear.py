"""Linear forms: expr == c_0*v_0 + ... + c_{k-1}*v_{k-1} + base, with coefficients free of the v's."""
from __future__ import annotations

from ..tir import dtype as dt
from ..tir import op as _op
from ..tir.expr import Add, Mul, PrimExpr, Sub, Var
from ..tir.functor import uses_var
from ..tir.op import IRError, convert
from .poly import Poly, add as poly_add, is_index_type, poly_of, to_expr


def detect_linear(expr, vars) -> list[PrimExpr] | None:
    """Coefficients [c_0, ..., c_{k-1}, base] of expr in vars, or None if expr is not linear.

    Coefficients may be symbolic (free of vars); they come back in canonical form.

    Example:
        >>> from kiln.tir import Var
        >>> i, j, n = Var("i"), Var("j"), Var("n")
        >>> detect_linear(i * 4 + j * n + 3, [i, j])
        [4, n, 3]
    """
    expr = convert(expr)
    vars = list(vars)
    for v in vars:
        if not isinstance(v, Var):
            raise IRError(f"detect_linear: expected Vars, got {v!r}")
    if is_index_type(expr.dtype):
        return _linear_poly(expr, vars)
    return _linear_tree(expr, vars)


def _linear_poly(expr, vars):
    p = poly_of(expr)
    var_set = set(vars)
    dtype = p.dtype
    coefs = {v: Poly({}, 0, dtype) for v in vars}
    base = Poly({}, p.const, dtype)
    for mono, coef in p.terms.items():
        hits = [k for k, a in enumerate(mono) if a in var_set]
        for k, a in enumerate(mono):
            if k not in hits and not isinstance(a, Var) and uses_var(a, var_set):
                return None
        if not hits:
            base = poly_add(base, Poly({mono: coef}, 0, dtype))
        elif len(hits) == 1:
            k = hits[0]
            rest = mono[:k] + mono[k + 1:]
            term = Poly({rest: coef}, 0, dtype) if rest else Poly({}, coef, dtype)
            coefs[mono[k]] = poly_add(coefs[mono[k]], term)
        else:
            return None
    return [to_expr(coefs[v]) for v in vars] + [to_expr(base)]


def _linear_tree(expr, vars):
    """Structural version for float (and vector) expressions: no reassociation."""
    var_set = set(vars)
    zero = _op.const(0, expr.dtype)

    # None stands for a base of exactly zero, so that no `0.0 + y` is introduced.
    def combine(fn, x, y):
        if y is None:
            return x
        if x is None:
            return y if fn is _op.add else _op.neg(y)
        return fn(x, y)

    def walk(e):
        if isinstance(e, Var) and e in var_set:
            return {e: _op.const(1, e.dtype)}, None
        if not uses_var(e, var_set):
            return {}, e
        if isinstance(e, (Add, Sub)):
            left, right = walk(e.a), walk(e.b)
            if left is None or right is None:
                return None
            fn = _op.add if isinstance(e, Add) else _op.sub
            coefs = dict(left[0])
            for v, c in right[0].items():
                coefs[v] = combine(fn, coefs.get(v), c)
            return coefs, combine(fn, left[1], right[1])
        if isinstance(e, Mul):
            left, right = walk(e.a), walk(e.b)
            if left is None or right is None:
                return None
            if not left[0]:
                factor, (coefs, base) = left[1], right
            elif not right[0]:
                factor, (coefs, base) = right[1], left
            else:
                return None
            return ({v: _op.mul(c, factor) for v, c in coefs.items()},
                    None if base is None else _op.mul(base, factor))
        return None

    result = walk(expr)
    if result is None:
        return None
    coefs, base = result
    if dt.lanes_of(expr.dtype) > 1:
        return None
    return [coefs.get(v, zero) for v in vars] + [zero if base is None else base]

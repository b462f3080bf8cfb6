"""SimplifyExpr: algebraic clean-ups that frontends leave behind.

    reshape / squeeze / expand_dims chains  → one reshape (nothing if the shape is unchanged)
    transpose(transpose(x, p), q)           → transpose(x, p∘q)  (nothing if the identity)
    cast(x, x.dtype)                        → x
    x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1 → x   (a constant whose elements are all 0 / 1,
                                               only when the result has x's exact type)
"""
from __future__ import annotations

from ..expr import Call
from ..op import call
from ..ty import TensorType
from .pass_infra import FunctionPass
from .rewrite import const_scalar, is_op, rewrite

RESHAPE_LIKE = ("reshape", "squeeze", "expand_dims")


def _static_shape(e):
    ty = e.checked_type
    return ty.shape if isinstance(ty, TensorType) and ty.is_static() else None


def _reshape_chain(c: Call):
    """Skip over reshape-like producers: the result depends only on the innermost input's data."""
    src = c.args[0]
    while any(is_op(src, n) for n in RESHAPE_LIKE):
        src = src.args[0]
    out_shape = _static_shape(c)
    if out_shape is None or _static_shape(src) is None:
        return None
    if src.checked_type == c.checked_type:
        return src
    if src is c.args[0]:
        return None          # a single reshape-like op: nothing to merge
    return call("reshape", src, newshape=out_shape, span=c.span)


def _perm(axes, ndim):
    if axes is None:
        return tuple(reversed(range(ndim)))
    return tuple(a % ndim for a in axes)


def _transpose_chain(c: Call):
    x = c.args[0]
    ndim = x.checked_type.ndim
    perm = _perm(c.attrs.axes, ndim)
    if is_op(x, "transpose"):
        inner = _perm(x.attrs.axes, ndim)
        # y = transpose(x, p): y axis i is x axis p[i]; so transpose(y, q) has axis j = p[q[j]]
        perm = tuple(inner[q] for q in perm)
        x = x.args[0]
    if perm == tuple(range(ndim)):
        return x
    if x is c.args[0]:
        return None
    return call("transpose", x, axes=perm, span=c.span)


def _identity_cast(c: Call):
    x = c.args[0]
    return x if x.checked_type == c.checked_type else None


def _neutral(value, commutes: bool):
    """Rule dropping a constant operand equal to `value` (0 for add, 1 for multiply)."""
    def rule(c: Call):
        a, b = c.args
        if const_scalar(b) == value and a.checked_type == c.checked_type:
            return a
        if commutes and const_scalar(a) == value and b.checked_type == c.checked_type:
            return b
        return None
    return rule


def _is_numeric(c: Call) -> bool:
    ty = c.checked_type
    return isinstance(ty, TensorType) and ty.dtype != "bool"


def _guard(rule):
    def guarded(c):
        return rule(c) if _is_numeric(c) else None
    guarded.__name__ = getattr(rule, "__name__", "rule")
    return guarded


RULES = {
    **{name: [_reshape_chain] for name in RESHAPE_LIKE},
    "transpose": [_transpose_chain],
    "cast": [_identity_cast],
    "add": [_guard(_neutral(0, True))],
    "subtract": [_guard(_neutral(0, False))],
    "multiply": [_guard(_neutral(1, True))],
    "divide": [_guard(_neutral(1, False))],
}


def simplify_expr(expr):
    """Apply the SimplifyExpr rules to an expression or function.

    Example:
        >>> simplify_expr(call("reshape", call("reshape", x, newshape=(4, 2)), newshape=(8,)))  # doctest: +SKIP
    """
    return rewrite(expr, RULES)


def SimplifyExpr():
    """The SimplifyExpr function pass (opt_level 0).

    Example:
        >>> mod = SimplifyExpr()(mod)  # doctest: +SKIP
    """
    return FunctionPass(simplify_expr, opt_level=0, name="SimplifyExpr")

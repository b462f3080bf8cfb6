"""Converters of ATen elementwise math beyond the basics of ops_elemwise: trigonometry, exp and
log variants, sign and rounding, float classification, atan2, fmod, bitwise ops.

Functions without a catalog op are composed from ones that have it, in forms that keep
float32 accuracy (Kahan's expm1 and log1p rather than exp(x) - 1 and log(1 + x)).
"""
from __future__ import annotations

import math

from ...graph import Expr
from .ops_elemwise import result_dtype
from .registry import Unsupported, converter

# ATen unary op -> catalog op of the same name and meaning (float results: ints are promoted).
_TRIG = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")


def _float_input(n, i=0) -> Expr:
    """Input i in the node's (promoted, floating) output dtype."""
    return n.cast(n.input(i), n.dtype)


def _make_trig(op_name):
    def convert(n):
        return n.call(op_name, _float_input(n))
    return convert


for _name in _TRIG:
    converter(f"aten.{_name}.default")(_make_trig(_name))


@converter("aten.expm1.default")
def _expm1(n):
    # Kahan: (u - 1) * x / log(u) with u = exp(x) is accurate where exp(x) - 1 cancels.
    x = _float_input(n)
    dt = n.dtype
    u = n.call("exp", x)
    um1 = n.call("subtract", u, n.scalar(1, dt))
    y = n.call("divide", n.call("multiply", um1, x), n.call("log", u))
    y = n.call("where", n.call("equal", u, n.scalar(math.inf, dt)), u, y)
    y = n.call("where", n.call("equal", um1, n.scalar(-1, dt)), um1, y)
    return n.call("where", n.call("equal", u, n.scalar(1, dt)), x, y)


@converter("aten.log1p.default")
def _log1p(n):
    # Kahan: log(u) * x / (u - 1) with u = 1 + x corrects the rounding of 1 + x.
    x = _float_input(n)
    dt = n.dtype
    u = n.call("add", x, n.scalar(1, dt))
    y = n.call("divide", n.call("multiply", n.call("log", u), x),
               n.call("subtract", u, n.scalar(1, dt)))
    y = n.call("where", n.call("equal", u, n.scalar(math.inf, dt)), u, y)
    return n.call("where", n.call("equal", u, n.scalar(1, dt)), x, y)


def _make_log_base(base):
    def convert(n):
        x = _float_input(n)
        return n.call("divide", n.call("log", x), n.scalar(math.log(base), n.dtype))
    return convert


converter("aten.log2.default")(_make_log_base(2))
converter("aten.log10.default")(_make_log_base(10))


@converter("aten.exp2.default")
def _exp2(n):
    return n.call("power", n.scalar(2, n.dtype), _float_input(n))


@converter("aten.sign.default", "aten.sgn.default")
def _sign(n):
    x = n.input(0)
    if n.dtype == "bool":
        return x
    # (x > 0) - (x < 0), as torch computes it: 0 for zeros and for nan.
    zero = n.scalar(0, x.checked_type.dtype)
    return n.call("subtract", n.cast(n.call("greater", x, zero), n.dtype),
                  n.cast(n.call("less", x, zero), n.dtype))


def trunc(n, x: Expr) -> Expr:
    """x rounded toward zero (integers pass through).

    Example:
        >>> trunc(n, q)   # -2.5 -> -2.0, 2.5 -> 2.0   # doctest: +SKIP
    """
    if not x.checked_type.dtype.startswith("float"):
        return x
    zero = n.scalar(0, x.checked_type.dtype)
    return n.call("where", n.call("less", x, zero), n.call("ceil", x), n.call("floor", x))


@converter("aten.trunc.default", "aten.fix.default")
def _trunc(n):
    return trunc(n, n.input(0))


@converter("aten.frac.default")
def _frac(n):
    x = n.input(0)
    return n.call("subtract", x, trunc(n, x))


@converter("aten.isnan.default")
def _isnan(n):
    x = n.input(0)
    # false everywhere for integers, as it should be
    return n.call("not_equal", x, x)


@converter("aten.isinf.default")
def _isinf(n):
    x = n.input(0)
    if not x.checked_type.dtype.startswith("float"):
        return n.call("not_equal", x, x)
    return n.call("equal", n.call("abs", x), n.scalar(math.inf, x.checked_type.dtype))


def signbit(n, x: Expr) -> Expr:
    """Whether x's sign bit is set (true for -0.0, which compares equal to 0).

    Example:
        >>> signbit(n, x)   # [-0.0, 0.0, -1.0] -> [True, False, True]   # doctest: +SKIP
    """
    dt = x.checked_type.dtype
    zero = n.scalar(0, dt)
    # 1 / -0.0 is -inf: the one comparison that tells the zeros apart.
    neg_zero = n.call("logical_and", n.call("equal", x, zero),
                      n.call("less", n.call("divide", n.scalar(1, dt), x), zero))
    return n.call("logical_or", n.call("less", x, zero), neg_zero)


def _with_sign_of(n, value, negative):
    """value where not `negative`, else -value."""
    return n.call("where", negative, n.call("negative", value), value)


@converter("aten.atan2.default")
def _atan2(n):
    y, x = _float_input(n, 0), _float_input(n, 1)
    dt = n.dtype
    pi = n.scalar(math.pi, dt)
    y_neg, x_neg = signbit(n, y), signbit(n, x)
    # atan(y / x), moved to the left half-plane when x < 0 (or x is -0.0); y / x is ±inf
    # for x = 0 and gives ±pi/2, as it should.
    base = n.call("atan", n.call("divide", y, x))
    r = n.call("where", x_neg, n.call("add", base, _with_sign_of(n, pi, y_neg)), base)
    zero = n.scalar(0, dt)
    inf = n.scalar(math.inf, dt)
    # 0 / 0 and inf / inf are nan: the signed zeros and the infinite corners by hand.
    zeros = n.call("logical_and", n.call("equal", x, zero), n.call("equal", y, zero))
    # (±0, +0) is y itself, (±0, -0) is ±pi
    r = n.call("where", zeros, n.call("where", x_neg, _with_sign_of(n, pi, y_neg), y), r)
    infs = n.call("logical_and", n.call("equal", n.call("abs", x), inf),
                  n.call("equal", n.call("abs", y), inf))
    corner = n.call("where", x_neg, n.scalar(3 * math.pi / 4, dt), n.scalar(math.pi / 4, dt))
    return n.call("where", infs, _with_sign_of(n, corner, y_neg), r)


def _binary_promoted(n, op_name):
    a, b = n.arg(0), n.arg(1)
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        raise Unsupported("both operands are Python numbers")
    dt = n.dtype
    return n.call(op_name, n.operand(a, dt), n.operand(b, dt))


@converter("aten.fmod.Tensor", "aten.fmod.Scalar")
def _fmod(n):
    if not n.dtype.startswith("float") and not isinstance(n.arg(1), Expr) and n.arg(1) == 0:
        raise Unsupported("integer fmod by zero")
    return _binary_promoted(n, "fmod")


@converter("aten.logical_xor.default")
def _logical_xor(n):
    return n.call("not_equal", n.cast(n.input(0), "bool"), n.cast(n.input(1), "bool"))


_BITWISE = {"and": "logical_and", "or": "logical_or", "xor": "not_equal"}


def _make_bitwise(kind):
    def convert(n):
        a, b = n.arg(0), n.arg(1)
        dt = result_dtype(a, b) if isinstance(a, Expr) and isinstance(b, Expr) else n.dtype
        if dt == "bool":
            return n.call(_BITWISE[kind], n.operand(a, "bool"), n.operand(b, "bool"))
        if dt.startswith("float"):
            raise Unsupported(f"bitwise_{kind} of {dt}")
        return n.call(f"bitwise_{kind}", n.operand(a, dt), n.operand(b, dt))
    return convert


for _kind in _BITWISE:
    converter(f"aten.bitwise_{_kind}.Tensor", f"aten.bitwise_{_kind}.Scalar")(
        _make_bitwise(_kind))


@converter("aten.bitwise_not.default")
def _bitwise_not(n):
    x = n.input(0)
    if x.checked_type.dtype == "bool":
        return n.call("logical_not", x)
    return n.call("bitwise_not", x)


@converter("aten.signbit.default")
def _signbit(n):
    x = n.input(0)
    if x.checked_type.dtype.startswith("float"):
        return signbit(n, x)
    return n.call("less", x, n.scalar(0, x.checked_type.dtype))


@converter("aten.copysign.Tensor", "aten.copysign.Scalar")
def _copysign(n):
    a, b = n.arg(0), n.arg(1)
    dt = n.dtype
    magnitude = n.call("abs", n.operand(a, dt))
    return _with_sign_of(n, magnitude, signbit(n, n.operand(b, dt)))


def _make_nan_ignoring(op_name):
    # fmax / fmin: a nan operand gives the other operand (nan only if both are)
    def convert(n):
        dt = n.dtype
        a, b = n.operand(n.arg(0), dt), n.operand(n.arg(1), dt)
        y = n.call(op_name, a, b)
        if not dt.startswith("float"):
            return y
        return n.call("where", n.call("not_equal", a, a), b,
                      n.call("where", n.call("not_equal", b, b), a, y))
    return convert


converter("aten.fmax.default")(_make_nan_ignoring("maximum"))
converter("aten.fmin.default")(_make_nan_ignoring("minimum"))


@converter("aten.hypot.default")
def _hypot(n):
    dt = n.dtype
    a, b = n.call("abs", _float_input(n, 0)), n.call("abs", _float_input(n, 1))
    big, small = n.call("maximum", a, b), n.call("minimum", a, b)
    # big * sqrt(1 + (small / big)^2) does not overflow where a^2 + b^2 would
    ratio = n.call("divide", small, big)
    y = n.call("multiply", big, n.call("sqrt", n.call(
        "add", n.scalar(1, dt), n.call("multiply", ratio, ratio))))
    inf = n.scalar(math.inf, dt)
    y = n.call("where", n.call("equal", big, n.scalar(0, dt)), big, y)
    # an infinite operand gives inf, even when the other is nan
    either_inf = n.call("logical_or", n.call("equal", a, inf), n.call("equal", b, inf))
    return n.call("where", either_inf, inf, y)


@converter("aten.ldexp.Tensor")
def _ldexp(n):
    # torch computes x * 2 ** other
    dt = n.dtype
    return n.call("multiply", _float_input(n, 0),
                  n.call("power", n.scalar(2, dt), _float_input(n, 1)))


@converter("aten.angle.default")
def _angle(n):
    # of a real number: pi for negatives, 0 otherwise, nan for nan
    x = _float_input(n)
    dt = n.dtype
    zero = n.scalar(0, dt)
    y = n.call("where", n.call("less", x, zero), n.scalar(math.pi, dt), zero)
    return n.call("where", n.call("not_equal", x, x), x, y)


@converter("aten.round.decimals")
def _round_decimals(n):
    x = n.input(0)
    decimals = int(n.kwargs.get("decimals", n.arg(1, default=0)))
    if decimals == 0:
        return n.call("round", x)
    # as torch: round half to even of x * 10^d, divided back (for d < 0: x / 10^-d, multiplied)
    ten = n.scalar(10.0 ** abs(decimals), n.dtype)
    if decimals > 0:
        return n.call("divide", n.call("round", n.call("multiply", x, ten)), ten)
    return n.call("multiply", n.call("round", n.call("divide", x, ten)), ten)


# erfc(|x|) = t * exp(-x^2 + P(t)), t = 1 / (1 + |x| / 2): the Chebyshev fit of Press et al.,
# Numerical Recipes (erfcc), relative error below 1.2e-7 for every x; 1 - erf(x) would lose
# all digits in the tail (erfc(5) = 1.5e-12)
_ERFC_COEFFICIENTS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                      0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _erfc_fit(n, a):
    """(t, t * exp(P(t))) for a = |x| in float64: erfc(|x|) = exp(-x^2) * t * exp(P(t))."""
    f64 = "float64"
    t = n.call("divide", n.scalar(1, f64),
               n.call("add", n.scalar(1, f64), n.call("multiply", a, n.scalar(0.5, f64))))
    poly = n.scalar(_ERFC_COEFFICIENTS[-1], f64)
    for coefficient in reversed(_ERFC_COEFFICIENTS[:-1]):
        poly = n.call("add", n.scalar(coefficient, f64), n.call("multiply", t, poly))
    return n.call("multiply", t, n.call("exp", poly))


def _float32_input64(n, what):
    # the fit is accurate to float32: evaluated in float64 so that rounding adds nothing
    if n.dtype not in ("float32", "float16"):
        raise Unsupported(f"{what} in {n.dtype} (the composition is accurate to float32)")
    return n.cast(n.input(0), "float64")


@converter("aten.erfc.default")
def _erfc(n):
    x = _float32_input64(n, "erfc")
    a = n.call("abs", x)
    tail = n.call("multiply", _erfc_fit(n, a), n.call("exp", n.call("negative",
                                                                     n.call("multiply", a, a))))
    y = n.call("where", n.call("less", x, n.scalar(0, "float64")),
               n.call("subtract", n.scalar(2, "float64"), tail), tail)
    return n.cast(y, n.dtype)


@converter("aten.special_erfcx.default")
def _erfcx(n):
    # exp(x^2) * erfc(x): the fit's exp(-x^2) cancels for x >= 0, so large x do not underflow
    x = _float32_input64(n, "erfcx")
    a = n.call("abs", x)
    scaled = _erfc_fit(n, a)
    y = n.call("where", n.call("less", x, n.scalar(0, "float64")), n.call(
        "subtract", n.call("multiply", n.scalar(2, "float64"), n.call("exp", n.call(
            "multiply", x, x))), scaled), scaled)
    return n.cast(y, n.dtype)


def _make_shift(op_name):
    def convert(n):
        dt = n.dtype
        if dt.startswith("float") or dt == "bool":
            raise Unsupported(f"bit shift of {dt}")
        return n.call(op_name, n.operand(n.arg(0), dt), n.operand(n.arg(1), dt))
    return convert


converter("aten.bitwise_left_shift.Tensor", "aten.bitwise_left_shift.Tensor_Scalar",
          "aten.bitwise_left_shift.Scalar_Tensor", "aten.__lshift__.Tensor",
          "aten.__lshift__.Scalar")(_make_shift("left_shift"))
converter("aten.bitwise_right_shift.Tensor", "aten.bitwise_right_shift.Tensor_Scalar",
          "aten.bitwise_right_shift.Scalar_Tensor", "aten.__rshift__.Tensor",
          "aten.__rshift__.Scalar")(_make_shift("right_shift"))


# Lanczos' approximation, g = 7, nine terms (the published coefficient set): Gamma(x + 1) =
# sqrt(2 pi) * t^(x + 1/2) * exp(-t) * A(x), t = x + 7.5, to about 1e-15 relative in float64
_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7)


def _lgamma_positive(n, x):
    """log Gamma(x) for x >= 1/2 (float64), by Lanczos' approximation in log form."""
    f64 = "float64"
    z = n.call("subtract", x, n.scalar(1, f64))
    series = n.scalar(_LANCZOS[0], f64)
    for i, c in enumerate(_LANCZOS[1:], start=1):
        series = n.call("add", series, n.call("divide", n.scalar(c, f64),
                                              n.call("add", z, n.scalar(i, f64))))
    t = n.call("add", z, n.scalar(_LANCZOS_G + 0.5, f64))
    log_t = n.call("log", t)
    y = n.call("multiply", n.call("add", z, n.scalar(0.5, f64)), log_t)
    y = n.call("add", n.call("subtract", y, t), n.call("log", series))
    return n.call("add", y, n.scalar(0.5 * math.log(2 * math.pi), f64))


@converter("aten.lgamma.default")
def _lgamma(n):
    x = _float32_input64(n, "lgamma")
    f64 = "float64"
    half = n.scalar(0.5, f64)
    small = n.call("less", x, half)
    # x < 1/2 by reflection: log(pi / |sin(pi x)|) - lgamma(1 - x); inf at the poles 0, -1, ...
    mirrored = n.call("subtract", n.scalar(1, f64), x)
    direct = _lgamma_positive(n, n.call("where", small, mirrored, x))
    sine = n.call("abs", n.call("sin", n.call("multiply", x, n.scalar(math.pi, f64))))
    reflected = n.call("subtract", n.call("log", n.call("divide", n.scalar(math.pi, f64), sine)),
                       direct)
    y = n.call("where", small, reflected, direct)
    # Gamma is exact at the integers: sin(pi x) need not round to 0 there
    pole = n.call("logical_and", n.call("less_equal", x, n.scalar(0, f64)),
                  n.call("equal", n.call("floor", x), x))
    inf = n.scalar(math.inf, f64)
    y = n.call("where", pole, inf, y)
    y = n.call("where", n.call("equal", n.call("abs", x), inf), inf, y)
    # Gamma(1) = Gamma(2) = 1: exactly 0, not the approximation's 1e-16
    one_or_two = n.call("logical_or", n.call("equal", x, n.scalar(1, f64)),
                        n.call("equal", x, n.scalar(2, f64)))
    return n.cast(n.call("where", one_or_two, n.scalar(0, f64), y), n.dtype)


def _digamma64(n, x):
    """psi(x) in float64: reflection below 1/2, six steps of psi(x) = psi(x + 1) - 1 / x, then
    the asymptotic series (to x^-12) at x + 6 >= 6.5."""
    f64 = "float64"
    small = n.call("less", x, n.scalar(0.5, f64))
    z = n.call("where", small, n.call("subtract", n.scalar(1, f64), x), x)
    shift = n.scalar(0, f64)
    for k in range(6):
        shift = n.call("add", shift, n.call("divide", n.scalar(1, f64),
                                            n.call("add", z, n.scalar(k, f64))))
    w = n.call("add", z, n.scalar(6, f64))
    inv2 = n.call("divide", n.scalar(1, f64), n.call("multiply", w, w))
    # sum of B_2k / (2k w^2k), k = 1..6, in Horner form
    terms = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760)
    poly = n.scalar(terms[-1], f64)
    for c in reversed(terms[:-1]):
        poly = n.call("add", n.scalar(c, f64), n.call("multiply", inv2, poly))
    psi = n.call("subtract", n.call("log", w), n.call("divide", n.scalar(0.5, f64), w))
    psi = n.call("subtract", n.call("subtract", psi, n.call("multiply", inv2, poly)), shift)
    # psi(x) = psi(1 - x) - pi / tan(pi x)
    cotangent = n.call("divide", n.scalar(math.pi, f64),
                       n.call("tan", n.call("multiply", x, n.scalar(math.pi, f64))))
    return n.call("where", small, n.call("subtract", psi, cotangent), psi)


@converter("aten.digamma.default")
def _digamma(n):
    return n.cast(_digamma_torch(n, _float32_input64(n, "digamma")), n.dtype)


def _digamma_torch(n, x):
    """psi(x) with torch's values at the poles: -inf at +0, inf at -0, nan at the negative
    integers, and psi(inf) = inf."""
    f64 = "float64"
    y = _digamma64(n, x)
    integer = n.call("equal", n.call("floor", x), x)
    y = n.call("where", n.call("logical_and", integer, n.call("less", x, n.scalar(0, f64))),
               n.scalar(math.nan, f64), y)
    # psi(±0) = ∓inf
    zero_pole = n.call("where", signbit(n, x), n.scalar(math.inf, f64), n.scalar(-math.inf, f64))
    y = n.call("where", n.call("equal", x, n.scalar(0, f64)), zero_pole, y)
    return n.call("where", n.call("equal", x, n.scalar(math.inf, f64)), x, y)


@converter("aten.polygamma.default")
def _polygamma(n):
    if int(n.arg(0, "n")) != 0:
        raise Unsupported(f"polygamma of order {n.arg(0, 'n')} (only 0, digamma)")
    x = n.cast(n.input(1), "float64")
    if n.dtype not in ("float32", "float16"):
        raise Unsupported(f"polygamma in {n.dtype}")
    return n.cast(_digamma_torch(n, x), n.dtype)


# Modified Bessel functions I0, I1: Abramowitz & Stegun 9.8.1-9.8.4 (relative error below
# 2.2e-7, a few float32 ulps), t = x / 3.75: a polynomial in t^2 for |x| <= 3.75, and
# sqrt(|x|) e^-|x| I(x) as a polynomial in 1 / t beyond
_BESSEL = {
    0: ((1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.0360768, 0.0045813),
        (0.39894228, 0.01328592, 0.00225319, -0.00157565, 0.00916281, -0.02057706,
         0.02635537, -0.01647633, 0.00392377)),
    1: ((0.5, 0.87890594, 0.51498869, 0.15084934, 0.02658733, 0.00301532, 0.00032411),
        (0.39894228, -0.03988024, -0.00362018, 0.00163801, -0.01031555, 0.02282967,
         -0.02895312, 0.01787654, -0.00420059)),
}


def _horner(n, v, coefficients):
    y = n.scalar(coefficients[-1], "float64")
    for c in reversed(coefficients[:-1]):
        y = n.call("add", n.scalar(c, "float64"), n.call("multiply", v, y))
    return y


def _bessel_i(n, x, order, scaled):
    """I_order(x), or e^-|x| I_order(x) when scaled, of a float64 x; at ±inf torch's values
    (nan, or a zero of x's sign when scaled)."""
    f64 = "float64"
    near, far = _BESSEL[order]
    a = n.call("abs", x)
    t = n.call("divide", a, n.scalar(3.75, f64))
    inner = _horner(n, n.call("multiply", t, t), near)
    if order == 1:
        inner = n.call("multiply", inner, a)
    if scaled:
        inner = n.call("multiply", inner, n.call("exp", n.call("negative", a)))
    # 3.75 / |x| stays finite for the branch not taken (|x| = 0)
    inv = n.call("divide", n.scalar(3.75, f64), n.call("maximum", a, n.scalar(3.75, f64)))
    outer = n.call("divide", _horner(n, inv, far), n.call("sqrt", a))
    if not scaled:
        outer = n.call("multiply", outer, n.call("exp", a))
    y = n.call("where", n.call("less_equal", a, n.scalar(3.75, f64)), inner, outer)
    if order == 1:
        # odd; computed on |x|, so -0.0 gives +0.0 as in torch
        y = _with_sign_of(n, y, n.call("less", x, n.scalar(0, f64)))
    limit = n.call("divide", n.scalar(1, f64), x if order == 1 else a) if scaled else \
        n.scalar(math.nan, f64)
    return n.call("where", n.call("equal", a, n.scalar(math.inf, f64)), limit, y)


def _make_bessel(order, scaled):
    def convert(n):
        return n.cast(_bessel_i(n, _float32_input64(n, "a Bessel function"), order, scaled),
                      n.dtype)
    return convert


converter("aten.i0.default", "aten.special_modified_bessel_i0.default")(_make_bessel(0, False))
converter("aten.special_i0e.default")(_make_bessel(0, True))
converter("aten.special_i1.default", "aten.special_modified_bessel_i1.default")(
    _make_bessel(1, False))
converter("aten.special_i1e.default")(_make_bessel(1, True))


# K0, K1: Abramowitz & Stegun 9.8.5-9.8.8 (relative error below 2.2e-7): for x <= 2
# -log(x / 2) I0(x) + P((x / 2)^2) and (x log(x / 2) I1(x) + P((x / 2)^2)) / x, beyond
# e^-x / sqrt(x) * Q(2 / x)
_BESSEL_K = {
    0: ((-0.57721566, 0.42278420, 0.23069756, 0.03488590, 0.00262698, 0.00010750,
         0.00000740),
        (1.25331414, -0.07832358, 0.02189568, -0.01062446, 0.00587872, -0.00251540,
         0.00053208)),
    1: ((1.0, 0.15443144, -0.67278579, -0.18156897, -0.01919402, -0.00110404, -0.00004686),
        (1.25331414, 0.23498619, -0.03655620, 0.01504268, -0.00780353, 0.00325614,
         -0.00068245)),
}


def _bessel_k(n, x, order, scaled):
    """K_order(x), or e^x K_order(x) when scaled, of a float64 x: nan below 0, inf at 0."""
    f64 = "float64"
    near, far = _BESSEL_K[order]
    # each branch reads x clamped into its own range, so the other stays finite
    small = n.call("minimum", x, n.scalar(2, f64))
    half = n.call("multiply", small, n.scalar(0.5, f64))
    log_half = n.call("log", half)
    poly = _horner(n, n.call("multiply", half, half), near)
    if order == 0:
        inner = n.call("subtract", poly, n.call("multiply", log_half,
                                                _bessel_i(n, small, 0, False)))
    else:
        inner = n.call("divide", n.call("add", n.call("multiply", n.call(
            "multiply", small, log_half), _bessel_i(n, small, 1, False)), poly), small)
    if scaled:
        inner = n.call("multiply", inner, n.call("exp", small))
    large = n.call("maximum", x, n.scalar(2, f64))
    outer = n.call("divide", _horner(n, n.call("divide", n.scalar(2, f64), large), far),
                   n.call("sqrt", large))
    if not scaled:
        outer = n.call("multiply", outer, n.call("exp", n.call("negative", large)))
    y = n.call("where", n.call("less_equal", x, n.scalar(2, f64)), inner, outer)
    y = n.call("where", n.call("equal", x, n.scalar(0, f64)), n.scalar(math.inf, f64), y)
    y = n.call("where", n.call("equal", x, n.scalar(math.inf, f64)), n.scalar(0, f64), y)
    return n.call("where", n.call("less", x, n.scalar(0, f64)), n.scalar(math.nan, f64), y)


def _make_bessel_k(order, scaled):
    def convert(n):
        return n.cast(_bessel_k(n, _float32_input64(n, "a Bessel function"), order, scaled),
                      n.dtype)
    return convert


converter("aten.special_modified_bessel_k0.default")(_make_bessel_k(0, False))
converter("aten.special_modified_bessel_k1.default")(_make_bessel_k(1, False))
converter("aten.special_scaled_modified_bessel_k0.default")(_make_bessel_k(0, True))
converter("aten.special_scaled_modified_bessel_k1.default")(_make_bessel_k(1, True))


@converter("aten.special_spherical_bessel_j0.default")
def _spherical_bessel_j0(n):
    # sin(x) / x, 1 at 0 and 0 at ±inf
    x = _float32_input64(n, "spherical_bessel_j0")
    f64 = "float64"
    y = n.call("divide", n.call("sin", x), x)
    y = n.call("where", n.call("equal", x, n.scalar(0, f64)), n.scalar(1, f64), y)
    y = n.call("where", n.call("equal", n.call("abs", x), n.scalar(math.inf, f64)),
               n.scalar(0, f64), y)
    return n.cast(y, n.dtype)

"""Elementwise operators: activations, unary math, casts (PyTorch definitions).

Every compute keeps the input's shape and dtype (cast excepted) and is tagged "elemwise",
except prelu, whose slope is broadcast along one axis ("broadcast").

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((4, 8), name="x")
    >>> y = topi.elemwise.gelu(x, approximate="tanh")
"""
from __future__ import annotations

import math

from .. import te
from ..tir import dtype as dt
from ..tir import op as tir_op
from . import tags
from .utils import TopiError, get_const_tuple


def check_tensor(x, op_name: str, what: str = "input"):
    """Raise a TopiError naming `op_name` unless x is a te.Tensor.

    Example:
        >>> check_tensor(te.placeholder((2,)), "relu")  # doctest: +SKIP
    """
    if not isinstance(x, te.Tensor):
        raise TopiError(f"{op_name}: {what} must be a te.Tensor, got {type(x).__name__} {x!r}")


def _require_float(x, op_name: str):
    check_tensor(x, op_name)
    if not dt.is_float(x.dtype):
        raise TopiError(f"{op_name} needs a floating-point tensor, got {x.name} of dtype {x.dtype}")


def _unary(x, fn, name: str, float_only: bool = True):
    if float_only:
        _require_float(x, name)
    else:
        check_tensor(x, name)
    return te.compute(x.shape, lambda *i: fn(x(*i)), name=name, tag=tags.ELEMWISE)


def _zero(x):
    return te.const(0, x.dtype)


def relu(x):
    """max(x, 0).

    Example:
        >>> y = relu(te.placeholder((3,), name="x"))
    """
    return _unary(x, lambda v: te.max(v, _zero(v)), "relu", float_only=False)


def leaky_relu(x, alpha: float = 0.01):
    """x if x > 0 else alpha * x.

    Example:
        >>> y = leaky_relu(te.placeholder((3,), name="x"), alpha=0.2)
    """
    _require_float(x, "leaky_relu")
    return _unary(x, lambda v: te.select(v > _zero(v), v, v * float(alpha)), "leaky_relu")


def prelu(x, slope, axis: int = 1):
    """x if x > 0 else slope[c] * x, c the index along `axis` (a 1-element slope is shared).

    Example:
        >>> x = te.placeholder((1, 3, 4, 4), name="x"); w = te.placeholder((3,), name="w")
        >>> y = prelu(x, w, axis=1)
    """
    _require_float(x, "prelu")
    check_tensor(slope, "prelu", "slope")
    if slope.ndim != 1:
        raise TopiError(f"prelu: slope must be 1-D, got shape {get_const_tuple(slope.shape)}")
    if slope.dtype != x.dtype:
        raise TopiError(f"prelu: slope dtype {slope.dtype} differs from input dtype {x.dtype}")
    ndim = x.ndim
    if not -ndim <= axis < ndim:
        raise TopiError(f"prelu: axis {axis} is out of range for a {ndim}-D input")
    axis %= ndim
    (n_slope,) = get_const_tuple(slope.shape)
    channels = get_const_tuple(x.shape)[axis]
    if n_slope != 1 and n_slope != channels:
        raise TopiError(f"prelu: slope has {n_slope} elements but axis {axis} of the input has "
                        f"{channels}")

    def fcompute(*i):
        v = x(*i)
        w = slope[0] if n_slope == 1 else slope[i[axis]]
        return te.select(v > _zero(v), v, w * v)

    return te.compute(x.shape, fcompute, name="prelu", tag=tags.BROADCAST)


def clip(x, a_min, a_max):
    """min(max(x, a_min), a_max); a bound of None leaves that side open.

    Example:
        >>> y = clip(te.placeholder((3,), name="x"), 0.0, 6.0)
    """
    check_tensor(x, "clip")
    if a_min is not None and a_max is not None and a_min > a_max:
        raise TopiError(f"clip: a_min ({a_min}) is greater than a_max ({a_max})")
    for bound in (a_min, a_max):
        if isinstance(bound, float) and not dt.is_float(x.dtype) and not bound.is_integer():
            raise TopiError(f"clip: bound {bound} is not an integer but {x.name} is {x.dtype}")

    def fn(v):
        if a_min is not None:
            v = te.max(v, te.const(a_min, x.dtype))
        if a_max is not None:
            v = te.min(v, te.const(a_max, x.dtype))
        return v

    return _unary(x, fn, "clip", float_only=False)


def relu6(x):
    """min(max(x, 0), 6).

    Example:
        >>> y = relu6(te.placeholder((3,), name="x"))
    """
    return clip(x, 0, 6)


_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x, approximate: str = "none"):
    """GELU as torch.nn.functional.gelu: "none" is 0.5*x*(1 + erf(x/sqrt(2))), "tanh" is
    0.5*x*(1 + tanh(sqrt(2/pi) * (x + 0.044715*x^3))).

    Example:
        >>> y = gelu(te.placeholder((3,), name="x"), approximate="tanh")
    """
    if approximate == "none":
        def fn(v):
            return v * 0.5 * (te.erf(v * _SQRT_HALF) + 1.0)
        return _unary(x, fn, "gelu")
    if approximate == "tanh":
        def fn(v):
            inner = (v + v * v * v * 0.044715) * _SQRT_2_OVER_PI
            return v * 0.5 * (te.tanh(inner) + 1.0)
        return _unary(x, fn, "gelu_tanh")
    raise TopiError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def sigmoid(x):
    """1 / (1 + exp(-x)).

    Example:
        >>> y = sigmoid(te.placeholder((3,), name="x"))
    """
    return _unary(x, te.sigmoid, "sigmoid")


def silu(x):
    """x * sigmoid(x) (also called swish).

    Example:
        >>> y = silu(te.placeholder((3,), name="x"))
    """
    return _unary(x, lambda v: v * te.sigmoid(v), "silu")


def hardsigmoid(x):
    """min(max(x + 3, 0), 6) / 6, as PyTorch computes it.

    Example:
        >>> y = hardsigmoid(te.placeholder((3,), name="x"))
    """
    return _unary(x, lambda v: te.min(te.max(v + 3.0, _zero(v)), 6.0) / 6.0, "hardsigmoid")


def hardswish(x):
    """x * min(max(x + 3, 0), 6) / 6, as PyTorch computes it.

    Example:
        >>> y = hardswish(te.placeholder((3,), name="x"))
    """
    return _unary(x, lambda v: v * te.min(te.max(v + 3.0, _zero(v)), 6.0) / 6.0, "hardswish")


def _math(name, fn, doc, float_only=True):
    def op(x):
        return _unary(x, fn, name, float_only)
    op.__name__ = name
    op.__doc__ = f"{doc}\n\n    Example:\n        >>> y = {name}(te.placeholder((3,), name=\"x\"))\n"
    return op


tanh = _math("tanh", te.tanh, "Hyperbolic tangent.")
exp = _math("exp", te.exp, "e to the x.")
log = _math("log", te.log, "Natural logarithm.")
sqrt = _math("sqrt", te.sqrt, "Square root.")
rsqrt = _math("rsqrt", te.rsqrt, "1 / sqrt(x).")
erf = _math("erf", te.erf, "The error function.")
floor = _math("floor", te.floor, "Round down (integers pass through).", float_only=False)
ceil = _math("ceil", te.ceil, "Round up (integers pass through).", float_only=False)
round = _math("round", te.round, "Round half to even, as numpy and PyTorch (integers pass "
              "through).", float_only=False)
abs = _math("abs", te.abs, "Absolute value.", float_only=False)
negative = _math("negative", lambda v: -v, "-x.", float_only=False)
sin = _math("sin", te.sin, "Sine.")
cos = _math("cos", te.cos, "Cosine.")
tan = _math("tan", tir_op.tan, "Tangent.")
asin = _math("asin", tir_op.asin, "Arcsine (NaN outside [-1, 1]).")
acos = _math("acos", tir_op.acos, "Arccosine (NaN outside [-1, 1]).")
atan = _math("atan", tir_op.atan, "Arctangent.")
sinh = _math("sinh", tir_op.sinh, "Hyperbolic sine.")
cosh = _math("cosh", tir_op.cosh, "Hyperbolic cosine.")
asinh = _math("asinh", tir_op.asinh, "Inverse hyperbolic sine.")
acosh = _math("acosh", tir_op.acosh, "Inverse hyperbolic cosine (NaN below 1).")
atanh = _math("atanh", tir_op.atanh, "Inverse hyperbolic tangent (NaN outside [-1, 1]).")


def bitwise_not(x):
    """~x: every bit of an integer tensor flipped.

    Example:
        >>> y = bitwise_not(te.placeholder((3,), "int32", name="x"))
    """
    check_tensor(x, "bitwise_not")
    if not dt.is_integral(x.dtype):
        raise TopiError(f"bitwise_not needs an integer tensor, got {x.name} of dtype {x.dtype}")
    return _unary(x, lambda v: tir_op.call_intrin(v.dtype, "bitwise_not", v), "bitwise_not",
                  float_only=False)


def trilu(x, k: int = 0, upper: bool = True):
    """The upper (column - row >= k) or lower (column - row <= k) triangle of the matrices in
    the last two axes of x; the other elements are zero.

    Example:
        >>> y = trilu(te.placeholder((2, 4, 5), name="x"), k=1, upper=False)
    """
    check_tensor(x, "trilu")
    if x.ndim < 2:
        raise TopiError(f"trilu needs a tensor of rank 2 or more, got {x.name} of rank {x.ndim}")
    rows, cols = get_const_tuple(x.shape)[-2:]
    # Beyond these bounds every element (or none) is kept; clamping keeps k an int32 literal.
    k = max(-rows, min(int(k), cols))

    def fcompute(*i):
        diagonal = i[-1] - i[-2]
        keep = diagonal >= k if upper else diagonal <= k
        return te.select(keep, x(*i), te.const(0, x.dtype))

    return te.compute(x.shape, fcompute, name="trilu", tag=tags.ELEMWISE)


def cast(x, dtype: str):
    """x converted to `dtype` (float to int truncates toward zero, as C and numpy's astype).

    Example:
        >>> y = cast(te.placeholder((3,), name="x"), "int32")
    """
    check_tensor(x, "cast")
    try:
        dtype = dt.normalize(dtype)
    except dt.DTypeError as err:
        raise TopiError(f"cast: {err}") from None
    if dt.is_bool(dtype):
        # nonzero is True, as numpy's astype(bool); a plain truncating cast would lose 0.5.
        return te.compute(x.shape, lambda *i: x(*i) != te.const(0, x.dtype),
                          name="cast", tag=tags.ELEMWISE)
    return te.compute(x.shape, lambda *i: te.cast(x(*i), dtype), name="cast", tag=tags.ELEMWISE)


def identity(x):
    """A copy of x (a stage of its own, e.g. to materialize a view).

    Example:
        >>> y = identity(te.placeholder((3,), name="x"))
    """
    return _unary(x, lambda v: v, "identity", float_only=False)


copy = identity

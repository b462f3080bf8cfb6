"""Elementwise ONNX ops: math, activations, comparisons, logic, Cast, Clip, Where."""
from __future__ import annotations

import numpy as np

from ..context import dtype_of, is_static
from ..dtypes import kiln_dtype
from ..registry import converter

_UNARY = {
    "Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
    "Sqrt": "sqrt", "Abs": "abs", "Neg": "negative", "Floor": "floor", "Ceil": "ceil",
    "Round": "round", "Erf": "erf", "Not": "logical_not", "HardSwish": "nn.hardswish",
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan",
    "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
}


def _unary(ctx):
    return ctx.op(_UNARY[ctx.op_type], ctx.input(0))


converter(*_UNARY)(_unary)


def _matched(ctx, a, b):
    """a and b with one dtype: a known operand takes the other's dtype (ONNX requires equal
    types; exporters sometimes leave literals as float64 or int64)."""
    da, db = dtype_of(a), dtype_of(b)
    if da == db:
        return a, b
    if is_static(b):
        return a, b.astype(da)
    if is_static(a):
        return a.astype(db), b
    ctx.error(f"inputs have different element types {da} and {db}")


def binary(ctx, name, a, b):
    """A broadcasting catalog op on two values of one dtype (a known operand is cast).

    Example:
        >>> binary(ctx, "add", x, np.array(1.0))                # doctest: +SKIP
    """
    a, b = _matched(ctx, a, b)
    return ctx.op(name, a, b)


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide",
           "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
           "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or",
           "Xor": "not_equal"}


@converter(*_BINARY)
def _binary(ctx):
    return binary(ctx, _BINARY[ctx.op_type], ctx.input(0), ctx.input(1))


@converter("Max", "Min", "Sum", "Mean")
def _variadic(ctx):
    name = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[ctx.op_type]
    out = ctx.input(0)
    for i in range(1, ctx.num_inputs):
        out = binary(ctx, name, out, ctx.input(i))
    if ctx.op_type == "Mean" and ctx.num_inputs > 1:
        out = ctx.op("divide", out, ctx.scalar(ctx.num_inputs, out))
    return out


@converter("Pow")
def _pow(ctx):
    x, y = ctx.input(0), ctx.input(1)
    if ctx.is_known(1) and not is_static(x):
        e = np.asarray(ctx.static(1, "exponent"))
        if e.size == 1 and e.ndim <= len(ctx.shape(0)):
            e = float(e.reshape(()))
            # Common exponents of decomposed norms/GELUs as cheaper, exact ops.
            if e == 1.0:
                return x
            if e == 2.0:
                return ctx.op("multiply", x, x)
            if e == 0.5 and not dtype_of(x).startswith("int"):
                return ctx.op("sqrt", x)
    dx = dtype_of(x)
    if dx.startswith("float"):
        return ctx.op("power", x, _cast_to(ctx, y, dx))
    # Integer powers: compute in float64 (exact for the magnitudes shapes use).
    out = ctx.op("power", _cast_to(ctx, x, "float64"), _cast_to(ctx, y, "float64"))
    return _cast_to(ctx, ctx.op("round", out), dx)


def _cast_to(ctx, value, dtype):
    return value if dtype_of(value) == dtype else ctx.op("cast", value, dtype=dtype)


@converter("Mod")
def _mod(ctx):
    # fmod=1: the remainder has the dividend's sign (C fmod); fmod=0: the divisor's (numpy).
    return binary(ctx, "fmod" if ctx.attr("fmod", 0) else "floor_mod", ctx.input(0),
                  ctx.input(1))


@converter("Reciprocal")
def _reciprocal(ctx):
    x = ctx.input(0)
    return ctx.op("divide", ctx.scalar(1, x), x)


@converter("Sign")
def _sign(ctx):
    x = ctx.input(0)
    zero, one = ctx.scalar(0, x), ctx.scalar(1, x)
    neg = ctx.op("where", ctx.op("less", x, zero), ctx.scalar(-1, x), zero)
    return ctx.op("where", ctx.op("greater", x, zero), one, neg)


@converter("IsNaN")
def _isnan(ctx):
    x = ctx.input(0)
    return ctx.op("not_equal", x, x)


@converter("IsInf")
def _isinf(ctx):
    x = ctx.input(0)
    if not ctx.dtype(0).startswith("float"):
        ctx.error(f"input 0 has element type {ctx.dtype(0)}; IsInf takes floating point")
    negative, positive = ctx.attr("detect_negative", 1), ctx.attr("detect_positive", 1)
    if negative and positive:
        return ctx.op("equal", ctx.op("abs", x), ctx.scalar(np.inf, x))
    if negative or positive:
        return ctx.op("equal", x, ctx.scalar(-np.inf if negative else np.inf, x))
    return np.zeros(ctx.shape(0), dtype=bool)


@converter("LeakyRelu")
def _leaky_relu(ctx):
    return ctx.op("nn.leaky_relu", ctx.input(0), alpha=float(ctx.attr("alpha", 0.01)))


@converter("PRelu")
def _prelu(ctx):
    x, slope = ctx.input(0), ctx.input(1)
    xs, ss = ctx.shape(0), ctx.shape(1)
    full = (1,) * (len(xs) - len(ss)) + tuple(ss)
    if len(xs) >= 2 and len(ss) <= len(xs) and full[1] == xs[1] and xs[1] > 1 and \
            all(d == 1 for k, d in enumerate(full) if k != 1):
        if len(ss) != 1:
            slope = ctx.op("reshape", slope, newshape=(xs[1],))
        return ctx.op("nn.prelu", x, slope, axis=1)
    slope = _matched(ctx, x, slope)[1]
    return ctx.op("where", ctx.op("less", x, ctx.scalar(0, x)), ctx.op("multiply", x, slope), x)


@converter("Gelu")
def _gelu(ctx):
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        ctx.error(f"unknown approximate={approximate!r}")
    return ctx.op("nn.gelu", ctx.input(0), approximate=approximate)


@converter("HardSigmoid")
def _hard_sigmoid(ctx):
    x = ctx.input(0)
    alpha, beta = float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5))
    if abs(alpha - 1 / 6) < 1e-7 and beta == 0.5:
        return ctx.op("nn.hardsigmoid", x)
    y = ctx.op("add", ctx.op("multiply", x, ctx.scalar(alpha, x)), ctx.scalar(beta, x))
    return ctx.op("clip", y, a_min=0.0, a_max=1.0)


def _softplus(ctx, x):
    # max(x, 0) + log(1 + exp(-|x|)) does not overflow for large |x|.
    tail = ctx.op("log", ctx.op("add", ctx.scalar(1, x),
                                ctx.op("exp", ctx.op("negative", ctx.op("abs", x)))))
    return ctx.op("add", ctx.op("nn.relu", x), tail)


@converter("Softplus")
def _softplus_op(ctx):
    return _softplus(ctx, ctx.input(0))


@converter("Softsign")
def _softsign(ctx):
    x = ctx.input(0)
    return ctx.op("divide", x, ctx.op("add", ctx.scalar(1, x), ctx.op("abs", x)))


@converter("Mish")
def _mish(ctx):
    x = ctx.input(0)
    return ctx.op("multiply", x, ctx.op("tanh", _softplus(ctx, x)))


def _elu_core(ctx, x, alpha):
    expm1 = ctx.op("subtract", ctx.op("exp", x), ctx.scalar(1, x))
    neg = ctx.op("multiply", ctx.scalar(alpha, x), expm1)
    return ctx.op("where", ctx.op("greater", x, ctx.scalar(0, x)), x, neg)


@converter("Elu")
def _elu(ctx):
    return _elu_core(ctx, ctx.input(0), float(ctx.attr("alpha", 1.0)))


@converter("Selu")
def _selu(ctx):
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875))
    return ctx.op("multiply", ctx.scalar(gamma, x), _elu_core(ctx, x, alpha))


@converter("Celu")
def _celu(ctx):
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    scaled = ctx.op("divide", x, ctx.scalar(alpha, x))
    neg = ctx.op("multiply", ctx.scalar(alpha, x),
                 ctx.op("subtract", ctx.op("exp", scaled), ctx.scalar(1, x)))
    return ctx.op("add", ctx.op("nn.relu", x), ctx.op("minimum", ctx.scalar(0, x), neg))


@converter("ThresholdedRelu")
def _thresholded_relu(ctx):
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    return ctx.op("where", ctx.op("greater", x, ctx.scalar(alpha, x)), x, ctx.scalar(0, x))


@converter("Clip")
def _clip(ctx):
    x = ctx.input(0)
    if ctx.opset < 11:
        lo, hi = ctx.attr("min", float("-inf")), ctx.attr("max", float("inf"))
        return ctx.op("clip", x, a_min=float(lo), a_max=float(hi))
    bounds = []
    for i, default in ((1, float("-inf")), (2, float("inf"))):
        if not ctx.has_input(i):
            bounds.append(default)
        elif ctx.is_known(i):
            bounds.append(float(np.asarray(ctx.static(i, "bound")).reshape(())))
        else:
            bounds.append(None)
    if None not in bounds:
        return ctx.op("clip", x, a_min=bounds[0], a_max=bounds[1])
    # Bounds computed at run time: max then min, as the ONNX definition.
    if ctx.has_input(1):
        x = binary(ctx, "maximum", x, ctx.input(1))
    if ctx.has_input(2):
        x = binary(ctx, "minimum", x, ctx.input(2))
    return x


@converter("Cast")
def _cast(ctx):
    to = kiln_dtype(int(ctx.attr("to")), f"ONNX node {ctx.name!r} (Cast) target")
    return _cast_to(ctx, ctx.input(0), to)


@converter("CastLike")
def _cast_like(ctx):
    return _cast_to(ctx, ctx.input(0), ctx.dtype(1))


@converter("Where")
def _where(ctx):
    cond, x, y = ctx.input(0), ctx.input(1), ctx.input(2)
    if dtype_of(cond) != "bool":
        cond = ctx.op("cast", cond, dtype="bool")
    x, y = _matched(ctx, x, y)
    return ctx.op("where", cond, x, y)


@converter("Identity")
def _identity(ctx):
    return ctx.input(0)


@converter("Dropout")
def _dropout(ctx):
    # Inference: the identity, and a mask of all True when someone reads it.
    if ctx.opset >= 12 and ctx.has_input(2) and \
            bool(np.asarray(ctx.static(2, "training_mode")).reshape(())):
        ctx.unsupported("training_mode=1")
    x = ctx.input(0)
    if ctx.num_outputs > 1 and ctx.output_used(1):
        return [x, np.ones(ctx.shape(0), dtype=bool)]
    return x



# -- index masks and running reductions ---------------------------------------------------

@converter("Trilu")
def _trilu(ctx):
    if ctx.ndim(0) < 2:
        ctx.error(f"input 0 of shape {ctx.shape(0)} is not a (batch of) matrices")
    k = _one_int(ctx, 1, "k") if ctx.has_input(1) else 0
    return ctx.op("trilu", ctx.input(0), k=k, upper=bool(ctx.attr("upper", 1)))


@converter("EyeLike")
def _eye_like(ctx):
    # Known from the input's static shape alone, like ConstantOfShape.
    shape = ctx.shape(0)
    if len(shape) != 2:
        ctx.error(f"input 0 has shape {shape}; EyeLike takes a matrix")
    dtype = ctx.dtype(0)
    if "dtype" in ctx.attrs:
        dtype = kiln_dtype(int(ctx.attr("dtype")), f"ONNX node {ctx.name!r} (EyeLike) dtype")
    return np.eye(*shape, k=int(ctx.attr("k", 0)), dtype=dtype)


@converter("CumSum", "CumProd")
def _cumulative(ctx):
    axis = _one_int(ctx, 1, "axis")
    ndim = ctx.ndim(0)
    if not -ndim <= axis < ndim:
        ctx.error(f"axis {axis} is out of range for input 0 of rank {ndim}")
    name = {"CumSum": "cumsum", "CumProd": "cumprod"}[ctx.op_type]
    return ctx.op(name, ctx.input(0), axis=axis, exclusive=bool(ctx.attr("exclusive", 0)),
                  reverse=bool(ctx.attr("reverse", 0)))


def _one_int(ctx, i: int, what: str) -> int:
    values = ctx.static_ints(i, what)
    if len(values) != 1:
        ctx.error(f"input {i} ({what}) must hold one integer, got {len(values)}")
    return values[0]

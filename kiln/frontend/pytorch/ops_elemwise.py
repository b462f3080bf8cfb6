"""Converters of ATen elementwise ops: unary math, activations, arithmetic, comparisons, casts."""
from __future__ import annotations

import numpy as np
import torch

from ...graph import Expr, const
from .registry import Unsupported, converter, kiln_dtype

_TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
                 "int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
                 "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}

# ATen unary op -> catalog op with the same meaning.
_UNARY = {
    "relu": "nn.relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "log": "log",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "abs": "abs", "neg": "negative", "floor": "floor",
    "ceil": "ceil", "round": "round", "erf": "erf", "silu": "nn.silu",
    "hardswish": "nn.hardswish", "hardsigmoid": "nn.hardsigmoid", "logical_not": "logical_not",
}


def _make_unary(op_name):
    def convert(n):
        # torch promotes integer inputs of float functions (exp, sigmoid ...) to float
        return n.call(op_name, n.cast(n.input(0), n.dtype))
    return convert


for _aten, _op in _UNARY.items():
    converter(f"aten.{_aten}.default")(_make_unary(_op))


@converter("aten.clone.default", "aten.contiguous.default", "aten.alias.default",
           "aten.alias_copy.default", "aten.positive.default", "aten.lift_fresh_copy.default")
def _identity(n):
    # Values are immutable in the graph IR, so copies and memory-format changes are no-ops.
    return n.input(0)


@converter("aten.detach.default")
def _detach(n):
    # the identity, except in a training import: no gradient flows through it there
    return n.input(0) if n.random is None else n.call("stop_gradient", n.input(0))


def _dropout_factor(n, x):
    """What a dropout multiplies x by: None at inference (or with p = 0), where it is the
    identity; in a training-mode import (kiln.frontend.pytorch.training) a mask parameter,
    which eager CPU dropout's bernoulli(1 - p) / (1 - p) fills."""
    p = float(n.arg(1, "p"))
    if n.arg(2, "train") is False or p == 0.0:
        return None
    if n.random is None:
        raise Unsupported(f"dropout in training mode with p = {p} (random; kiln.torch.optimize"
                          f"(..., training=True) compiles it)")
    if p == 1.0:                    # eager multiplies by zero, drawing nothing
        return n.scalar(0.0, x.checked_type.dtype)
    dropped = n.fx.args[0].meta.get("val") if isinstance(n.fx.args[0], torch.fx.Node) else None
    strides = dropped.stride() if isinstance(dropped, torch.Tensor) else None
    return n.random.dropout_mask(x, p, strides)


@converter("aten.dropout.default")
def _dropout(n):
    x, factor = n.input(0), _dropout_factor(n, n.input(0))
    return x if factor is None else n.call("multiply", x, factor)


@converter("aten.feature_dropout.default", "aten.alpha_dropout.default",
           "aten.feature_alpha_dropout.default")
def _other_dropout(n):
    # the identity at inference; their training forms draw other noise than dropout's
    if n.arg(2, "train") is not False and float(n.arg(1, "p")) != 0.0:
        raise Unsupported(f"{n.fx.target} in training mode with p = {n.arg(1, 'p')}")
    return n.input(0)


@converter("aten.resolve_conj.default", "aten.resolve_neg.default", "aten.conj.default",
           "aten._conj.default", "aten.conj_physical.default", "aten._conj_physical.default",
           "aten.real.default")
def _real_identity(n):
    # the identity on real tensors; n.dtype reports complex ones as unsupported
    if n.dtype != n.input(0).checked_type.dtype:
        raise Unsupported(f"{n.fx.target} changing the dtype")
    return n.input(0)


@converter("aten.native_dropout.default")
def _native_dropout(n):
    # (output, mask): what torch.export decomposes nn.Dropout's dropout to; the mask says
    # which elements are kept
    x = n.input(0)
    factor = _dropout_factor(n, x)
    if factor is None:
        return (x, const(np.ones(n.shape, dtype=bool)))
    kept = n.call("not_equal", factor, n.scalar(0.0, x.checked_type.dtype))
    return (n.call("multiply", x, factor), n.call("broadcast_to", kept, shape=n.shape))


@converter("aten.gelu.default")
def _gelu(n):
    approximate = n.arg(1, "approximate", "none")
    return n.call("nn.gelu", n.input(0), approximate=approximate)


@converter("aten.leaky_relu.default")
def _leaky_relu(n):
    return n.call("nn.leaky_relu", n.input(0), alpha=float(n.arg(1, "negative_slope", 0.01)))


@converter("aten.hardtanh.default")
def _hardtanh(n):
    return n.call("clip", n.input(0), a_min=float(n.arg(1, "min_val", -1.0)),
                  a_max=float(n.arg(2, "max_val", 1.0)))


@converter("aten.relu6.default")
def _relu6(n):
    return n.call("clip", n.input(0), a_min=0.0, a_max=6.0)


def clamp(n, x, lo, hi):
    """torch.clamp(x, lo, hi): bounds are None, numbers or tensors; max(x, lo) first, so
    where lo > hi the result is hi, as in torch.

    Example:
        >>> clamp(n, x, -1.0, t)   # doctest: +SKIP
    """
    dtype = n.dtype
    x = n.cast(x, dtype)
    if not isinstance(lo, Expr) and not isinstance(hi, Expr):
        return n.call("clip", x, a_min=float("-inf") if lo is None else float(lo),
                      a_max=float("inf") if hi is None else float(hi))
    if lo is not None:
        x = n.call("maximum", x, n.operand(lo, dtype))
    if hi is not None:
        x = n.call("minimum", x, n.operand(hi, dtype))
    return x


@converter("aten.clamp.default", "aten.clamp.Tensor")
def _clamp(n):
    return clamp(n, n.input(0), n.arg(1, "min"), n.arg(2, "max"))


@converter("aten.clamp_min.default", "aten.clamp_min.Tensor")
def _clamp_min(n):
    return clamp(n, n.input(0), n.arg(1, "min"), None)


@converter("aten.clamp_max.default", "aten.clamp_max.Tensor")
def _clamp_max(n):
    return clamp(n, n.input(0), None, n.arg(1, "max"))


@converter("aten.rrelu_with_noise_functional.default")
def _rrelu_eval(n):
    # out of training the slope is the middle of [lower, upper]; the noise stays as it is
    if n.arg(4, "training", False):
        raise Unsupported("rrelu in training mode (random slopes)")
    lower, upper = float(n.arg(2, "lower", 1 / 8)), float(n.arg(3, "upper", 1 / 3))
    return (n.call("nn.leaky_relu", n.input(0), alpha=(lower + upper) / 2), n.input(1))


@converter("aten.elu.default")
def _elu(n):
    alpha, scale, input_scale = (float(n.arg(i, k, 1.0)) for i, k in
                                 ((1, "alpha"), (2, "scale"), (3, "input_scale")))
    x = n.input(0)
    dt = x.checked_type.dtype
    neg = n.call("multiply", n.scalar(alpha, dt), n.call("subtract", n.call(
        "exp", n.call("multiply", n.call("minimum", x, n.scalar(0, dt)),
                      n.scalar(input_scale, dt))), n.scalar(1, dt)))
    y = n.call("add", n.call("maximum", x, n.scalar(0, dt)), neg)
    return y if scale == 1.0 else n.call("multiply", y, n.scalar(scale, dt))


@converter("aten.softplus.default")
def _softplus(n):
    x = n.input(0)
    beta, threshold = float(n.arg(1, "beta", 1.0)), float(n.arg(2, "threshold", 20.0))
    dt = x.checked_type.dtype
    bx = n.call("multiply", x, n.scalar(beta, dt))
    # log1p(exp(bx)) written stably as max(bx, 0) + log(1 + exp(-|bx|)).
    soft = n.call("add", n.call("maximum", bx, n.scalar(0, dt)), n.call("log", n.call(
        "add", n.scalar(1, dt), n.call("exp", n.call("negative", n.call("abs", bx))))))
    soft = n.call("divide", soft, n.scalar(beta, dt))
    return n.call("where", n.call("greater", bx, n.scalar(threshold, dt)), x, soft)


@converter("aten.reciprocal.default")
def _reciprocal(n):
    x = n.cast(n.input(0), n.dtype)
    return n.call("divide", n.scalar(1, n.dtype), x)


@converter("aten._prelu_kernel.default", "aten.prelu.default")
def _prelu(n):
    x, slope = n.input(0), n.input(1)
    if x.checked_type.ndim == 0:
        x = n.call("reshape", x, newshape=(1,))
        return n.call("reshape", n.call("nn.prelu", x, n.call("reshape", slope, newshape=(1,)),
                                        axis=0), newshape=())
    if slope.checked_type.ndim == 0:
        slope = n.call("reshape", slope, newshape=(1,))
    if slope.checked_type.ndim != 1:
        raise Unsupported("prelu weight that is not 1-d")
    shape = x.checked_type.shape
    if slope.checked_type.shape[0] == 1 and len(shape) >= 2 and shape[1] != 1:
        # one slope shared by all channels
        slope = n.call("broadcast_to", slope, shape=(shape[1],))
    return n.call("nn.prelu", x, slope, axis=1 if x.checked_type.ndim > 1 else 0)


# --- binary arithmetic -----------------------------------------------------------------------

def result_dtype(a, b) -> str:
    """torch's type promotion of two operands (graph expressions or Python scalars).

    Example:
        >>> result_dtype(var("x", (2,), "int64"), 0.5)   # doctest: +SKIP
        'float32'
    """
    def probe(v):
        if isinstance(v, Expr):
            t = v.checked_type
            # Only "is it 0-d" matters to torch's promotion, not the shape.
            return torch.empty(() if t.ndim == 0 else (1,), dtype=_TORCH_DTYPES[t.dtype])
        return v
    return kiln_dtype(torch.result_type(probe(a), probe(b)))


def _binary(n, op_name, a, b, dtype=None):
    dtype = dtype or n.dtype
    return n.call(op_name, n.operand(a, dtype), n.operand(b, dtype))


def _scaled(n, y, alpha, dtype):
    if alpha is None or alpha == 1:
        return y
    return n.call("multiply", n.operand(y, dtype), n.scalar(alpha, dtype))


@converter("aten.add.Tensor", "aten.add.Scalar")
def _add(n):
    a, b = n.arg(0), n.arg(1)
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return a + b
    return _binary(n, "add", a, _scaled(n, b, n.kwargs.get("alpha", n.arg(2)), n.dtype))


@converter("aten.sub.Tensor", "aten.sub.Scalar")
def _sub(n):
    a, b = n.arg(0), n.arg(1)
    return _binary(n, "subtract", a, _scaled(n, b, n.kwargs.get("alpha", n.arg(2)), n.dtype))


@converter("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(n):
    a, b = n.arg(0), n.arg(1)
    return _binary(n, "subtract", b, _scaled(n, a, n.kwargs.get("alpha", n.arg(2)), n.dtype))


@converter("aten.mul.Tensor", "aten.mul.Scalar")
def _mul(n):
    return _binary(n, "multiply", n.arg(0), n.arg(1))


@converter("aten.div.Tensor", "aten.div.Scalar")
def _div(n):
    return _binary(n, "divide", n.arg(0), n.arg(1))


@converter("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div_mode(n):
    mode = n.kwargs.get("rounding_mode", n.arg(2))
    if mode is None:
        return _binary(n, "divide", n.arg(0), n.arg(1))
    if mode == "floor":
        return _binary(n, "floor_divide", n.arg(0), n.arg(1))
    if n.dtype.startswith("float"):
        q = _binary(n, "divide", n.arg(0), n.arg(1))
        # trunc(q) = sign-preserving floor of |q|
        return n.call("where", n.call("less", q, n.scalar(0, n.dtype)), n.call("ceil", q),
                      n.call("floor", q))
    raise Unsupported("integer division with rounding_mode='trunc'")


@converter("aten.floor_divide.default", "aten.floor_divide.Scalar")
def _floor_divide(n):
    return _binary(n, "floor_divide", n.arg(0), n.arg(1))


@converter("aten.remainder.Tensor", "aten.remainder.Scalar")
def _remainder(n):
    # torch's remainder takes the divisor's sign, as floor_mod does.
    return _binary(n, "floor_mod", n.arg(0), n.arg(1))


@converter("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def _pow(n):
    a, b = n.arg(0), n.arg(1)
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, Expr):
        if b == 1:
            return n.cast(a, n.dtype)
        if b == 2:
            a = n.cast(a, n.dtype)
            return n.call("multiply", a, a)
        if b == 0.5:
            return n.call("sqrt", n.cast(a, n.dtype))
    return _binary(n, "power", a, b)


@converter("aten.square.default")
def _square(n):
    x = n.cast(n.input(0), n.dtype)
    return n.call("multiply", x, x)


@converter("aten.maximum.default")
def _maximum(n):
    return _binary(n, "maximum", n.arg(0), n.arg(1))


@converter("aten.minimum.default")
def _minimum(n):
    return _binary(n, "minimum", n.arg(0), n.arg(1))


_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
            "gt": "greater", "ge": "greater_equal"}


def _make_compare(op_name):
    def convert(n):
        a, b = n.arg(0), n.arg(1)
        return _binary(n, op_name, a, b, result_dtype(a, b))
    return convert


for _aten, _op in _COMPARE.items():
    converter(f"aten.{_aten}.Tensor", f"aten.{_aten}.Scalar")(_make_compare(_op))


def _make_logical(op_name):
    def convert(n):
        return _binary(n, op_name, n.arg(0), n.arg(1), "bool")
    return convert


converter("aten.logical_and.default")(_make_logical("logical_and"))
converter("aten.logical_or.default")(_make_logical("logical_or"))


@converter("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther",
           "aten.where.Scalar")
def _where(n):
    cond = n.cast(n.input(0), "bool")
    dtype = n.dtype
    return n.call("where", cond, n.operand(n.arg(1), dtype), n.operand(n.arg(2), dtype))


@converter("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(n):
    x, mask, value = n.input(0), n.cast(n.input(1), "bool"), n.arg(2)
    return n.call("where", mask, n.operand(value, n.dtype), n.cast(x, n.dtype))


@converter("aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout", "aten.to.device",
           "aten.type_as.default")
def _to(n):
    return n.cast(n.input(0), n.dtype)

"""Elementwise and broadcasting operators (activations, math, arithmetic, comparisons)."""
from __future__ import annotations

import math

from ...tir import dtype as dt
from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType
from .define import INJECTIVE, TopiRef, binary, topi_compute, unary
from .relations import (broadcast, broadcast_shapes, check_dtype, float_tensor, integer_tensor,
                        normalize_axis, one_of, same_dtype, tensor)

# ------------------------------------------------------------------------------ one input
unary("nn.relu", "elemwise:relu", doc="max(x, 0)")
unary("abs", "elemwise:abs", doc="|x|")
unary("negative", "elemwise:negative", doc="-x")
unary("floor", "elemwise:floor", doc="round down (integers pass through)")
unary("ceil", "elemwise:ceil", doc="round up (integers pass through)")
unary("round", "elemwise:round", doc="round half to even, as numpy and PyTorch")
unary("copy", "elemwise:copy", doc="a copy of x")
unary("stop_gradient", "elemwise:copy",
      doc="x, through which no gradient flows (torch's detach in a training import)")
for _name, _doc in (("sigmoid", "1 / (1 + exp(-x))"), ("tanh", "hyperbolic tangent"),
                    ("exp", "e ** x"), ("log", "natural logarithm"), ("sqrt", "square root"),
                    ("rsqrt", "1 / sqrt(x)"), ("erf", "the error function")):
    unary(_name, f"elemwise:{_name}", float_only=True, doc=_doc)
unary("nn.silu", "elemwise:silu", float_only=True, doc="x * sigmoid(x)")
unary("nn.hardswish", "elemwise:hardswish", float_only=True,
      doc="x * min(max(x + 3, 0), 6) / 6 (PyTorch)")
unary("nn.hardsigmoid", "elemwise:hardsigmoid", float_only=True,
      doc="min(max(x + 3, 0), 6) / 6 (PyTorch)")
unary("nn.leaky_relu", "elemwise:leaky_relu", float_only=True, attrs={"alpha": 0.01},
      kwargs=lambda a, t: {"alpha": float(a.alpha)}, doc="x if x > 0 else alpha * x")


for _name, _doc in (("sin", "sine"), ("cos", "cosine"), ("tan", "tangent"),
                    ("asin", "arcsine"), ("acos", "arccosine"), ("atan", "arctangent"),
                    ("sinh", "hyperbolic sine"), ("cosh", "hyperbolic cosine"),
                    ("asinh", "inverse hyperbolic sine"), ("acosh", "inverse hyperbolic cosine"),
                    ("atanh", "inverse hyperbolic tangent")):
    unary(_name, f"elemwise:{_name}", float_only=True, doc=_doc)


def _bitwise_not_rel(types, attrs):
    return integer_tensor(types[0], "input")


unary("bitwise_not", "elemwise:bitwise_not", type_rel=_bitwise_not_rel,
      doc="~x, every bit flipped (integers)")


def _trilu_rel(types, attrs):
    x = tensor(types[0])
    if x.ndim < 2:
        raise GraphTypeError(f"the input must have rank 2 or more (a batch of matrices), "
                             f"got rank {x.ndim}")
    if isinstance(attrs.k, bool) or not isinstance(attrs.k, int):
        raise GraphTypeError(f"k must be an int, got {attrs.k!r}")
    return x


unary("trilu", "elemwise:trilu", type_rel=_trilu_rel, attrs={"k": 0, "upper": True},
      kwargs=lambda a, t: {"k": a.k, "upper": bool(a.upper)},
      doc="the upper (column - row >= k) or lower (column - row <= k) triangle of the "
          "matrices in the last two axes; zero elsewhere")


def _gelu_rel(types, attrs):
    one_of(attrs.approximate, ("none", "tanh"), "approximate")
    return float_tensor(types[0])


unary("nn.gelu", "elemwise:gelu", type_rel=_gelu_rel, attrs={"approximate": "none"},
      kwargs=lambda a, t: {"approximate": a.approximate},
      doc="GELU: 'none' is x * Phi(x) with erf, 'tanh' the tanh approximation (PyTorch)")


def _clip_rel(types, attrs):
    x = tensor(types[0])
    lo, hi = attrs.a_min, attrs.a_max
    for what, v in (("a_min", lo), ("a_max", hi)):
        if v is not None and not isinstance(v, (int, float)):
            raise GraphTypeError(f"{what} must be a number or None, got {v!r}")
    if lo is not None and hi is not None and lo > hi:
        raise GraphTypeError(f"a_min ({lo}) is greater than a_max ({hi})")
    return x


def _clip_bound(v, dtype):
    # An infinite bound means "open"; integer tensors cannot hold it as a constant.
    if v is None or (isinstance(v, float) and math.isinf(v)):
        return None
    return v if dt.is_float(dtype) else math.floor(v) if v >= 0 else math.ceil(v)


unary("clip", "elemwise:clip", type_rel=_clip_rel,
      attrs={"a_min": float("-inf"), "a_max": float("inf")},
      kwargs=lambda a, t: {"a_min": _clip_bound(a.a_min, t.dtype),
                           "a_max": _clip_bound(a.a_max, t.dtype)},
      doc="min(max(x, a_min), a_max); an infinite bound leaves that side open")


def _cast_rel(types, attrs):
    x = tensor(types[0])
    return TensorType(x.shape, check_dtype(attrs.dtype, "attribute dtype"))


unary("cast", "elemwise:cast", type_rel=_cast_rel, attrs={"dtype": REQUIRED},
      kwargs=lambda a, t: {"dtype": t.dtype},
      doc="x converted to dtype (float to int truncates; nonzero to bool is True)")


def _logical_not_rel(types, attrs):
    return TensorType(tensor(types[0]).shape, "bool")


unary("logical_not", "broadcast:logical_not", type_rel=_logical_not_rel,
      doc="not x (bool result; nonzero is true)")

# ------------------------------------------------------------------------------ two inputs
binary("add", "broadcast:add", doc="a + b")
binary("subtract", "broadcast:subtract", doc="a - b")
binary("multiply", "broadcast:multiply", doc="a * b")
binary("divide", "broadcast:divide", doc="a / b; integers divide truncating toward zero")
binary("power", "broadcast:power", float_only=True, doc="a ** b (floating point)")
binary("maximum", "broadcast:maximum", doc="elementwise max")
binary("minimum", "broadcast:minimum", doc="elementwise min")
binary("floor_divide", "broadcast:floor_divide", doc="floor(a / b)")
binary("floor_mod", "broadcast:floor_mod", doc="a - floor(a / b) * b (the sign of b)")
for _name, _sym in (("equal", "=="), ("not_equal", "!="), ("less", "<"), ("less_equal", "<="),
                    ("greater", ">"), ("greater_equal", ">=")):
    binary(_name, f"broadcast:{_name}", bool_out=True, doc=f"a {_sym} b (bool result)")
binary("logical_and", "broadcast:logical_and", bool_out=True, doc="a and b (bool result)")
binary("logical_or", "broadcast:logical_or", bool_out=True, doc="a or b (bool result)")
binary("fmod", "broadcast:fmod", doc="a - trunc(a / b) * b (the sign of a, as C fmod)")


def _broadcast_integer(types, attrs):
    out = broadcast(types, attrs)
    if not dt.is_integral(out.dtype):
        raise GraphTypeError(f"operands must have an integer dtype, got {out.dtype}")
    return out


for _name, _doc in (("bitwise_and", "a & b"), ("bitwise_or", "a | b"), ("bitwise_xor", "a ^ b"),
                    ("left_shift", "a << b; 0 when b < 0 or b >= the bit width"),
                    ("right_shift", "a >> b (arithmetic for signed types); when b < 0 or b >= "
                                    "the bit width: -1 for a negative a, else 0")):
    register_op(_name, type_rel=_broadcast_integer, pattern=OpPattern.BROADCAST, num_inputs=2,
                compute=topi_compute(f"broadcast:{_name}"), schedules=INJECTIVE,
                doc=f"{_doc} (integers, NumPy broadcasting)")


def _where_rel(types, attrs):
    cond = tensor(types[0], "condition")
    x, y = tensor(types[1], "x"), tensor(types[2], "y")
    return TensorType(broadcast_shapes(cond.shape, x.shape, y.shape), same_dtype([x, y]))


register_op("where", type_rel=_where_rel, pattern=OpPattern.BROADCAST, num_inputs=3,
            compute=topi_compute("broadcast:where"), schedules=INJECTIVE,
            doc="x where condition else y, the three broadcast together")


def _channel_param_rel(what, allow_one):
    def rel(types, attrs):
        data = tensor(types[0], "data")
        param = tensor(types[1], what)
        axis = normalize_axis(attrs.axis, data.ndim)
        channels = data.shape[axis]
        ok = param.ndim == 1 and (param.shape[0] == channels or (allow_one and param.shape[0] == 1))
        if not ok:
            raise GraphTypeError(f"{what} of shape {param.shape} does not match axis "
                                 f"{attrs.axis} of {data.shape} (it must be 1-d of size "
                                 f"{channels}{' or 1' if allow_one else ''})")
        return TensorType(data.shape, same_dtype([data, param]))
    return rel


register_op("nn.prelu", type_rel=_channel_param_rel("slope", True), pattern=OpPattern.BROADCAST,
            num_inputs=2, attrs={"axis": 1},
            compute=topi_compute("elemwise:prelu", lambda a, t: {"axis": a.axis}),
            schedules=INJECTIVE, doc="x if x > 0 else slope[c] * x, c the index along axis")

_expand_dims = TopiRef("transform:expand_dims")
_add = TopiRef("broadcast:add")


def _bias_add_compute(attrs, inputs, out_type):
    data, bias = inputs
    axis = attrs.axis % len(out_type.shape)
    trailing = len(out_type.shape) - axis - 1
    if trailing:
        bias = _expand_dims(bias, 1, trailing)
    return [_add(data, bias)]


register_op("nn.bias_add", type_rel=_channel_param_rel("bias", False),
            pattern=OpPattern.BROADCAST, num_inputs=2, attrs={"axis": 1},
            compute=_bias_add_compute, schedules=INJECTIVE,
            doc="data + bias broadcast along axis (bias is 1-d)")

"""FakeQuantizationToInteger: quantize(f(dequantize(a), dequantize(b))) becomes integer f.

A QDQ model (ONNX Runtime's `quantize_static`, PyTorch's PT2E) stores float ops between
dequantize and quantize calls: "fake" quantization, computed in float unless a compiler sees
the pattern. This pass finds, for every qnn.quantize, the float region that feeds it back to
qnn.dequantize calls, and rewrites the region into integer ops when every op in it has a rule:

    quantize(bias_add(conv2d(dq(x), dq(w)), dq(b)), s, z)
        → requantize(bias_add(qnn.conv2d(x, w, zx, zw), b), sx·sw, 0, s, z)

Each value of the region carries an affine type (scale, zero point, dtype, axis): a
dequantize gives its operand's, a product gives int32 with scale sx·sw (per output channel
when the weights' scales are), and the final quantize requantizes into the output's. A region
whose inner values are also read outside it, or that holds an op without a rule, stays in
float: the result is then what the model's float ops compute, never wrong, only slower.

Rules are registered with the ops in the one op registry under "fake_quantization_to_integer":
rule(call, args, out) → (expr, affine) or None, where args are the converted operands (expr,
affine) and `out` the affine type the region must end in (given to the region's last op, so
that an op such as qnn.add can produce it directly; None elsewhere).

Runs at every opt_level, before LegalizeQnn (which lowers the qnn calls it makes).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..expr import Call, Constant, const
from ..op import Op, call, register_op_attr
from ..quantize_arith import RANGES
from ..visitor import ExprMutator, users
from .pass_infra import FunctionPass

KEY = "fake_quantization_to_integer"

__all__ = ["Affine", "FakeQuantizationToInteger", "fake_quantization_to_integer"]


@dataclass(frozen=True)
class Affine:
    """real = scale · (q − zero_point) for a value of `dtype`; scale and zero point Constants,
    0-d (per tensor) or 1-d along `axis` (per channel)."""

    scale: Constant
    zero_point: Constant
    dtype: str
    axis: int = 0

    @property
    def per_tensor(self) -> bool:
        return self.scale.data.ndim == 0

    def same_as(self, other: "Affine") -> bool:
        return (self.dtype == other.dtype and self.scale.data.shape == other.scale.data.shape
                and (self.per_tensor or self.axis == other.axis)
                and np.array_equal(self.scale.data, other.scale.data)
                and np.array_equal(self.zero_point.data, other.zero_point.data))


class _NotInteger(Exception):
    """The region cannot be computed in integers: it stays in float."""


def _constant(e):
    """e as a Constant when it is one, or a cast of one (a PT2E model's int64 zero points)."""
    if isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == "cast":
        inner = _constant(e.args[0])
        return None if inner is None else const(inner.data.astype(e.attrs.dtype))
    return e if isinstance(e, Constant) else None


def _affine_of(dequantize: Call, data_type) -> Affine:
    scale, zero_point = (_constant(a) for a in dequantize.args[1:])
    if scale is None or zero_point is None:
        raise _NotInteger
    return Affine(_flat(scale), _flat(zero_point), data_type.dtype,
                  dequantize.attrs.axis % max(data_type.ndim, 1))


def _flat(c: Constant) -> Constant:
    return const(c.data.reshape(())) if c.data.size == 1 and c.data.ndim else c


class _Region:
    """The conversion of one quantize's region, memoized on the original nodes."""

    def __init__(self, uses: dict, rewritten: dict):
        self.uses, self.rewritten, self.memo = uses, rewritten, {}

    def convert(self, expr, out: Affine | None = None):
        if expr in self.memo:
            return self.memo[expr]
        if isinstance(expr, Constant) and expr.data.dtype.kind == "f":
            # a float constant (a PT2E model's bias): only a rule that can quantize it reads it
            return expr, None
        if not (isinstance(expr, Call) and isinstance(expr.op, Op)):
            raise _NotInteger
        if expr.op.name == "qnn.dequantize":
            data = expr.args[0]
            result = self.rewritten[data], _affine_of(expr, data.checked_type)
        else:
            rule = expr.op.get_attr(KEY)
            # a value also read outside the region would have to exist in float as well
            if rule is None or len(self.uses.get(expr, ())) > 1:
                raise _NotInteger
            # an op that keeps its operand's affine type hands the wanted one down (so that
            # quantize(relu(a + b)) adds straight into the output's type)
            keeps = getattr(rule, "keeps_affine", False) and out is not None and out.per_tensor
            args = [self.convert(a, out if keeps else None) for a in expr.args]
            if any(a is None for _, a in args) and not getattr(rule, "takes_float", False):
                raise _NotInteger
            result = rule(expr, args, out)
            if result is None:
                raise _NotInteger
        self.memo[expr] = result
        return result


def _requantize(expr, have: Affine, want: Affine, span):
    if have.same_as(want):
        return expr
    if not (have.per_tensor or want.per_tensor or have.axis == want.axis):
        raise _NotInteger
    axis = want.axis if have.per_tensor else have.axis
    return call("qnn.requantize", expr, have.scale, have.zero_point, want.scale,
                want.zero_point, axis=axis, out_dtype=want.dtype, span=span)


class _Rewriter(ExprMutator):
    def __init__(self, uses: dict):
        super().__init__()
        self.uses = uses

    def rewrite_Call(self, c, op, args):
        if isinstance(op, Op) and op.name == "qnn.quantize":
            scale, zero_point = _constant(c.args[1]), _constant(c.args[2])
            if scale is not None and zero_point is not None:
                want = Affine(_flat(scale), _flat(zero_point), c.checked_type.dtype,
                              c.attrs.axis % max(c.checked_type.ndim, 1))
                try:
                    expr, have = _Region(self.uses, self.memo).convert(c.args[0], want)
                    if have is None:        # a float constant quantized: FoldConstant's
                        raise _NotInteger
                    return _requantize(expr, have, want, c.span)
                except _NotInteger:
                    pass
        return super().rewrite_Call(c, op, args)


def fake_quantization_to_integer(func):
    """Integer versions of the fake-quantized regions of func (see the module docstring).

    Example:
        >>> f = Function([x], call("qnn.quantize", call("nn.relu",
        ...              call("qnn.dequantize", x, s, z)), s, z))          # doctest: +SKIP
        >>> fake_quantization_to_integer(f)      # fn (%x) { clip(%x, a_min=z, a_max=255) }
    """
    return _Rewriter(users(func)).visit(func)


def FakeQuantizationToInteger():
    """The FakeQuantizationToInteger function pass (opt_level 0).

    Example:
        >>> mod = FakeQuantizationToInteger()(mod)  # doctest: +SKIP
    """
    return FunctionPass(fake_quantization_to_integer, opt_level=0,
                        name="FakeQuantizationToInteger")


# -- rules ------------------------------------------------------------------------------------

def _rule(*names: str, keeps_affine: bool = False, takes_float: bool = False):
    """Register the decorated fn(call, args, out) as the rule of ops `names`; with
    takes_float, an operand may be a float constant, whose affine type is None."""
    def register(fn):
        fn.keeps_affine, fn.takes_float = keeps_affine, takes_float
        for name in names:
            register_op_attr(name, KEY, fn)
        return fn
    return register


_EIGHT_BIT = ("int8", "uint8")


def _accumulator(scale: np.ndarray, axis: int) -> Affine:
    """The affine type of an int32 sum of products: scale sx·sw, zero point 0."""
    scale = scale.astype("float32")
    return Affine(const(scale), const(np.zeros(scale.shape, "int32")), "int32", axis)


def _product_scale(ax: Affine, aw: Affine) -> np.ndarray:
    # float32 arithmetic, as ONNX Runtime's quantizer computes a bias's scale
    return (ax.scale.data.astype("float32") * aw.scale.data.astype("float32")).astype("float32")


def _product_operands(args, weight_axis: int):
    (x, ax), (w, aw) = args
    if ax.dtype not in _EIGHT_BIT or aw.dtype not in _EIGHT_BIT or not ax.per_tensor:
        return None
    if not aw.per_tensor and aw.axis != weight_axis:
        return None
    return x, ax, w, aw


@_rule("nn.conv2d")
def _conv2d(c, args, out):
    a = c.attrs
    operands = _product_operands(args, 0)
    if operands is None or a.data_layout != "NCHW" or a.out_dtype not in (None, "float32"):
        return None
    x, ax, w, aw = operands
    y = call("qnn.conv2d", x, w, ax.zero_point, aw.zero_point, strides=a.strides,
             padding=a.padding, dilation=a.dilation, groups=a.groups, span=c.span)
    return y, _accumulator(_product_scale(ax, aw), 1)


@_rule("nn.dense")
def _dense(c, args, out):
    operands = _product_operands(args, 0)
    if operands is None:
        return None
    x, ax, w, aw = operands
    y = call("qnn.dense", x, w, ax.zero_point, aw.zero_point, span=c.span)
    return y, _accumulator(_product_scale(ax, aw), len(c.checked_type.shape) - 1)


@_rule("nn.matmul")
def _matmul(c, args, out):
    """a @ b (b transposed or not) as qnn.dense(a, bᵀ): a constant b is transposed here, so
    that the dense sees a constant weight."""
    if c.attrs.transpose_a:
        return None
    transposed = bool(c.attrs.transpose_b)
    operands = _product_operands(args, 0 if transposed else 1)
    if operands is None:
        return None
    x, ax, w, aw = operands
    if not transposed:
        w = (const(np.ascontiguousarray(w.data.T)) if isinstance(w, Constant)
             else call("transpose", w, axes=(1, 0)))
    y = call("qnn.dense", x, w, ax.zero_point, aw.zero_point, span=c.span)
    return y, _accumulator(_product_scale(ax, aw), 1)


@_rule("nn.batch_matmul")
def _batch_matmul(c, args, out):
    (a, aa), (b, ab) = args
    if (aa.dtype not in _EIGHT_BIT or ab.dtype not in _EIGHT_BIT or not aa.per_tensor
            or not ab.per_tensor):
        return None
    y = call("qnn.batch_matmul", a, b, aa.zero_point, ab.zero_point,
             transpose_a=c.attrs.transpose_a, transpose_b=c.attrs.transpose_b, span=c.span)
    return y, _accumulator(_product_scale(aa, ab), 2)


def _onto(bias, have: Affine | None, acc: Affine, span):
    """A 1-d int32 bias (along axis 0) in the accumulator's scale and zero point 0; a float
    bias (have None) is quantized here, rounding half to even as the quantizers do."""
    if have is None:
        if not isinstance(bias, Constant) or bias.data.ndim != 1:
            raise _NotInteger
        q = np.round(bias.data.astype("float64") / acc.scale.data.astype("float64"))
        return const(np.clip(q, *RANGES["int32"]).astype("int32"))
    want = Affine(acc.scale, const(np.zeros(acc.scale.data.shape, "int32")), "int32", 0)
    return _requantize(bias, Affine(have.scale, have.zero_point, have.dtype, 0), want, span)


def _channel_axis(acc: Affine, axis: int, ndim: int) -> bool:
    return acc.per_tensor or acc.axis == axis % ndim


def _bias(ab: Affine | None) -> bool:
    return ab is None or ab.dtype == "int32"


@_rule("nn.bias_add", takes_float=True)
def _bias_add(c, args, out):
    (x, ax), (b, ab) = args
    ndim = len(c.checked_type.shape)
    if ax is None or ax.dtype != "int32" or not _bias(ab) \
            or not _channel_axis(ax, c.attrs.axis, ndim):
        return None
    return call("nn.bias_add", x, _onto(b, ab, ax, c.span), axis=c.attrs.axis, span=c.span), ax


@_rule("add", takes_float=True)
def _add(c, args, out):
    (a, aa), (b, ab) = args
    ndim = len(c.checked_type.shape)
    if aa is None:
        return None
    if aa.dtype == "int32" and _bias(ab) and b.checked_type.ndim == 1:
        # an accumulator plus a bias along its last axis (MatMul + Add)
        if b.checked_type.shape != c.checked_type.shape[-1:] or not _channel_axis(aa, -1, ndim):
            return None
        return call("add", a, _onto(b, ab, aa, c.span), span=c.span), aa
    if ab is not None and "int32" in (aa.dtype, ab.dtype) \
            and b.checked_type.shape == a.checked_type.shape == c.checked_type.shape:
        # a convolution's sums plus a quantized residual (PT2E's conv + add + relu): the
        # residual joins the sums' finer scale, where it is exact to half a step
        (a, aa), (b, ab) = sorted(args, key=lambda arg: arg[1].dtype != "int32")
        if not np.all(aa.scale.data <= ab.scale.data):
            return None
        return call("add", a, _requantize(b, ab, aa, c.span), span=c.span), aa
    if (out is None or ab is None or not (aa.per_tensor and ab.per_tensor and out.per_tensor)
            or aa.dtype not in _EIGHT_BIT or ab.dtype not in _EIGHT_BIT):
        return None
    y = call("qnn.add", a, b, aa.scale, aa.zero_point, ab.scale, ab.zero_point, out.scale,
             out.zero_point, out_dtype=out.dtype, span=c.span)
    return y, out


def _bound(value, affine: Affine):
    """A real bound in the quantized domain of a per-tensor affine type."""
    if value is None:
        return None
    scale = float(affine.scale.data)
    lo, hi = RANGES[affine.dtype]
    q = np.round(np.float32(value) / np.float32(scale)) + int(affine.zero_point.data)
    return float(min(max(q, lo), hi))


@_rule("nn.relu", keeps_affine=True)
def _relu(c, args, out):
    ((x, ax),) = args
    if ax.zero_point.data.ndim or not ax.per_tensor:
        if np.any(ax.zero_point.data):
            return None
        low = 0.0
    else:
        low = float(ax.zero_point.data)
    return call("clip", x, a_min=low, a_max=None, span=c.span), ax


@_rule("clip", keeps_affine=True)
def _clip(c, args, out):
    """clip in the quantized domain; a per-channel value (a convolution's sums before ReLU6)
    is requantized into the region's output type first, whose bounds are one per tensor."""
    ((x, ax),) = args
    if not ax.per_tensor:
        if out is None or not out.per_tensor:
            return None
        x, ax = _requantize(x, ax, out, c.span), out
    return call("clip", x, a_min=_bound(c.attrs.a_min, ax), a_max=_bound(c.attrs.a_max, ax),
                span=c.span), ax


@_rule("nn.max_pool2d", keeps_affine=True)
def _max_pool(c, args, out):
    ((x, ax),) = args
    if ax.dtype not in _EIGHT_BIT or not ax.per_tensor:
        return None
    return Call(c.op, [x], c.attrs, c.span), ax


def _same_op(c, x):
    """c applied to x; folded when x is a constant (a weight stays a constant for the
    integer kernels that need one)."""
    if isinstance(x, Constant):
        if c.op.name == "transpose":
            return const(np.ascontiguousarray(np.transpose(x.data, c.attrs.axes)))
        return const(np.ascontiguousarray(x.data.reshape(c.checked_type.shape)))
    return Call(c.op, [x], c.attrs, c.span)


@_rule("reshape", "squeeze", "expand_dims", "copy", keeps_affine=True)
def _reshaping(c, args, out):
    ((x, ax),) = args
    y = _same_op(c, x)
    if ax.per_tensor:
        return y, ax
    # per channel along a last axis that the reshape keeps whole: (M, N) <-> (1, M, N)
    before, after = c.args[0].checked_type.shape, c.checked_type.shape
    if ax.axis != len(before) - 1 or before[-1] != after[-1]:
        return None
    return y, Affine(ax.scale, ax.zero_point, ax.dtype, len(after) - 1)


@_rule("transpose", keeps_affine=True)
def _transpose(c, args, out):
    ((x, ax),) = args
    y = _same_op(c, x)
    if ax.per_tensor:
        return y, ax
    ndim = len(c.checked_type.shape)
    axes = list(c.attrs.axes) if c.attrs.axes is not None else list(range(ndim))[::-1]
    axes = [a % ndim for a in axes]
    return y, Affine(ax.scale, ax.zero_point, ax.dtype, axes.index(ax.axis))


@_rule("nn.global_avg_pool2d", "mean")
def _mean(c, args, out):
    """An integer sum; the division by the count joins the scale (and the zero point, times
    the count, is subtracted at the requantize), as ONNX Runtime's quantized pool does."""
    ((x, ax),) = args
    shape = c.args[0].checked_type.shape
    if c.op.name == "mean":
        axes, keepdims = c.attrs.axis, c.attrs.keepdims
    elif c.attrs.layout == "NCHW":
        axes, keepdims = (2, 3), True
    else:
        return None
    if axes is None or ax.dtype not in _EIGHT_BIT or not ax.per_tensor:
        return None
    axes = tuple(a % len(shape) for a in (axes if isinstance(axes, tuple) else (axes,)))
    count = int(np.prod([shape[a] for a in axes]))
    total = call("sum", call("cast", x, dtype="int32"), axis=axes, keepdims=keepdims,
                 span=c.span)
    scale = (ax.scale.data.astype("float32") / np.float32(count)).astype("float32")
    zero = (ax.zero_point.data.astype("int64") * count).astype("int32")
    return total, Affine(const(scale), const(zero), "int32")

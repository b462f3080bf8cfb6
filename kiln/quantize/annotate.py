"""Where a float graph is quantized: its products (convolutions, dense, matmul with constant
weights), the values around them, and the QDQ form written back into the graph.

A *value point* is a tensor that gets a quantize → dequantize pair (uint8, one scale and zero
point from calibration): the data input of every product, the end of every product's epilogue
(bias, ReLU, clip), and the operands and result of a residual add or a pool between such
values. The products' weights become int8 constants behind a dequantize (per output channel or
per tensor, symmetric) and their biases int32 constants in the product's scale. What the
result holds is then exactly what an ONNX QDQ model holds, and FakeQuantizationToInteger turns
it into integer kernels.

Example:
    >>> points = find_points(func, skip=())            # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..graph import Call, Constant, ExprMutator, Op, Tuple, call, const, post_order, users

PRODUCTS = ("nn.conv2d", "nn.dense", "nn.matmul")
EPILOGUE = ("nn.bias_add", "nn.relu", "clip")
KEEPS_VALUES = ("nn.max_pool2d", "nn.global_avg_pool2d", "nn.avg_pool2d",
                "nn.adaptive_avg_pool2d")


def _name(c) -> str:
    return getattr(c.op, "name", "")


def _is_call(e, *names) -> bool:
    return isinstance(e, Call) and isinstance(e.op, Op) and _name(e) in names


def _constant_bias(e) -> bool:
    return _is_call(e, "add") and isinstance(e.args[1], Constant)


@dataclass
class Product:
    """A quantized product: its call, the end of its epilogue (bias / ReLU / clip), its bias
    call if any, and a name for the report."""

    call: Call
    end: object
    bias: Call | None
    name: str


@dataclass
class Points:
    """The products of a graph and its value points, in graph order."""

    products: list = field(default_factory=list)
    values: list = field(default_factory=list)


def weight_axis(c) -> int:
    """The output-channel axis of product c's weight: OIHW and (units, in) 0, a matmul's
    (in, units) weight 1 (0 when transposed)."""
    if _name(c) == "nn.matmul" and not c.attrs.transpose_b:
        return 1
    return 0


def _channel_axis(c) -> int:
    """The output-channel axis of product c's result."""
    return 1 if _name(c) == "nn.conv2d" else c.checked_type.ndim - 1


def _per_channel_bias(bias_call, product) -> bool:
    """Whether a bias call adds one value per output channel of `product` along its channel
    axis (not a constant that broadcasts some other way)."""
    b = bias_call.args[1].checked_type.shape
    out = product.checked_type.shape
    axis = _channel_axis(product)
    if _is_call(bias_call, "nn.bias_add"):
        return bias_call.attrs.axis % len(out) == axis and b == (out[axis],)
    aligned = (1,) * (len(out) - len(b)) + tuple(b)
    return len(b) <= len(out) and all(d == (out[k] if k == axis else 1)
                                      for k, d in enumerate(aligned))


def _quantizable(c, skip) -> bool:
    if not _is_call(c, *PRODUCTS) or _name(c) in skip or (c.span and str(c.span) in skip):
        return False
    weight = c.args[1]
    if not isinstance(weight, Constant) or weight.checked_type.dtype != "float32":
        return False
    if _name(c) == "nn.conv2d" and c.attrs.data_layout != "NCHW":
        return False
    if _name(c) == "nn.matmul" and (c.attrs.transpose_a or weight.checked_type.ndim != 2):
        return False
    return c.args[0].checked_type.dtype == "float32"


def matched_names(func, names) -> set:
    """Which of `names` name an op or a call's span in func."""
    found = set()
    for node in post_order(func.body):
        if isinstance(node, Call) and isinstance(node.op, Op):
            found |= {n for n in names if n == _name(node) or (node.span and n == str(node.span))}
    return found


def find_points(func, skip=()) -> Points:
    """The products and value points of a float function (see the module docstring); ops
    named in `skip` (an op name such as "nn.dense", or a call's span: its source node name)
    stay in float.

    Example:
        >>> find_points(func).values[:2]                       # doctest: +SKIP
    """
    skip = set(skip)
    uses = users(func.body)
    points = Points()
    chosen: dict = {}

    def add_value(v) -> bool:
        if v in chosen or v.checked_type.dtype != "float32":
            return False
        chosen[v] = True
        points.values.append(v)
        return True

    order = post_order(func.body)
    body = func.body
    outputs = set(body.fields) if isinstance(body, Tuple) else {body}
    for node in order:
        if not _quantizable(node, skip):
            continue
        end, bias = node, None
        while len(uses.get(end, ())) == 1:
            nxt = uses[end][0]
            if not (_is_call(nxt, *EPILOGUE) or _constant_bias(nxt)) or nxt.args[0] is not end:
                break
            if bias is None and end is node and (_is_call(nxt, "nn.bias_add")
                                                 or _constant_bias(nxt)) \
                    and isinstance(nxt.args[1], Constant) and _per_channel_bias(nxt, node):
                bias = nxt
            end = nxt
        name = str(node.span) if node.span else f"{_name(node)}#{len(points.products)}"
        points.products.append(Product(node, end, bias, name))
        add_value(node.args[0])
        if end not in outputs:
            # a model's result (logits) stays float: 256 levels over its range would decide
            # between close classes by rounding; the product itself still reads 8-bit values
            add_value(end)
    # residual adds and pools between quantized values, until nothing changes
    changed = True
    while changed:
        changed = False
        for node in order:
            if node in chosen or not isinstance(node, Call):
                continue
            tensors = [a for a in node.args if not isinstance(a, Constant)]
            joins = (_is_call(node, "add") and len(tensors) == 2
                     and all(a in chosen for a in tensors)
                     or _is_call(node, *KEEPS_VALUES) and node.args[0] in chosen)
            if joins:
                end = node
                while len(uses.get(end, ())) == 1 and _is_call(uses[end][0], "nn.relu", "clip"):
                    end = uses[end][0]
                changed = add_value(end) or changed
    return points


def quantize_weight(w: np.ndarray, axis: int, per_channel: bool, bound: int):
    """(int8 weights, scales): symmetric, per channel along `axis` or per tensor, clipped to
    ±bound (127, or 63 for 7-bit weights).

    Example:
        >>> q, s = quantize_weight(np.array([[0.5, -1.0], [2.0, 1.0]], "float32"), 0, True, 127)
        >>> q.tolist(), s.tolist()
        ([[64, -127], [127, 64]], [0.007874015718698502, 0.015748031437397003])
    """
    w = np.asarray(w, "float32")
    if per_channel:
        reduce = tuple(k for k in range(w.ndim) if k != axis)
        peak = np.abs(w).max(axis=reduce)
    else:
        peak = np.array(np.abs(w).max())
    scale = np.where(peak > 0, peak / np.float32(bound), np.float32(1.0)).astype("float32")
    shaped = scale.reshape([-1 if k == axis else 1 for k in range(w.ndim)]) if per_channel \
        else scale
    q = np.clip(np.round(w / shaped), -bound, bound).astype("int8")
    return q, scale


def _qdq(value, scale: float, zero: int):
    s, z = const(np.float32(scale)), const(np.uint8(zero))
    return call("qnn.dequantize", call("qnn.quantize", value, s, z, out_dtype="uint8"), s, z)


class QDQWriter(ExprMutator):
    """Rewrites a float function into its QDQ form, given each value point's (scale, zero)."""

    def __init__(self, points: Points, qparams: dict, per_channel: bool, bound: int):
        super().__init__()
        self.qparams = qparams
        self.products = {p.call: p for p in points.products}
        self.biases = {p.bias: p for p in points.products if p.bias is not None}
        self.per_channel, self.bound = per_channel, bound
        self.weight_scale: dict = {}
        self.dequantized: dict = {}       # original value point -> its dq(q(.)) expression

    def rewrite_Call(self, c, op, args):
        product = self.products.get(c)
        if product is not None and c.args[0] in self.qparams:
            axis = weight_axis(c)
            q, scale = quantize_weight(c.args[1].data, axis, self.per_channel, self.bound)
            self.weight_scale[c] = scale
            zero = np.zeros(scale.shape, "int8")
            args = [args[0], call("qnn.dequantize", const(q), const(scale), const(zero),
                                  axis=axis if scale.ndim else 0)]
        bias_of = self.biases.get(c)
        new = None
        if bias_of is not None and bias_of.call in self.weight_scale:
            new = self._bias(c, bias_of, args[0])
        if new is None:
            new = super().rewrite_Call(c, op, args)
        if c in self.qparams:
            new = _qdq(new, *self.qparams[c])
            self.dequantized[c] = new
        return new

    def rewrite_Var(self, v):
        if v in self.qparams:
            new = _qdq(v, *self.qparams[v])
            self.dequantized[v] = new
            return new
        return v

    def _bias(self, c, product, data):
        """bias_add(data, the bias as int32 in the product's scale: input scale x weight
        scale, per channel or per tensor as the weights are)."""
        channels = product.call.checked_type.shape[_channel_axis(product.call)]
        weight_scale = self.weight_scale[product.call]
        scale = (np.float32(self.qparams[product.call.args[0]][0]) * weight_scale).astype("float32")
        per = np.broadcast_to(scale, (channels,))
        q = np.clip(np.round(c.args[1].data.reshape(-1).astype("float64") / per), -2 ** 31,
                    2 ** 31 - 1).astype("int32")
        bias = call("qnn.dequantize", const(q), const(scale), const(np.zeros(scale.shape, "int32")),
                    axis=0)
        return call("nn.bias_add", data, bias, axis=_channel_axis(product.call), span=c.span)


__all__ = ["Points", "Product", "QDQWriter", "find_points", "quantize_weight"]

"""An int8 ResNet-18 in kiln's graph IR, with power-of-two requantization (the arithmetic of the
TVM paper's VDLA experiment, §6.4), seeded random weights and a numpy reference.

Every convolution is int8 x int8 -> int32, then `right_shift` by a per-layer shift, `clip` to
int8's range (from 0 where a ReLU follows) and `cast` to int8 — the chain VDLA's GEMM and ALU
run. Residual additions add the two int8 operands in int32 and clip. The stem (7x7, 3 input
channels), the max pool, the global average pool and the classifier stay float-free integer or
float ops that a CPU runs. Shifts are chosen on one seeded input so that each layer's largest
accumulator maps to about int8's full range (a calibration by powers of two).

Example:
    >>> mod, x, reference = int8_resnet18(width=16, image_size=32)
    >>> reference(x).shape
    (1, 10)
"""
from __future__ import annotations

import numpy as np

from ..accel.vdla.conv2d import conv_int64
from ..graph import Function, IRModule, call, const, var


def _max_pool(x, k=3, s=2, p=1):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=np.iinfo(x.dtype).min)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.full((n, c, oh, ow), np.iinfo(x.dtype).min, x.dtype)
    for r in range(k):
        for t in range(k):
            out = np.maximum(out, xp[:, :, r:r + s * oh:s, t:t + s * ow:s])
    return out


class _Net:
    """Builds the graph and the numpy reference side by side, calibrating each shift on the
    reference's value of the layer's accumulator."""

    def __init__(self, rng):
        self.rng = rng
        self.value = {}                  # graph expr -> its reference value (calibration input)
        self.layers = []                 # (weights, stride, pad, shift, relu) per conv, in order

    def conv(self, x, cout, k, stride, relu):
        cin = self.value[x].shape[1]
        w = self.rng.integers(-16, 17, (cout, cin, k, k)).astype(np.int8)
        pad = k // 2
        acc = conv_int64(self.value[x], w, stride, pad)
        shift = max(0, int(np.ceil(np.log2(max(int(np.abs(acc).max()), 1) / 127.0))))
        y = call("nn.conv2d", x, const(w), strides=[stride, stride], padding=[pad] * 4,
                 out_dtype="int32")
        y = call("right_shift", y, const(np.array(shift, np.int32)))
        y = call("clip", y, a_min=0.0 if relu else -128.0, a_max=127.0)
        y = call("cast", y, dtype="int8")
        self.value[y] = np.clip(acc >> shift, 0 if relu else -128, 127).astype(np.int8)
        self.layers.append((w, stride, pad, shift, relu))
        return y

    def add_relu(self, a, b):
        y = call("add", call("cast", a, dtype="int32"), call("cast", b, dtype="int32"))
        y = call("cast", call("clip", y, a_min=0.0, a_max=127.0), dtype="int8")
        self.value[y] = np.clip(self.value[a].astype(np.int32) + self.value[b], 0,
                                127).astype(np.int8)
        return y


def int8_resnet18(seed: int = 0, width: int = 64, image_size: int = 224,
                  num_classes: int = 10, batch: int = 1):
    """(IRModule, input, reference): the int8 ResNet-18 (widths width..8*width, BasicBlocks
    [2, 2, 2, 2]) with seeded weights, a seeded int8 input of shape (batch, 3, image_size,
    image_size) in [0, 127], and reference(x) -> float32 logits computed in numpy with the same
    integer arithmetic.

    Example:
        >>> mod, x, reference = int8_resnet18(width=16, image_size=32)
        >>> x.dtype, x.shape
        (dtype('int8'), (1, 3, 32, 32))
    """
    rng = np.random.default_rng(seed)
    x_value = rng.integers(0, 128, (batch, 3, image_size, image_size)).astype(np.int8)
    net = _Net(rng)
    data = var("data", x_value.shape, "int8")
    net.value[data] = x_value
    y = net.conv(data, width, 7, 2, relu=True)
    pooled = call("nn.max_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    net.value[pooled] = _max_pool(net.value[y])
    y = pooled
    cin = width
    for stage, cout in enumerate([width, 2 * width, 4 * width, 8 * width]):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = y
            if stride != 1 or cin != cout:
                shortcut = net.conv(y, cout, 1, stride, relu=False)
            h = net.conv(y, cout, 3, stride, relu=True)
            h = net.conv(h, cout, 3, 1, relu=False)
            y = net.add_relu(h, shortcut)
            cin = cout
    feat = call("nn.global_avg_pool2d", call("cast", y, dtype="float32"))
    feat = call("reshape", feat, newshape=(batch, cin))
    fc = rng.uniform(-0.05, 0.05, (num_classes, cin)).astype(np.float32)
    logits = call("nn.dense", feat, const(fc))
    mod = IRModule.from_expr(Function([data], logits))
    layers = list(net.layers)

    def reference(x: np.ndarray) -> np.ndarray:
        """The network in numpy: the same integer arithmetic, then float32 pooling and dense."""
        it = iter(layers)

        def conv(v):
            w, stride, pad, shift, relu = next(it)
            return np.clip(conv_int64(v, w, stride, pad) >> shift, 0 if relu else -128,
                           127).astype(np.int8)

        v = _max_pool(conv(x))
        c = width
        for stage, cout in enumerate([width, 2 * width, 4 * width, 8 * width]):
            for block in range(2):
                stride = 2 if stage > 0 and block == 0 else 1
                shortcut = conv(v) if stride != 1 or c != cout else v
                h = conv(conv(v))
                v = np.clip(h.astype(np.int32) + shortcut, 0, 127).astype(np.int8)
                c = cout
        pooled = v.astype(np.float32).mean(axis=(2, 3))
        return pooled @ fc.T

    return mod, x_value, reference

"""Neural-network ONNX ops: convolutions, pooling, normalizations, softmax, resize."""
from __future__ import annotations

import math

import numpy as np

from ..context import dtype_of, shape_of
from ..registry import converter
from .tensor import reshape_to


def _spatial_attrs(ctx, nspatial: int):
    strides = list(ctx.attr("strides", [1] * nspatial))
    dilations = list(ctx.attr("dilations", [1] * nspatial))
    pads = list(ctx.attr("pads", [0] * (2 * nspatial)))
    if len(strides) != nspatial or len(dilations) != nspatial or len(pads) != 2 * nspatial:
        ctx.error(f"strides {strides}, dilations {dilations} or pads {pads} do not match "
                  f"{nspatial} spatial axes")
    return strides, dilations, pads


def _auto_pads(ctx, in_sizes, kernel, strides, dilations, pads):
    """pads [begins..., ends...] after auto_pad (SAME_UPPER/SAME_LOWER/VALID)."""
    mode = ctx.attr("auto_pad", "NOTSET")
    if mode == "NOTSET":
        return pads
    n = len(in_sizes)
    if mode == "VALID":
        return [0] * (2 * n)
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        ctx.error(f"unknown auto_pad {mode!r}")
    begins, ends = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        begins.append(small if mode == "SAME_UPPER" else total - small)
        ends.append(total - begins[-1])
    return begins + ends


def _as_2d(ctx, x, nspatial):
    """A 1-d spatial input (N, C, L) as (N, C, L, 1) so the 2-d operators apply."""
    if nspatial == 2:
        return x
    return ctx.op("expand_dims", x, axis=-1)


def _check_rank(ctx, nspatial):
    if nspatial not in (1, 2):
        ctx.unsupported(f"{nspatial}-d")


def _conv_operands(ctx):
    """Data, weight, spatial rank, kernel size and window attributes of Conv/ConvTranspose."""
    wshape = ctx.shape(1)
    nspatial = len(wshape) - 2
    _check_rank(ctx, nspatial)
    kernel = list(ctx.attr("kernel_shape", wshape[2:]))
    strides, dilations, pads = _spatial_attrs(ctx, nspatial)
    return ctx.input(0), ctx.input(1), nspatial, kernel, strides, dilations, pads


@converter("Conv")
def _conv(ctx):
    x, w, nspatial, kernel, strides, dilations, pads = _conv_operands(ctx)
    pads = _auto_pads(ctx, ctx.shape(0)[2:], kernel, strides, dilations, pads)
    if nspatial == 1:
        x, w = _as_2d(ctx, x, 1), _as_2d(ctx, w, 1)
        strides, dilations, pads = strides + [1], dilations + [1], [pads[0], 0, pads[1], 0]
    y = ctx.op("nn.conv2d", x, w, strides=tuple(strides), dilation=tuple(dilations),
               padding=tuple(pads), groups=int(ctx.attr("group", 1)))
    if ctx.has_input(2):
        y = ctx.op("nn.bias_add", y, ctx.input(2), axis=1)
    if nspatial == 1:
        y = ctx.op("squeeze", y, axis=(3,))
    return y


@converter("ConvTranspose")
def _conv_transpose(ctx):
    x, w, nspatial, kernel, strides, dilations, pads = _conv_operands(ctx)
    out_pad = list(ctx.attr("output_padding", [0] * nspatial))
    in_sizes = ctx.shape(0)[2:]
    mode = ctx.attr("auto_pad", "NOTSET")
    out_shape = ctx.attr("output_shape", None)
    if out_shape is None and mode in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [size * s for size, s in zip(in_sizes, strides)]
    if out_shape is not None:
        out_shape = list(out_shape)[-nspatial:]
        begins, ends, extra = [], [], []
        for size, k, s, d, op_, want in zip(in_sizes, kernel, strides, dilations, out_pad,
                                             out_shape):
            total = s * (size - 1) + op_ + (k - 1) * d + 1 - want
            if total < 0:
                # A larger output_shape adds rows at the end, as output_padding does.
                if op_ - total >= max(s, d):
                    ctx.error(f"output_shape {out_shape} is larger than this ConvTranspose "
                              f"can make")
                extra.append(-total)
                total = 0
            else:
                extra.append(0)
            half = total // 2
            upper = mode == "SAME_UPPER"
            begins.append(half if upper else total - half)
            ends.append(total - half if upper else half)
        pads = begins + ends
        out_pad = [p + e for p, e in zip(out_pad, extra)]
    elif mode == "VALID":
        pads = [0] * (2 * nspatial)
    if nspatial == 1:
        x, w = _as_2d(ctx, x, 1), _as_2d(ctx, w, 1)
        strides, dilations = strides + [1], dilations + [1]
        pads, out_pad = [pads[0], 0, pads[1], 0], out_pad + [0]
    y = ctx.op("nn.conv2d_transpose", x, w, strides=tuple(strides), padding=tuple(pads),
               output_padding=tuple(out_pad), dilation=tuple(dilations),
               groups=int(ctx.attr("group", 1)))
    if ctx.has_input(2):
        y = ctx.op("nn.bias_add", y, ctx.input(2), axis=1)
    if nspatial == 1:
        y = ctx.op("squeeze", y, axis=(3,))
    return y


def _pool(ctx, name):
    x = ctx.input(0)
    shape = ctx.shape(0)
    nspatial = len(shape) - 2
    _check_rank(ctx, nspatial)
    kernel = list(ctx.attr("kernel_shape"))
    strides, dilations, pads = _spatial_attrs(ctx, nspatial)
    pads = _auto_pads(ctx, shape[2:], kernel, strides, dilations, pads)
    attrs = {}
    if name == "nn.avg_pool2d":
        attrs["count_include_pad"] = bool(ctx.attr("count_include_pad", 0))
    if nspatial == 1:
        x = _as_2d(ctx, x, 1)
        kernel, strides, dilations = kernel + [1], strides + [1], dilations + [1]
        pads = [pads[0], 0, pads[1], 0]
    y = ctx.op(name, x, pool_size=tuple(kernel), strides=tuple(strides), padding=tuple(pads),
               dilation=tuple(dilations), ceil_mode=bool(ctx.attr("ceil_mode", 0)), **attrs)
    if nspatial == 1:
        y = ctx.op("squeeze", y, axis=(3,))
    return y


@converter("MaxPool")
def _max_pool(ctx):
    if ctx.output_used(1):
        ctx.unsupported("Indices output")
    return _pool(ctx, "nn.max_pool2d")


@converter("AveragePool")
def _avg_pool(ctx):
    return _pool(ctx, "nn.avg_pool2d")


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx):
    x, ndim = ctx.input(0), ctx.ndim(0)
    avg = ctx.op_type == "GlobalAveragePool"
    if ndim == 4:
        return ctx.op("nn.global_avg_pool2d" if avg else "nn.global_max_pool2d", x)
    return ctx.op("mean" if avg else "max", x, axis=tuple(range(2, ndim)), keepdims=True)


# -- normalizations --------------------------------------------------------------------------

@converter("BatchNormalization")
def _batch_norm(ctx):
    if ctx.attr("training_mode", 0) or any(ctx.output_used(k) for k in (1, 2, 3, 4)):
        ctx.unsupported("training mode")
    args = [ctx.input(i) for i in range(5)]
    dtype = dtype_of(args[0])
    args = [a if dtype_of(a) == dtype else ctx.op("cast", a, dtype=dtype) for a in args]
    return ctx.op("nn.batch_norm", *args, axis=1, epsilon=float(ctx.attr("epsilon", 1e-5)))


@converter("LayerNormalization")
def _layer_norm(ctx):
    if ctx.output_used(1) or ctx.output_used(2):
        ctx.unsupported("Mean/InvStdDev outputs")
    shape = ctx.shape(0)
    axis = int(ctx.attr("axis", -1))
    axis = axis % len(shape)
    norm_shape = tuple(shape[axis:])
    x = ctx.input(0)
    gamma = _to_shape(ctx, ctx.input(1), norm_shape)
    if ctx.has_input(2):
        beta = _to_shape(ctx, ctx.input(2), norm_shape)
    else:
        beta = np.zeros(norm_shape, dtype=dtype_of(x))
    return ctx.op("nn.layer_norm", x, gamma, beta, axis=axis,
                  epsilon=float(ctx.attr("epsilon", 1e-5)))


def _to_shape(ctx, value, shape):
    """value (broadcastable to shape, as ONNX allows for scale/bias) with exactly that shape."""
    have = tuple(shape_of(value))
    if have == tuple(shape):
        return value
    if math.prod(have) == math.prod(shape):
        return reshape_to(ctx, value, shape)
    return ctx.op("broadcast_to", value, shape=tuple(shape))


@converter("InstanceNormalization")
def _instance_norm(ctx):
    x = ctx.input(0)
    shape = ctx.shape(0)
    axes = tuple(range(2, len(shape)))
    eps = float(ctx.attr("epsilon", 1e-5))
    mean = ctx.op("mean", x, axis=axes, keepdims=True)
    centered = ctx.op("subtract", x, mean)
    var = ctx.op("mean", ctx.op("multiply", centered, centered), axis=axes, keepdims=True)
    inv = ctx.op("rsqrt", ctx.op("add", var, ctx.scalar(eps, x)))
    per_channel = (shape[1],) + (1,) * len(axes)
    scale = reshape_to(ctx, ctx.input(1), per_channel)
    bias = reshape_to(ctx, ctx.input(2), per_channel)
    return ctx.op("add", ctx.op("multiply", ctx.op("multiply", centered, inv), scale), bias)


@converter("LpNormalization")
def _lp_norm(ctx):
    x = ctx.input(0)
    axis = int(ctx.attr("axis", -1))
    p = int(ctx.attr("p", 2))
    if p == 1:
        norm = ctx.op("sum", ctx.op("abs", x), axis=axis, keepdims=True)
    elif p == 2:
        norm = ctx.op("sqrt", ctx.op("sum", ctx.op("multiply", x, x), axis=axis, keepdims=True))
    else:
        ctx.error(f"p must be 1 or 2, got {p}")
    # An all-zero slice normalizes to zeros, not 0/0.
    zero = ctx.scalar(0, x)
    safe = ctx.op("where", ctx.op("equal", norm, zero), ctx.scalar(1, x), norm)
    return ctx.op("divide", x, safe)


@converter("Softmax", "LogSoftmax")
def _softmax(ctx):
    name = "nn.softmax" if ctx.op_type == "Softmax" else "nn.log_softmax"
    shape = ctx.shape(0)
    x = ctx.input(0)
    if ctx.opset >= 13:
        return ctx.op(name, x, axis=int(ctx.attr("axis", -1)))
    # Before opset 13 the input is seen as 2-d: [dims before axis] x [dims from axis].
    axis = int(ctx.attr("axis", 1)) % len(shape)
    if axis == len(shape) - 1:
        return ctx.op(name, x, axis=-1)
    flat = reshape_to(ctx, x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return reshape_to(ctx, ctx.op(name, flat, axis=-1), shape)


# -- resize ----------------------------------------------------------------------------------

_COORD_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel")


def _resize_check(attrs, opset):
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        return f"mode={mode}"
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    if coord not in _COORD_MODES:
        return f"coordinate_transformation_mode={coord}"
    if attrs.get("antialias", 0):
        return "antialias=1"
    if attrs.get("exclude_outside", 0):
        return "exclude_outside=1"
    return None


@converter("Resize", check=_resize_check)
def _resize(ctx):
    shape = ctx.shape(0)
    if len(shape) != 4:
        ctx.unsupported(f"{len(shape) - 2}-d")
    axes = [a % 4 for a in ctx.attr("axes", range(4))]
    # Inputs: opset 10 (X, scales); opset 11+ (X, roi, scales, sizes), one of the last two.
    scales_input, sizes_input = (1, None) if ctx.opset < 11 else (2, 3)
    full_scales = [1.0] * 4
    out = list(shape)
    if sizes_input is not None and ctx.has_input(sizes_input) and \
            np.asarray(ctx.static(sizes_input, "sizes")).size:
        sizes = ctx.static_ints(sizes_input, "sizes")
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            ratios = [sizes[k] / shape[a] for k, a in enumerate(axes)]
            r = min(ratios) if policy == "not_larger" else max(ratios)
            sizes = [int(math.floor(shape[a] * r + 0.5)) for a in axes]
        for k, a in enumerate(axes):
            out[a] = sizes[k]
            full_scales[a] = sizes[k] / shape[a]
        exact = True
    else:
        scales = [float(s) for s in np.asarray(ctx.static(scales_input, "scales")).reshape(-1)]
        for k, a in enumerate(axes):
            out[a] = int(math.floor(shape[a] * scales[k]))
            full_scales[a] = scales[k]
        # kiln's resize maps coordinates with out/in; ONNX with the given scale.
        exact = all(abs(out[a] / shape[a] - full_scales[a]) <= 1e-6 * full_scales[a]
                    for a in range(4))
    if out[:2] != list(shape[:2]):
        ctx.unsupported("resizing the batch or channel axis")
    if not exact:
        ctx.unsupported("scales that are not output/input size ratios")
    x = ctx.input(0)
    if tuple(out) == tuple(shape):
        return x
    mode = ctx.attr("mode", "nearest")
    return ctx.op("image.resize2d", x, size=(out[2], out[3]),
                  method="nearest" if mode == "nearest" else "linear",
                  coordinate_transformation_mode=ctx.attr("coordinate_transformation_mode",
                                                          "half_pixel"),
                  rounding_method=ctx.attr("nearest_mode", "round_prefer_floor"))


def _upsample_check(attrs, opset):
    mode = attrs.get("mode", "nearest")
    return None if mode in ("nearest", "linear", "bilinear") else f"mode={mode}"


@converter("Upsample", check=_upsample_check)
def _upsample(ctx):
    shape = ctx.shape(0)
    if len(shape) != 4:
        ctx.unsupported(f"{len(shape) - 2}-d")
    if ctx.opset >= 9:
        scales = [float(s) for s in np.asarray(ctx.static(1, "scales")).reshape(-1)]
    else:
        scales = [float(s) for s in ctx.attr("scales")]
    out = [int(math.floor(d * s)) for d, s in zip(shape, scales)]
    if out[:2] != list(shape[:2]):
        ctx.unsupported("resizing the batch or channel axis")
    if any(abs(o / d - s) > 1e-6 * s for o, d, s in zip(out, shape, scales)):
        ctx.unsupported("scales that are not output/input size ratios")
    mode = ctx.attr("mode", "nearest")
    # Upsample is Resize with asymmetric coordinates; nearest rounds down.
    return ctx.op("image.resize2d", ctx.input(0), size=(out[2], out[3]),
                  method="nearest" if mode == "nearest" else "linear",
                  coordinate_transformation_mode="asymmetric", rounding_method="floor")

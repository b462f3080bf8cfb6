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
    if nspatial not in (1, 2, 3):
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
    y = ctx.op("nn.conv3d" if nspatial == 3 else "nn.conv2d", x, w, strides=tuple(strides),
               dilation=tuple(dilations), padding=tuple(pads), groups=int(ctx.attr("group", 1)))
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
    if nspatial == 3:
        y = _conv_transpose3d(ctx, x, w, strides, dilations, pads, out_pad)
    else:
        y = ctx.op("nn.conv2d_transpose", x, w, strides=tuple(strides), padding=tuple(pads),
                   output_padding=tuple(out_pad), dilation=tuple(dilations),
                   groups=int(ctx.attr("group", 1)))
    if ctx.has_input(2):
        y = ctx.op("nn.bias_add", y, ctx.input(2), axis=1)
    if nspatial == 1:
        y = ctx.op("squeeze", y, axis=(3,))
    return y


def _conv_transpose3d(ctx, x, w, strides, dilations, pads, out_pad):
    """A 3-d transposed convolution as one 2-d transposed convolution per kernel depth kz
    over every input depth i (in the batch axis), whose results land at output depths
    i * stride + kz * dilation - pad and add up."""
    n, _, d, h, wd = ctx.shape(0)
    kd = ctx.shape(1)[2]
    sd, dd = strides[0], dilations[0]
    od = (d - 1) * sd - pads[0] - pads[3] + dd * (kd - 1) + out_pad[0] + 1
    planes = reshape_to(ctx, ctx.op("transpose", x, axes=(0, 2, 1, 3, 4)),
                        (n * d, ctx.shape(0)[1], h, wd))
    total = None
    for kz in range(kd):
        y = ctx.op("nn.conv2d_transpose", planes, ctx.op("take", w, np.array(kz), axis=2),
                   strides=tuple(strides[1:]), padding=(pads[1], pads[2], pads[4], pads[5]),
                   output_padding=tuple(out_pad[1:]), dilation=tuple(dilations[1:]),
                   groups=int(ctx.attr("group", 1)))
        _, o, oh, ow = shape_of(y)
        y = reshape_to(ctx, y, (n, d, 1, o, oh, ow))
        if sd > 1:          # input depth i at i * sd, zeros between
            y = ctx.op("nn.pad", y, pad_width=((0, 0),) * 2 + ((0, sd - 1),) + ((0, 0),) * 3)
        y = reshape_to(ctx, y, (n, d * sd, o, oh, ow))
        shift = kz * dd - pads[0]          # where input depth 0 lands
        before, after = max(shift, 0), max(od - (d * sd + shift), 0)
        y = ctx.op("nn.pad", y, pad_width=((0, 0), (before, after)) + ((0, 0),) * 3)
        start = max(-shift, 0)
        y = ctx.op("strided_slice", y, begin=(start,), end=(start + od,), axes=(1,))
        total = y if total is None else ctx.op("add", total, y)
    return ctx.op("transpose", total, axes=(0, 2, 1, 3, 4))


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
    if nspatial == 3:
        name = name.replace("2d", "3d")
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
    # Imported here: normalization.py imports this module's pooling helpers.
    from .normalization import as_dtype, moments, stash_dtype, stash_type
    shape, dtype = ctx.shape(0), ctx.dtype(0)
    axis = int(ctx.attr("axis", -1))
    if not -len(shape) <= axis < len(shape):
        ctx.error(f"axis {axis} is out of range for an input of rank {len(shape)}")
    axis = axis % len(shape)
    norm_shape = tuple(shape[axis:])
    eps = float(ctx.attr("epsilon", 1e-5))
    wide = stash_dtype(ctx, dtype)
    x = as_dtype(ctx, ctx.input(0), wide)
    gamma = as_dtype(ctx, _to_shape(ctx, ctx.input(1), norm_shape), wide)
    if ctx.has_input(2):
        beta = as_dtype(ctx, _to_shape(ctx, ctx.input(2), norm_shape), wide)
    else:
        beta = np.zeros(norm_shape, dtype=wide)
    if not (ctx.output_used(1) or ctx.output_used(2)):
        # One fused kernel; a float16 input is normalized (and scaled) in the stash type.
        return as_dtype(ctx, ctx.op("nn.layer_norm", x, gamma, beta, axis=axis, epsilon=eps),
                        dtype)
    mean, centered, var = moments(ctx, x, tuple(range(axis, len(shape))))
    inv_std = ctx.op("divide", ctx.scalar(1, x),
                     ctx.op("sqrt", ctx.op("add", var, ctx.scalar(eps, x))))
    y = ctx.op("add", ctx.op("multiply", ctx.op("multiply", centered, inv_std), gamma), beta)
    # Mean and InvStdDev have the stash type (ONNX's type U).
    stats = stash_type(ctx)
    return [as_dtype(ctx, y, dtype), as_dtype(ctx, mean, stats), as_dtype(ctx, inv_std, stats)]


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


def _softmax_op(ctx, name, x, axis):
    """nn.softmax / nn.log_softmax; a float16 Softmax is its ONNX function body instead,
    exp(x - max) / sum(exp(x - max)), whose exp and quotient round to float16 as the
    reference's do (LegalizeFloat16 accumulates the sum in float32 and rounds it once)."""
    if name != "nn.softmax" or dtype_of(x) != "float16":
        return ctx.op(name, x, axis=axis)
    e = ctx.op("exp", ctx.op("subtract", x, ctx.op("max", x, axis=axis, keepdims=True)))
    return ctx.op("divide", e, ctx.op("sum", e, axis=axis, keepdims=True))


@converter("Softmax", "LogSoftmax")
def _softmax(ctx):
    name = "nn.softmax" if ctx.op_type == "Softmax" else "nn.log_softmax"
    shape = ctx.shape(0)
    x = ctx.input(0)
    if ctx.opset >= 13:
        return _softmax_op(ctx, name, x, int(ctx.attr("axis", -1)))
    # Before opset 13 the input is seen as 2-d: [dims before axis] x [dims from axis].
    axis = int(ctx.attr("axis", 1)) % len(shape)
    if axis == len(shape) - 1:
        return _softmax_op(ctx, name, x, -1)
    flat = reshape_to(ctx, x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return reshape_to(ctx, _softmax_op(ctx, name, flat, -1), shape)


# -- resize ----------------------------------------------------------------------------------

_COORD_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                "half_pixel_symmetric", "tf_crop_and_resize")


def _resize_check(attrs, opset):
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        return f"mode={mode}"
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    if coord not in _COORD_MODES:
        return f"coordinate_transformation_mode={coord}"
    return None


def _resize_target(ctx, shape, axes):
    """(output sizes, scales) of every axis: from `sizes` (with keep_aspect_ratio_policy) or
    from `scales`, as ONNX computes them (the scale of a sized axis is out / in, or the one
    kept ratio; a scaled axis has floor(in * scale) entries)."""
    scales_input, sizes_input = (1, None) if ctx.opset < 11 else (2, 3)
    out, scales = list(shape), [1.0] * len(shape)
    if sizes_input is not None and ctx.has_input(sizes_input) and \
            np.asarray(ctx.static(sizes_input, "sizes")).size:
        sizes = ctx.static_ints(sizes_input, "sizes")
        if len(sizes) != len(axes) or min(sizes) < 1:
            ctx.error(f"sizes {sizes} must hold one positive size per axis of {axes}")
        ratios = [sizes[k] / shape[a] for k, a in enumerate(axes)]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy not in ("stretch", "not_larger", "not_smaller"):
            ctx.error(f"unknown keep_aspect_ratio_policy {policy!r}")
        if policy != "stretch":
            # One ratio for every axis; sizes round half up.
            r = min(ratios) if policy == "not_larger" else max(ratios)
            ratios = [r] * len(axes)
            sizes = [int(r * shape[a] + 0.5) for a in axes]
        for k, a in enumerate(axes):
            out[a], scales[a] = sizes[k], ratios[k]
        return out, scales
    given = [float(s) for s in np.asarray(ctx.static(scales_input, "scales")).reshape(-1)]
    if len(given) != len(axes) or min(given) <= 0:
        ctx.error(f"scales {given} must hold one positive scale per axis of {axes}")
    for k, a in enumerate(axes):
        out[a], scales[a] = int(math.floor(shape[a] * given[k])), given[k]
    return out, scales


def _resize_roi(ctx, rank, axes):
    """tf_crop_and_resize's region of interest as (start_h, start_w, end_h, end_w)."""
    roi = [float(v) for v in np.asarray(ctx.static(1, "roi")).reshape(-1)]
    if len(roi) != 2 * len(axes):
        ctx.error(f"roi {roi} must hold a start and an end per axis of {axes}")
    full = [0.0] * rank + [1.0] * rank
    for k, a in enumerate(axes):
        full[a], full[rank + a] = roi[k], roi[len(axes) + k]
    if full[:2] != [0.0, 0.0] or full[rank:rank + 2] != [1.0, 1.0]:
        ctx.unsupported("cropping the batch or channel axis")
    return (full[2], full[3], full[rank + 2], full[rank + 3])


@converter("Resize", check=_resize_check)
def _resize(ctx):
    shape = ctx.shape(0)
    if len(shape) != 4:
        ctx.unsupported(f"{len(shape) - 2}-d")
    axes = [a % 4 for a in ctx.attr("axes", range(4))]
    if len(set(axes)) != len(axes):
        ctx.error(f"axes {ctx.attr('axes')} repeat an axis")
    out, scales = _resize_target(ctx, shape, axes)
    if out[:2] != list(shape[:2]) or scales[:2] != [1.0, 1.0]:
        ctx.unsupported("resizing the batch or channel axis")
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
    roi = _resize_roi(ctx, 4, axes) if coord == "tf_crop_and_resize" else None
    x = ctx.input(0)
    if tuple(out) == tuple(shape) and scales == [1.0] * 4 and roi is None:
        return x
    return ctx.op("image.resize2d", x, size=(out[2], out[3]), scale=(scales[2], scales[3]),
                  method=ctx.attr("mode", "nearest"), coordinate_transformation_mode=coord,
                  rounding_method=ctx.attr("nearest_mode", "round_prefer_floor"),
                  cubic_coeff_a=float(ctx.attr("cubic_coeff_a", -0.75)),
                  exclude_outside=bool(ctx.attr("exclude_outside", 0)),
                  antialias=bool(ctx.attr("antialias", 0)), roi=roi,
                  roi_dtype=ctx.dtype(1) if roi is not None else "float32",
                  extrapolation_value=float(ctx.attr("extrapolation_value", 0.0)))


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
    if len(scales) != 4 or min(scales) <= 0:
        ctx.error(f"scales {scales} must hold one positive scale per axis")
    out = [int(math.floor(d * s)) for d, s in zip(shape, scales)]
    if out[:2] != list(shape[:2]) or scales[:2] != [1.0, 1.0]:
        ctx.unsupported("resizing the batch or channel axis")
    mode = ctx.attr("mode", "nearest")
    # Upsample is Resize with asymmetric coordinates; nearest rounds down.
    return ctx.op("image.resize2d", ctx.input(0), size=(out[2], out[3]),
                  scale=(scales[2], scales[3]),
                  method="nearest" if mode == "nearest" else "linear",
                  coordinate_transformation_mode="asymmetric", rounding_method="floor")

"""Gradient rules of the graph operators, registered into the op registry (the attribute
"gradient", kiln.graph.transform.autodiff). A rule takes the call and the gradient of its output
and returns one gradient per input (None where there is none). Formulas are the usual calculus;
where an op's output appears in its derivative (exp, tanh, sigmoid, softmax) the rule reuses the
call itself rather than computing it again.
"""
from __future__ import annotations

import math

import numpy as np

from ..expr import Tuple, const
from ..op import call
from ..ops.relations import normalize_axes
from .autodiff import (dtype_of, expand_reduced, mask, register_gradient, scalar,
                       shape_of, unbroadcast, unsupported, zeros)


def _mul(a, b):
    return call("multiply", a, b)


def _div(a, b):
    return call("divide", a, b)


def _neg(a):
    return call("negative", a)


# -------------------------------------------------------------------------- elementwise
@register_gradient("add")
def _add(c, g):
    a, b = c.args
    return [unbroadcast(g, a), unbroadcast(g, b)]


@register_gradient("subtract")
def _subtract(c, g):
    a, b = c.args
    return [unbroadcast(g, a), unbroadcast(_neg(g), b)]


@register_gradient("multiply")
def _multiply(c, g):
    a, b = c.args
    return [unbroadcast(_mul(g, b), a), unbroadcast(_mul(g, a), b)]


@register_gradient("divide")
def _divide(c, g):
    a, b = c.args
    # d(a/b)/db = -a/b^2 = -(a/b)/b: the call's own value, divided once more
    return [unbroadcast(_div(g, b), a), unbroadcast(_neg(_div(_mul(g, c), b)), b)]


@register_gradient("negative")
def _negative(c, g):
    return [_neg(g)]


@register_gradient("exp")
def _exp(c, g):
    return [_mul(g, c)]


@register_gradient("log")
def _log(c, g):
    return [_div(g, c.args[0])]


@register_gradient("sqrt")
def _sqrt(c, g):
    return [_div(g, _mul(scalar(2, c), c))]


@register_gradient("rsqrt")
def _rsqrt(c, g):
    # x^(-1/2)' = -1/2 x^(-3/2) = -1/2 y^3
    return [_mul(g, _mul(scalar(-0.5, c), _mul(c, _mul(c, c))))]


@register_gradient("tanh")
def _tanh(c, g):
    return [_mul(g, call("subtract", scalar(1, c), _mul(c, c)))]


@register_gradient("sigmoid")
def _sigmoid(c, g):
    return [_mul(g, _mul(c, call("subtract", scalar(1, c), c)))]


@register_gradient("power")
def _power(c, g):
    x, y = c.args
    dx = _mul(g, _mul(y, call("power", x, call("subtract", y, scalar(1, y)))))
    dy = _mul(g, _mul(c, call("log", x)))
    return [unbroadcast(dx, x), unbroadcast(dy, y)]


@register_gradient("abs")
def _abs(c, g):
    x = c.args[0]
    # sign(x), 0 at 0 (as PyTorch)
    sign = call("subtract", mask(call("greater", x, scalar(0, x)), x),
                mask(call("less", x, scalar(0, x)), x))
    return [_mul(g, sign)]


@register_gradient("nn.relu")
def _relu(c, g):
    x = c.args[0]
    return [_mul(g, mask(call("greater", x, scalar(0, x)), x))]


@register_gradient("nn.leaky_relu")
def _leaky_relu(c, g):
    x = c.args[0]
    return [call("where", call("greater", x, scalar(0, x)), g,
                 _mul(g, scalar(c.attrs.alpha, x)))]


@register_gradient("clip")
def _clip(c, g):
    x = c.args[0]
    inside = call("logical_and", call("greater_equal", x, scalar(c.attrs.a_min, x)),
                  call("less_equal", x, scalar(c.attrs.a_max, x)))
    return [_mul(g, mask(inside, x))]


def _extremum(c, g, compare):
    a, b = c.args
    # the winner takes the gradient; a tie splits it evenly (as PyTorch's maximum / minimum)
    tie = _mul(scalar(0.5, c), mask(call("equal", a, b), c))
    share_a = call("add", mask(call(compare, a, b), c), tie)
    share_b = call("add", mask(call(compare, b, a), c), tie)
    return [unbroadcast(_mul(g, share_a), a), unbroadcast(_mul(g, share_b), b)]


register_gradient("maximum", lambda c, g: _extremum(c, g, "greater"))
register_gradient("minimum", lambda c, g: _extremum(c, g, "less"))


@register_gradient("where")
def _where(c, g):
    cond, a, b = c.args
    zero = scalar(0, c)
    return [None, unbroadcast(call("where", cond, g, zero), a),
            unbroadcast(call("where", cond, zero, g), b)]


@register_gradient("nn.gelu")
def _gelu(c, g):
    x = c.args[0]
    if c.attrs.approximate == "tanh":
        # y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
        k = math.sqrt(2 / math.pi)
        u = _mul(scalar(k, x), call("add", x, _mul(scalar(0.044715, x), _mul(x, _mul(x, x)))))
        t = call("tanh", u)
        du = _mul(scalar(k, x), call("add", scalar(1, x),
                                     _mul(scalar(3 * 0.044715, x), _mul(x, x))))
        d = call("add", _mul(scalar(0.5, x), call("add", scalar(1, x), t)),
                 _mul(_mul(scalar(0.5, x), x),
                      _mul(call("subtract", scalar(1, x), _mul(t, t)), du)))
    else:
        # y = x Phi(x): y' = Phi(x) + x phi(x)
        phi_cdf = _mul(scalar(0.5, x), call("add", scalar(1, x),
                                             call("erf", _mul(x, scalar(1 / math.sqrt(2), x)))))
        pdf = _mul(scalar(1 / math.sqrt(2 * math.pi), x),
                   call("exp", _mul(scalar(-0.5, x), _mul(x, x))))
        d = call("add", phi_cdf, _mul(x, pdf))
    return [_mul(g, d)]


@register_gradient("nn.silu")
def _silu(c, g):
    x = c.args[0]
    s = call("sigmoid", x)
    # (x s)' = s + x s (1 - s)
    return [_mul(g, _mul(s, call("add", scalar(1, x),
                                 _mul(x, call("subtract", scalar(1, x), s)))))]


@register_gradient("erf")
def _erf(c, g):
    x = c.args[0]
    # 2 / sqrt(pi) exp(-x^2)
    return [_mul(g, _mul(scalar(2 / math.sqrt(math.pi), x),
                         call("exp", call("negative", _mul(x, x)))))]


register_gradient("sin", lambda c, g: [_mul(g, call("cos", c.args[0]))])
register_gradient("cos", lambda c, g: [_mul(g, call("negative", call("sin", c.args[0])))])


@register_gradient("nn.hardswish")
def _hardswish(c, g):
    x = c.args[0]
    # x relu6(x + 3) / 6: 0 below -3, x / 3 + 1/2 up to 3 (inclusive, as PyTorch), then 1
    middle = call("add", _mul(x, scalar(1 / 3, x)), scalar(0.5, x))
    d = call("where", call("less", x, scalar(-3, x)), scalar(0, x),
             call("where", call("less_equal", x, scalar(3, x)), middle, scalar(1, x)))
    return [_mul(g, d)]


@register_gradient("nn.hardsigmoid")
def _hardsigmoid(c, g):
    x = c.args[0]
    inside = call("logical_and", call("greater", x, scalar(-3, x)),
                  call("less", x, scalar(3, x)))
    return [_mul(g, _mul(mask(inside, x), scalar(1 / 6, x)))]


@register_gradient("nn.prelu")
def _prelu(c, g):
    x, slope = c.args
    axis = c.attrs.axis % len(shape_of(x))
    # the slope along `axis`, broadcast against x
    shape = [1] * len(shape_of(x))
    shape[axis] = shape_of(slope)[0]
    wide = call("reshape", slope, newshape=tuple(shape))
    positive = call("greater", x, scalar(0, x))
    dx = call("where", positive, g, _mul(g, wide))
    dslope = unbroadcast(call("where", positive, scalar(0, x), _mul(g, x)), wide)
    return [dx, call("reshape", dslope, newshape=shape_of(slope))]


@register_gradient("cast")
def _cast(c, g):
    x = c.args[0]
    return [call("cast", g, dtype=dtype_of(x))]


@register_gradient("copy")
def _copy(c, g):
    return [g]


@register_gradient("stop_gradient")
def _stop_gradient(c, g):
    return [None]


# ------------------------------------------------------------------------- reductions
@register_gradient("sum")
def _sum(c, g):
    x = c.args[0]
    return [expand_reduced(g, x, c.attrs.axis, c.attrs.keepdims)]


@register_gradient("mean")
def _mean(c, g):
    x = c.args[0]
    shape = shape_of(x)
    count = math.prod(shape[a] for a in normalize_axes(c.attrs.axis, len(shape)))
    return [expand_reduced(_mul(g, scalar(1 / count, x)), x, c.attrs.axis, c.attrs.keepdims)]


def _reduced_extremum(c, g):
    """The gradient of a max / min reduction: split evenly between the elements equal to the
    result (as PyTorch's amax / amin)."""
    x = c.args[0]
    axis, keepdims = c.attrs.axis, c.attrs.keepdims
    hit = mask(call("equal", x, expand_reduced(c, x, axis, keepdims)), x)
    count = call("sum", hit, axis=axis, keepdims=keepdims)
    return [_mul(hit, expand_reduced(_div(g, count), x, axis, keepdims))]


register_gradient("max", _reduced_extremum)
register_gradient("min", _reduced_extremum)


# ---------------------------------------------------------------------------- layout
def _reshaped_back(c, g):
    return [call("reshape", g, newshape=shape_of(c.args[0]))]


for _name in ("reshape", "expand_dims", "squeeze"):
    register_gradient(_name, _reshaped_back)


@register_gradient("transpose")
def _transpose(c, g):
    ndim = len(shape_of(c.args[0]))
    axes = c.attrs.axes if c.attrs.axes is not None else tuple(reversed(range(ndim)))
    inverse = [0] * ndim
    for k, a in enumerate(axes):
        inverse[a % ndim] = k
    return [call("transpose", g, axes=tuple(inverse))]


@register_gradient("broadcast_to")
def _broadcast_to(c, g):
    return [unbroadcast(g, c.args[0])]


@register_gradient("concatenate")
def _concatenate(c, g):
    (fields,) = c.args
    axis = c.attrs.axis % len(shape_of(c))
    parts, start = [], 0
    for f in fields.checked_type.fields:
        size = int(f.shape[axis])
        parts.append(call("strided_slice", g, begin=(start,), end=(start + size,),
                          axes=(axis,)))
        start += size
    return [parts]


# --------------------------------------------------------------------------- linear
def _product(a, b, ta: bool = False, tb: bool = False):
    """(a, transposed if ta) @ (b, transposed if tb) of 2-d operands: nn.dense (x @ W^T) for a
    transposed b, nn.matmul otherwise, both of whose schedules pack b into panels as they go
    (a BertLayer's backward: ~80% of peak); a transposed a is copied first, since nn.matmul
    with transpose_a ran at 25-30% of peak. (A b copied transposed for nn.dense cost a kernel
    per product, 7 ms where it fused a GELU.)"""
    left = call("transpose", a) if ta else a
    return call("nn.dense", left, b) if tb else call("nn.matmul", left, b)


@register_gradient("nn.dense")
def _dense(c, g):
    x, w = c.args                      # y = x W^T; x (..., in), W (units, in)
    units, inputs = shape_of(w)
    g2 = call("reshape", g, newshape=(-1, units))
    x2 = call("reshape", x, newshape=(-1, inputs))
    dx = call("reshape", _product(g2, w), newshape=shape_of(x))
    dw = _product(g2, x2, ta=True)
    return [dx, dw]


def _matmul_grads(product, a, b, g, ta: bool, tb: bool):
    """Gradients of a @ b with transposes ta, tb; product(x, y, tx, ty) multiplies."""
    if ta:       # a is stored (K, M): da = (g b^T)^T = b g^T, or b^T g^T with b stored (N, K)
        da = product(b, g, tb, True)
    else:        # da = g b^T
        da = product(g, b, False, not tb)
    if tb:       # b is stored (N, K): db = (a^T g)^T = g^T a
        db = product(g, a, True, ta)
    else:        # db = a^T g
        db = product(a, g, not ta, False)
    return da, db


@register_gradient("nn.matmul")
def _matmul(c, g):
    a, b = c.args
    return list(_matmul_grads(_product, a, b, g, c.attrs.transpose_a, c.attrs.transpose_b))


def _batch_product(x, y, tx, ty):
    return call("nn.batch_matmul", x, y, transpose_a=tx, transpose_b=ty)


@register_gradient("nn.batch_matmul")
def _batch_matmul(c, g):
    a, b = c.args
    da, db = _matmul_grads(_batch_product, a, b, g, c.attrs.transpose_a, c.attrs.transpose_b)
    return [unbroadcast(da, a), unbroadcast(db, b)]      # a batch of 1 was broadcast


@register_gradient("nn.bias_add")
def _bias_add(c, g):
    x, b = c.args
    axis = c.attrs.axis % len(shape_of(x))
    others = tuple(k for k in range(len(shape_of(x))) if k != axis)
    return [g, call("sum", g, axis=others) if others else g]


# ------------------------------------------------------------------- softmax, norms
@register_gradient("nn.softmax")
def _softmax(c, g):
    axis = c.attrs.axis
    gy = _mul(g, c)
    return [call("subtract", gy, _mul(c, call("sum", gy, axis=axis, keepdims=True)))]


@register_gradient("nn.log_softmax")
def _log_softmax(c, g):
    axis = c.attrs.axis
    return [call("subtract", g, _mul(call("exp", c), call("sum", g, axis=axis, keepdims=True)))]


@register_gradient("nn.layer_norm")
def _layer_norm(c, g):
    x, gamma, beta = c.args
    shape = shape_of(x)
    ndim = len(shape)
    # normalized over every axis from `axis` on; gamma and beta have those axes' shape
    start = c.attrs.axis % ndim
    axes = tuple(range(start, ndim))
    eps = scalar(c.attrs.epsilon, x)
    mean = call("mean", x, axis=axes, keepdims=True)
    centered = call("subtract", x, mean)
    rstd = call("rsqrt", call("add", call("mean", _mul(centered, centered), axis=axes,
                                          keepdims=True), eps))
    xhat = _mul(centered, rstd)
    gg = _mul(g, call("reshape", gamma, newshape=(1,) * start + shape[start:]))
    dx = _mul(rstd, call("subtract",
                         call("subtract", gg, call("mean", gg, axis=axes, keepdims=True)),
                         _mul(xhat, call("mean", _mul(gg, xhat), axis=axes, keepdims=True))))
    leading = tuple(range(start))

    def over_leading(t):
        return call("sum", t, axis=leading) if leading else t
    return [dx, over_leading(_mul(g, xhat)), over_leading(g)]


# ----------------------------------------------------------------- convolution, pooling
@register_gradient("nn.conv2d")
def _conv2d(c, g):
    x, w = c.args
    a = c.attrs
    if a.data_layout != "NCHW":     # layout passes run after differentiation, on NCHW graphs
        unsupported(c, f"data_layout {a.data_layout}")
    (sh, sw), (dh, dw), groups = a.strides, a.dilation, a.groups
    pt, pl, pb, pr = a.padding
    n, channels, h, wd = shape_of(x)
    out_channels, per_group, kh, kw = shape_of(w)
    oh, ow = shape_of(c)[2:]
    full = (dh * (kh - 1) - pt, dw * (kw - 1) - pl, dh * (kh - 1) - pb, dw * (kw - 1) - pr)
    og, cg = out_channels // groups, per_group

    def swapped():          # the kernel, its channel axes swapped within each group
        return call("reshape", call("transpose", call("reshape", w, newshape=(
            groups, og, cg, kh, kw)), axes=(0, 2, 1, 3, 4)), newshape=(channels, og, kh, kw))
    if (sh, sw) == (1, 1) and min(full) >= 0:
        # dx: the "full" convolution of g by the flipped, swapped kernel: a plain conv2d,
        # which kiln's blocked schedules run at 40-70% of peak where conv2d_transpose's ran at
        # 10-40% (ResNet-18's backward)
        dx = call("nn.conv2d", g, _flip(swapped()), padding=full, dilation=(dh, dw),
                  groups=groups)
    elif (dh, dw) == (1, 1):
        dx = _strided_input_gradient(g, swapped(), (h, wd), (sh, sw), (pt, pl), groups)
    else:
        # dx: the transposed convolution, its output padded to x's size (the rows and columns
        # the forward stride skipped at the end)
        rows = (oh - 1) * sh - pt - pb + dh * (kh - 1) + 1
        cols = (ow - 1) * sw - pl - pr + dw * (kw - 1) + 1
        dx = call("nn.conv2d_transpose", g, w, strides=(sh, sw), padding=(pt, pl, pb, pr),
                  output_padding=(h - rows, wd - cols), dilation=(dh, dw), groups=groups)
    if groups == 1:
        return [dx, _conv2d_weight_by_taps(c, g)]
    # dw: a convolution of x by g with the images as channels and the channels as images,
    # stride and dilation swapped, each group apart; then cut to the kernel's size
    og = out_channels // groups
    xr = call("reshape", call("transpose", call("reshape", x, newshape=(n, groups, per_group,
                                                                        h, wd)),
                              axes=(2, 1, 0, 3, 4)),
              newshape=(per_group, groups * n, h, wd))
    gr = call("reshape", call("transpose", call("reshape", g, newshape=(n, groups, og, oh, ow)),
                              axes=(1, 2, 0, 3, 4)),
              newshape=(out_channels, n, oh, ow))
    dw_full = call("nn.conv2d", xr, gr, strides=(dh, dw), padding=(pt, pl, pb, pr),
                   dilation=(sh, sw), groups=groups)
    dw_ = call("strided_slice", call("transpose", dw_full, axes=(1, 0, 2, 3)),
               begin=(0, 0), end=(kh, kw), axes=(2, 3))
    return [dx, dw_]


@register_gradient("nn.conv2d_transpose")
def _conv2d_transpose(c, g):
    x, w = c.args
    a = c.attrs
    # y = conv2d_transpose(x, w) is the input gradient of a conv2d by w (IOHW read as OIHW):
    # its adjoint is that conv2d, of g; the output padding's extra rows are what the conv2d's
    # stride skips
    if a.groups != 1:
        unsupported(c, f"groups {a.groups} (the weight's gradient)")
    if any(op >= s for op, s in zip(a.output_padding, a.strides)):
        unsupported(c, f"output_padding {tuple(a.output_padding)} not below the strides "
                       f"{tuple(a.strides)}")
    conv = call("nn.conv2d", g, w, strides=a.strides, padding=a.padding, dilation=a.dilation,
                groups=a.groups)
    # dw: the weight gradient of that conv2d, with x as the gradient of its output
    return [conv, _conv2d_weight_by_taps(conv, x)]


def _flip(kernel):
    """A (C, O, KH, KW) kernel reversed along both spatial axes."""
    kh, kw = shape_of(kernel)[2:]
    return call("strided_slice", kernel, begin=(kh - 1, kw - 1), end=(-kh - 1, -kw - 1),
                strides=(-1, -1), axes=(2, 3))


def _phases(size: int, out: int, stride: int, before: int, kernel: int) -> list:
    """Along one axis of a strided convolution's input (`size` long; `out` outputs, padding
    `before`): for each phase c (the positions c, c + stride, ...) the kernel taps reaching it
    (first, count) and the (before, after) padding of g that makes a stride-1 correlation of g
    by those taps, reversed, give ceil(size / stride) values of the phase."""
    length = -(-size // stride)
    phases = []
    for c in range(stride):
        first = (c + before) % stride
        count = len(range(first, kernel, stride))
        lead = count - 1 - (c + before) // stride
        phases.append((first, count, lead, length - out - lead + count - 1))
    return phases


def _strided_input_gradient(g, swapped, size: tuple, strides: tuple, before: tuple,
                            groups: int):
    """dx of a strided, undilated convolution as stride_h x stride_w stride-1 convolutions of
    g, one per phase of dx's rows and columns, each by the kernel taps that reach that phase,
    interleaved (ResNet-18's stride-2 input gradients: convolutions by 1x1 to 2x2 kernels,
    which kiln runs blocked, where conv2d_transpose ran at 10-20% of peak)."""
    n, _, oh, ow = shape_of(g)
    channels, _, kh, kw = shape_of(swapped)
    rows = _phases(size[0], oh, strides[0], before[0], kh)
    cols = _phases(size[1], ow, strides[1], before[1], kw)
    length = (-(-size[0] // strides[0]), -(-size[1] // strides[1]))
    grid = []
    for rh, mh, lead_h, tail_h in rows:
        grid.append([])
        for rw, mw, lead_w, tail_w in cols:
            pads = [lead_h, lead_w, tail_h, tail_w]
            # negative padding: rows of g no output of the phase reads
            begin = (max(0, -lead_h), max(0, -lead_w))
            end = (oh - max(0, -tail_h), ow - max(0, -tail_w))
            if mh == 0 or mw == 0 or end[0] <= begin[0] or end[1] <= begin[1]:
                # no tap reaches these positions, or none reads a row of g (a padding wider
                # than the kernel around a small input)
                phase = call("broadcast_to", scalar(0, g), shape=(n, channels, *length))
            else:
                taps = call("strided_slice", swapped, begin=(rh, rw), end=(kh, kw),
                            strides=strides, axes=(2, 3))
                cut = call("strided_slice", g, begin=begin, end=end, axes=(2, 3)) \
                    if min(pads) < 0 else g
                phase = call("nn.conv2d", cut, _flip(taps),
                             padding=tuple(max(0, p) for p in pads), groups=groups)
            grid[-1].append(phase)
    dx = _interleave(grid)
    if (length[0] * strides[0], length[1] * strides[1]) != size:
        dx = call("strided_slice", dx, begin=(0, 0), end=size, axes=(2, 3))
    return dx


def _interleave(grid):
    """The (N, C, U * SH, V * SW) tensor whose rows r::SH and columns c::SW are grid[r][c],
    each (N, C, U, V)."""
    n, channels, u, v = shape_of(grid[0][0])
    sh, sw = len(grid), len(grid[0])
    band = []
    for row in grid:
        # (N, C, U, V, SW) -> (N, C, U, V * SW): the columns interleaved
        joined = call("reshape", call("concatenate", Tuple([call("expand_dims", p, axis=4)
                                                            for p in row]), axis=4),
                      newshape=(n, channels, u, v * sw))
        band.append(call("expand_dims", joined, axis=3))
    return call("reshape", call("concatenate", Tuple(band), axis=3),
                newshape=(n, channels, u * sh, v * sw))


def _frame(out: int, stride: int, dilation: int, kernel: int) -> int:
    """Rows (or columns) of the padded input that `out` windows span."""
    return (out - 1) * stride + dilation * (kernel - 1) + 1


def _tap_read(padded, i: int, j: int, out: tuple, strides: tuple, dilation: tuple):
    """What kernel tap (i, j) reads at every output position: (N, C, OH, OW) of `padded`."""
    (oh, ow), (sh, sw), (dh, dw) = out, strides, dilation
    return call("strided_slice", padded, begin=(i * dh, j * dw),
                end=(i * dh + (oh - 1) * sh + 1, j * dw + (ow - 1) * sw + 1),
                strides=(sh, sw), axes=(2, 3))


def _conv2d_weight_by_taps(c, g):
    """dw of an ungrouped NCHW conv2d as one matrix product: the input rows every kernel tap
    read (C*KH*KW x N*OH*OW, each channel's tap reads together) times g (N*OH*OW x O), a
    dense product, which kiln runs near peak where the equivalent convolution
    (images as channels, a kernel the size of the output) ran at ~20% of peak in ResNet-18's
    backward. (One product per tap left each product a narrow C x O block: 19% of peak for
    the 7x7 stem's 3 channels.)"""
    x, w = c.args
    a = c.attrs
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a.strides, a.dilation, a.padding
    n, channels, h, wd = shape_of(x)
    out_channels, _, kh, kw = shape_of(w)
    oh, ow = shape_of(c)[2:]
    positions = n * oh * ow

    def rows_of(t, count):          # (N, count, OH, OW) -> (count, N*OH*OW)
        return call("reshape", call("transpose", t, axes=(1, 0, 2, 3)),
                    newshape=(count, positions))
    padded = call("nn.pad", x, pad_width=((0, 0), (0, 0), (pt, pb), (pl, pr))) \
        if any((pt, pl, pb, pr)) else x
    reads = [call("expand_dims", rows_of(_tap_read(padded, i, j, (oh, ow), (sh, sw),
                                                   (dh, dw)), channels), axis=1)
             for i in range(kh) for j in range(kw)]
    # (C, KH*KW, N*OH*OW): each channel's taps together, so that the product's transpose
    # below is dw's own order
    stacked = reads[0] if len(reads) == 1 else call("concatenate", Tuple(reads), axis=1)
    columns = call("reshape", stacked, newshape=(channels * kh * kw, positions))
    # (C*KH*KW, O): with the long side first, kiln's dense runs ResNet-18's at 80% of peak,
    # the other way round at 25%; then one 2-d transpose
    product = call("nn.dense", columns, rows_of(g, out_channels))
    return call("reshape", call("transpose", product),
                newshape=(out_channels, channels, kh, kw))


def _spread_mean(c, g):
    """Gradient of an average over each channel's whole image: spread evenly."""
    x = c.args[0]
    n, ch, h, w = shape_of(x)
    return [call("broadcast_to", _mul(g, scalar(1 / (h * w), x)), shape=(n, ch, h, w))]


@register_gradient("nn.global_avg_pool2d")
def _global_avg_pool2d(c, g):
    if c.attrs.layout != "NCHW":
        unsupported(c, f"layout {c.attrs.layout}")
    return _spread_mean(c, g)


@register_gradient("nn.adaptive_avg_pool2d")
def _adaptive_avg_pool2d(c, g):
    if c.attrs.layout != "NCHW" or tuple(shape_of(c)[2:]) != (1, 1):
        unsupported(c, f"output size {shape_of(c)[2:]} in {c.attrs.layout} (only 1x1, NCHW)")
    return _spread_mean(c, g)


@register_gradient("nn.batch_norm")
def _batch_norm(c, g):
    # the inference form: y = (x - mean) rstd gamma + beta with the given statistics
    x, gamma, beta, mean, var_ = c.args
    ndim = len(shape_of(x))
    axis = c.attrs.axis % ndim
    along = tuple(shape_of(x)[k] if k == axis else 1 for k in range(ndim))
    others = tuple(k for k in range(ndim) if k != axis)
    rstd = call("rsqrt", call("add", var_, scalar(c.attrs.epsilon, var_)))
    xhat = _mul(call("subtract", x, call("reshape", mean, newshape=along)),
                call("reshape", rstd, newshape=along))
    scale = _mul(gamma, rstd)
    dx = _mul(g, call("reshape", scale, newshape=along))
    dgamma = call("sum", _mul(g, xhat), axis=others)
    dmean = _neg(_mul(call("sum", g, axis=others), scale))
    # d rstd / d var = -rstd^3 / 2, so d y / d var = -(x - mean) gamma rstd^3 / 2
    dvar = _mul(dgamma, _mul(scalar(-0.5, x), _mul(gamma, _mul(rstd, rstd))))
    return [dx, dgamma, call("sum", g, axis=others), dmean, dvar]


@register_gradient("nn.pad")
def _pad(c, g):
    if c.attrs.pad_mode != "constant":
        unsupported(c, f"pad_mode {c.attrs.pad_mode}")
    shape = shape_of(c.args[0])
    begin = tuple(int(before) for before, _ in c.attrs.pad_width)
    return [call("strided_slice", g, begin=begin,
                 end=tuple(b + d for b, d in zip(begin, shape)))]


@register_gradient("strided_slice")
def _strided_slice(c, g):
    x = c.args[0]
    shape = shape_of(x)
    a = c.attrs
    axes = tuple(a.axes) if a.axes is not None else tuple(range(len(a.begin)))
    strides = tuple(a.strides) if a.strides is not None else (1,) * len(axes)
    if any(s < 0 for s in strides):
        unsupported(c, f"strides {strides} (a reversed slice)")
    widths = [[0, 0] for _ in shape]
    for axis, begin, end, step in zip(axes, a.begin, a.end, strides):
        axis %= len(shape)
        start, _, _ = slice(begin, end, step).indices(shape[axis])
        taken = shape_of(g)[axis]
        if step > 1 and taken > 1:      # zeros between the elements the slice took
            g = _spread(g, axis, step)
        span = (taken - 1) * step + 1 if taken else 0
        widths[axis] = [start if taken else 0, shape[axis] - (start + span if taken else 0)]
    return [call("nn.pad", g, pad_width=tuple(map(tuple, widths)))]


def _spread(g, axis: int, step: int):
    """g with step - 1 zeros after each element along `axis` but the last."""
    shape = shape_of(g)
    one = call("expand_dims", g, axis=axis + 1)
    gap = call("broadcast_to", scalar(0, g), shape=shape_of(one))
    joined = call("concatenate", Tuple([one] + [gap] * (step - 1)), axis=axis + 1)
    wide = list(shape)
    wide[axis] = shape[axis] * step
    spread = call("reshape", joined, newshape=tuple(wide))
    return call("strided_slice", spread, begin=(0,), end=((shape[axis] - 1) * step + 1,),
                axes=(axis,))


@register_gradient("split")
def _split(c, g):
    # g: one gradient per part (None for a part nothing used): the parts' gradients side by
    # side, zeros for the missing ones
    parts = [gp if gp is not None else zeros(t) for gp, t in zip(g, c.checked_type.fields)]
    return [call("concatenate", Tuple(parts), axis=c.attrs.axis)]


@register_gradient("tile")
def _tile(c, g):
    x = c.args[0]
    shape = shape_of(x)
    reps = tuple(c.attrs.reps)
    ndim = max(len(shape), len(reps))
    dims = (1,) * (ndim - len(shape)) + shape
    reps = (1,) * (ndim - len(reps)) + reps
    # (r0, d0, r1, d1, ...): each copy's gradient apart, then summed over the copies
    split = call("reshape", g, newshape=tuple(v for r, d in zip(reps, dims) for v in (r, d)))
    summed = call("sum", split, axis=tuple(range(0, 2 * ndim, 2)))
    return [call("reshape", summed, newshape=shape)]


# ------------------------------------------------------------------------------ indexing
@register_gradient("take")
def _take(c, g):
    data, indices = c.args
    if c.attrs.axis is None or c.attrs.axis % len(shape_of(data)) != 0:
        unsupported(c, f"axis {c.attrs.axis} (only axis 0, as embeddings take)")
    rows, table = math.prod(shape_of(indices)), shape_of(data)
    # the row each index read, as the forward op finds it: negative ones count from the end,
    # out-of-range ones clip or wrap
    n = scalar(table[0], indices)
    if c.attrs.mode == "wrap":
        indices = call("floor_mod", indices, n)
    else:
        indices = call("where", call("less", indices, scalar(0, indices)),
                       call("add", indices, n), indices)
        indices = call("minimum", call("maximum", indices, scalar(0, indices)),
                       scalar(table[0] - 1, indices))
    # Every looked-up row adds its gradient to the row it came from (repeats add up): an
    # index_add into zeros, which compares each index once per table row and adds whole rows
    # (BERT-base's 30522 x 768 table: 14 ms, where a product with the one-hot matrix of the
    # indices took 250 ms)
    updates = call("reshape", g, newshape=(rows, *table[1:]))
    return [call("index_add", zeros(data.checked_type),
                 call("reshape", indices, newshape=(rows,)), updates, axis=0), None]


@register_gradient("gather")
def _gather(c, g):
    data, indices = c.args
    return [call("scatter_elements", zeros(data.checked_type), indices, g, axis=c.attrs.axis,
                 reduction="add"), None]


def _pool_geometry(c):
    a = c.attrs
    if a.layout != "NCHW":
        unsupported(c, f"layout {a.layout}")
    x = c.args[0]
    n, ch, h, w = shape_of(x)
    oh, ow = shape_of(c)[2:]
    kh, kw = a.pool_size
    return x, (n, ch, h, w), (oh, ow), (kh, kw), tuple(a.strides), tuple(a.dilation), \
        tuple(a.padding)


def _scatter_windows(per_tap, x, geometry):
    """Each output position's gradient per window tap (`per_tap`: one (N, C, OH, OW) tensor
    per tap, in scan order) added back to the input element the tap read, in the padded
    input's frame, cut to x. Phase by phase of the frame's rows and columns (stride_h x
    stride_w of them): each phase is a sum of the taps that land on it, shifted by padding,
    then the phases are interleaved; elementwise work kiln fuses, where a transposed
    convolution by one-hot kernels ran at 4% of peak (ResNet-18's max pool)."""
    _, (n, ch, h, w), (oh, ow), (kh, kw), (sh, sw), (dh, dw), (pt, pl, _, _) = geometry
    rows, cols = _frame(oh, sh, dh, kh), _frame(ow, sw, dw, kw)
    length = (-(-rows // sh), -(-cols // sw))
    landed = {}                     # phase (row, column) -> what lands on it
    for k, tap in enumerate(per_tap):
        (qh, rh), (qw, rw) = divmod(k // kw * dh, sh), divmod(k % kw * dw, sw)
        placed = call("nn.pad", tap, pad_width=((0, 0), (0, 0), (qh, length[0] - oh - qh),
                                                (qw, length[1] - ow - qw)))
        have = landed.get((rh, rw))
        landed[(rh, rw)] = placed if have is None else call("add", have, placed)
    nothing = call("broadcast_to", scalar(0, x), shape=(n, ch, *length))
    frame = _interleave([[landed.get((rh, rw), nothing) for rw in range(sw)]
                         for rh in range(sh)])
    have = (length[0] * sh, length[1] * sw)
    short_r, short_c = max(pt + h - have[0], 0), max(pl + w - have[1], 0)
    if short_r or short_c:         # the last rows / columns no window reached
        frame = call("nn.pad", frame, pad_width=((0, 0), (0, 0), (0, short_r), (0, short_c)))
    return call("strided_slice", frame, begin=(pt, pl), end=(pt + h, pl + w), axes=(2, 3))


def _window_taps(x, geometry):
    """The value each window tap reads, per tap: a list of (N, C, OH, OW) tensors, in the
    forward op's scan order (rows, then columns), from x padded with -inf."""
    _, (n, ch, h, w), (oh, ow), (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = geometry
    rows, cols = _frame(oh, sh, dh, kh), _frame(ow, sw, dw, kw)
    padded = call("nn.pad", x, pad_value=float("-inf"),
                  pad_width=((0, 0), (0, 0), (pt, max(rows - pt - h, 0)),
                             (pl, max(cols - pl - w, 0))))
    return [_tap_read(padded, i, j, (oh, ow), (sh, sw), (dh, dw))
            for i in range(kh) for j in range(kw)]


@register_gradient("nn.max_pool2d")
def _max_pool2d(c, g):
    # Each window's gradient goes to its maximum, the first in scan order on ties (as
    # PyTorch's max_pool2d backward does), found by an argmax over the stacked taps (a
    # reduction, so a kernel of its own): each tap's gradient then reads one index, where a
    # chain of comparisons with every earlier tap, fused into the scatter, ran at 27 ms for
    # ResNet-18's pool (batch 8).
    geometry = _pool_geometry(c)
    x = geometry[0]
    taps = _window_taps(x, geometry)
    stacked = call("concatenate", Tuple([call("expand_dims", t, axis=4) for t in taps]),
                   axis=4) if len(taps) > 1 else call("expand_dims", taps[0], axis=4)
    first = call("argmax", stacked, axis=4)
    per_tap = [_mul(g, mask(call("equal", first, const(np.int64(k))), x))
               for k in range(len(taps))]
    return [_scatter_windows(per_tap, x, geometry)]


@register_gradient("nn.avg_pool2d")
def _avg_pool2d(c, g):
    geometry = _pool_geometry(c)
    x, (n, ch, h, w), (oh, ow), (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = geometry
    # the forward op's divisor (kiln/topi/nn/pooling.py): taps inside the padded input, or
    # inside the input itself
    lo_h, hi_h = (-pt, h + pb) if c.attrs.count_include_pad else (0, h)
    lo_w, hi_w = (-pl, w + pr) if c.attrs.count_include_pad else (0, w)

    def taps(start, k, d, lo, hi):
        return sum(lo <= start + r * d < hi for r in range(k))
    divisor = np.array([[max(taps(y * sh - pt, kh, dh, lo_h, hi_h)
                             * taps(xx * sw - pl, kw, dw, lo_w, hi_w), 1)
                         for xx in range(ow)] for y in range(oh)], dtype_of(x))
    share = _div(g, const(divisor))
    return [_scatter_windows([share] * (kh * kw), x, geometry)]

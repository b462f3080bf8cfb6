"""2-D pooling computes (NCHW): windowed max/avg, global and adaptive pooling.

Window pooling follows torch.nn.functional.{max,avg}_pool2d (and ONNX MaxPool/AveragePool
with asymmetric pads): output length floor((H + pt + pb - d*(k-1) - 1) / s) + 1, or with
ceil_mode the ceiling, minus one when the last window would start past the input and the
top/left padding. Padding is its own injective stage (-inf for max, 0 for avg). The average
divides by the number of window taps inside the padded input (count_include_pad) or inside
the input itself (closed-form counts per output index), in a separate elementwise stage.

Every pool also takes `layout`: "NCHW" (default) or the blocked "NCHW{b}c" of
kiln/topi/nn/conv2d_nchwc.py ([N, C/b, H, W, b]); H and W are axes 2 and 3 in both, and the
inner channel axis just rides along (the result is in the same layout).

Adaptive pooling uses PyTorch's windows: start = floor(i * H / out), end = ceil((i+1) * H / out);
the reduction runs over the largest window with a condition.
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..utils import TopiError, get_const_int, get_const_tuple, is_const_int
from .conv2d import get_pad_tuple, pad_spatial, positive_pair

POOL_TYPES = ("max", "avg")


def _check(data, pool_type, op, layout="NCHW"):
    """The channel block of `layout` (0 for NCHW), after checking data against it."""
    from .conv2d_nchwc import parse_channel_layout
    try:
        block = parse_channel_layout(layout)
    except TopiError:
        raise TopiError(f"{op}: layout must be 'NCHW' or 'NCHW<b>c', got {layout!r}") from None
    if not block and data.ndim != 4:
        raise TopiError(f"{op}: data must be 4-D NCHW, got shape {tuple(data.shape)}")
    if block and (data.ndim != 5 or get_const_tuple(data.shape)[4] != block):
        raise TopiError(f"{op}: data must be 5-D {layout} (last axis {block}), got shape "
                        f"{tuple(data.shape)}")
    if pool_type not in POOL_TYPES:
        raise TopiError(f"{op}: pool_type must be 'max' or 'avg', got {pool_type!r}")
    return block


def pool_out_size(size, kernel, stride, dilation, pad_before, pad_after, ceil_mode):
    """Output length of a pooling window along one axis (PyTorch's rule).

    Example:
        >>> pool_out_size(5, 2, 2, 1, 0, 0, ceil_mode=True)
        3
    """
    span = size + pad_before + pad_after - dilation * (kernel - 1) - 1
    if span < 0:
        raise TopiError(f"pool2d: the window ({kernel}, dilation {dilation}) is larger than the "
                        f"padded input ({size} + {pad_before} + {pad_after})")
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad_before:
        out -= 1
    return out


def _ceil_div(a, b):
    return (a + (b - 1)) // b


def _tap_count(start, kernel, dilation, lo, hi):
    """Number of r in [0, kernel) with lo <= start + r*dilation < hi (start an expression)."""
    first = te.max(_ceil_div(lo - start, dilation), 0)
    last = te.min(_ceil_div(hi - start, dilation), kernel)
    return te.max(last - first, 0)


def pool2d(data, kernel, strides=None, padding=0, dilation=1, pool_type="max",
           ceil_mode=False, count_include_pad=True, layout="NCHW"):
    """Max or average pooling over H and W of an NCHW (or blocked NCHW{b}c) tensor; `padding`
    is an int, (ph, pw) or (top, left, bottom, right); `strides` defaults to the kernel size.
    The window reduction is tagged "pool"; the average's division is an elementwise stage
    after it.

    Example:
        >>> y = pool2d(x, 3, 2, 1, pool_type="max")  # doctest: +SKIP
    """
    op = "pool2d"
    _check(data, pool_type, op, layout)
    kh, kw = positive_pair(kernel, "kernel", op)
    sh, sw = positive_pair(kernel if strides is None else strides, "strides", op)
    dh, dw = positive_pair(dilation, "dilation", op)
    top, left, bottom, right = get_pad_tuple(padding, op=op)
    n, c, h, w = get_const_tuple(data.shape)[:4]
    inner = tuple(data.shape[4:])
    if not all(is_const_int(v) for v in (h, w)):
        raise TopiError(f"{op}: needs constant H and W, got {h} x {w}")
    oh = pool_out_size(h, kh, sh, dh, top, bottom, ceil_mode)
    ow = pool_out_size(w, kw, sw, dw, left, right, ceil_mode)
    # ceil_mode windows may run past the bottom/right padding: pad far enough for them.
    extra_b = max(0, (oh - 1) * sh + dh * (kh - 1) + 1 - (h + top + bottom))
    extra_r = max(0, (ow - 1) * sw + dw * (kw - 1) + 1 - (w + left + right))
    fill = te.min_value(data.dtype) if pool_type == "max" else te.const(0, data.dtype)
    pad = pad_spatial(data, (top, left, bottom + extra_b, right + extra_r), "NCHW",
                      value=fill.value, name="pool_pad")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    attrs = {"pool_type": pool_type, "kernel": (kh, kw), "strides": (sh, sw),
             "padding": (top, left, bottom, right), "dilation": (dh, dw),
             "ceil_mode": bool(ceil_mode), "count_include_pad": bool(count_include_pad),
             "layout": layout}
    shape = (n, c, oh, ow) + inner

    # Index functions take *idx: te.compute names the axes of a varargs function itself,
    # and the blocked layout has a fifth (inner channel) axis that only rides along.
    def window(idx):
        b, ch, y, x = idx[:4]
        return pad[(b, ch, y * sh + ry * dh, x * sw + rx * dw) + tuple(idx[4:])]

    if pool_type == "max":
        return te.compute(shape, lambda *idx: te.max(window(idx), axis=[ry, rx]),
                          name="pool_max", tag=tags.POOL, attrs=attrs)
    total = te.compute(shape, lambda *idx: te.sum(window(idx), axis=[ry, rx]),
                       name="pool_sum", tag=tags.POOL, attrs=attrs)
    lo_h, hi_h = (-top, h + bottom) if count_include_pad else (0, h)
    lo_w, hi_w = (-left, w + right) if count_include_pad else (0, w)

    def average(*idx):
        y, x = idx[2], idx[3]
        count = (_tap_count(y * sh - top, kh, dh, lo_h, hi_h)
                 * _tap_count(x * sw - left, kw, dw, lo_w, hi_w))
        return total[idx] / te.cast(te.max(count, 1), data.dtype)

    return te.compute(shape, average, name="pool_avg", tag=tags.ELEMWISE)


def max_pool2d(data, kernel, strides=None, padding=0, dilation=1, ceil_mode=False,
               layout="NCHW"):
    """pool2d with pool_type="max" (torch.nn.functional.max_pool2d).

    Example:
        >>> y = max_pool2d(x, 2)  # doctest: +SKIP
    """
    return pool2d(data, kernel, strides, padding, dilation, "max", ceil_mode, layout=layout)


def avg_pool2d(data, kernel, strides=None, padding=0, ceil_mode=False, count_include_pad=True,
               dilation=1, layout="NCHW"):
    """pool2d with pool_type="avg" (torch.nn.functional.avg_pool2d).

    Example:
        >>> y = avg_pool2d(x, 3, 1, 1, count_include_pad=False)  # doctest: +SKIP
    """
    return pool2d(data, kernel, strides, padding, dilation, "avg", ceil_mode, count_include_pad,
                  layout)


def _adaptive_bounds(i, in_size, out_size):
    start = (i * in_size) // out_size
    end = (i * in_size + in_size + out_size - 1) // out_size
    return start, end


def _max_window(in_size, out_size) -> int:
    return max(_adaptive_bounds(i, in_size, out_size)[1] - _adaptive_bounds(i, in_size, out_size)[0]
               for i in range(out_size))


def adaptive_pool2d(data, output_size, pool_type="avg", layout="NCHW"):
    """Adaptive max/avg pooling of an NCHW (or blocked NCHW{b}c) tensor to `output_size` (int
    or (oh, ow); None in a position keeps the input size), with PyTorch's window formula.
    Tagged "adaptive_pool"; the average's division is an elementwise stage after the sum.

    Example:
        >>> y = adaptive_pool2d(x, (7, 7), "avg")  # doctest: +SKIP
    """
    op = "adaptive_pool2d"
    _check(data, pool_type, op, layout)
    n, c, h, w = get_const_tuple(data.shape)[:4]
    inner = tuple(data.shape[4:])
    if not all(is_const_int(v) for v in (h, w)):
        raise TopiError(f"{op}: needs constant H and W, got {h} x {w}")
    if isinstance(output_size, (list, tuple)):
        if len(output_size) != 2:
            raise TopiError(f"{op}: output_size must be an int or a pair, got {output_size!r}")
        oh, ow = output_size
    else:
        oh = ow = output_size
    oh = h if oh is None else get_const_int(oh, f"{op} output_size")
    ow = w if ow is None else get_const_int(ow, f"{op} output_size")
    if oh < 1 or ow < 1:
        raise TopiError(f"{op}: output_size must be positive, got {(oh, ow)}")
    kh, kw = _max_window(h, oh), _max_window(w, ow)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    exact_h, exact_w = h % oh == 0, w % ow == 0

    def bounds(y, x):
        (y0, y1), (x0, x1) = _adaptive_bounds(y, h, oh), _adaptive_bounds(x, w, ow)
        return y0, y1, x0, x1

    def where(y, x):
        y0, y1, x0, x1 = bounds(y, x)
        conds = ([] if exact_h else [y0 + ry < y1]) + ([] if exact_w else [x0 + rx < x1])
        return te.all(*conds) if conds else None

    attrs = {"pool_type": pool_type, "output_size": (oh, ow), "layout": layout}
    reducer = te.max if pool_type == "max" else te.sum
    shape = (n, c, oh, ow) + inner

    def fcompute(*idx):
        b, ch, y, x = idx[:4]
        y0, _, x0, _ = bounds(y, x)
        return reducer(data[(b, ch, y0 + ry, x0 + rx) + tuple(idx[4:])], axis=[ry, rx],
                       where=where(y, x))

    name = "adaptive_pool_max" if pool_type == "max" else "adaptive_pool_sum"
    total = te.compute(shape, fcompute, name=name, tag=tags.ADAPTIVE_POOL, attrs=attrs)
    if pool_type == "max":
        return total

    def average(*idx):
        y0, y1, x0, x1 = bounds(idx[2], idx[3])
        return total[idx] / te.cast((y1 - y0) * (x1 - x0), data.dtype)

    return te.compute(shape, average, name="adaptive_pool_avg", tag=tags.ELEMWISE)


def global_pool2d(data, pool_type="avg", layout="NCHW"):
    """Global max/avg pooling over H and W: (N, C, H, W) -> (N, C, 1, 1), or blocked
    (N, C/b, H, W, b) -> (N, C/b, 1, 1, b); adaptive_pool2d with output size 1.

    Example:
        >>> y = global_pool2d(x, "max")  # doctest: +SKIP
    """
    return adaptive_pool2d(data, (1, 1), pool_type, layout)

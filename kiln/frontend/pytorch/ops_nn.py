"""Converters of ATen neural-network ops: convolutions, dense/matmul, pooling, norms, softmax,
resize, embedding, attention."""
from __future__ import annotations

import math

import numpy as np

from ...graph import Call, Expr, const, get_op
from .registry import Unsupported, converter


def _pair(v, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    return v * 2 if len(v) == 1 else v


def _pad4(p):
    ph, pw = _pair(p, (0, 0))
    return (ph, pw, ph, pw)


def _add_bias(n, y, bias, axis):
    if bias is None:
        return y
    return n.call("nn.bias_add", y, bias, axis=axis)


# --- convolutions ----------------------------------------------------------------------------

def _conv2d(n, x, w, bias, stride, padding, dilation, groups):
    stride, dilation = _pair(stride, (1, 1)), _pair(dilation, (1, 1))
    if isinstance(padding, str):
        (top, bottom), (left, right) = _string_padding(padding, w.checked_type.shape[2:],
                                                       dilation, stride)
        padding = (top, left, bottom, right)
    else:
        padding = _pad4(padding)
    y = n.call("nn.conv2d", x, w, strides=stride, padding=padding, dilation=dilation,
               groups=int(groups))
    return _add_bias(n, y, bias, 1)


def _string_padding(mode, kernel, dilation, stride):
    """padding="same"/"valid" as (before, after) per spatial dimension."""
    if mode == "valid":
        return [(0, 0)] * len(kernel)
    if mode != "same":
        raise Unsupported(f"padding={mode!r}")
    if any(s != 1 for s in stride):
        raise Unsupported("padding='same' with strides")
    # torch pads the odd element at the end (bottom/right).
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return [(t // 2, t - t // 2) for t in totals]


def _first(v, default):
    """The value of a 1-d conv's stride/padding/dilation (an int or a one-element list)."""
    return _pair(v, (default, default))[0]


def _conv1d(n, x, w, bias, stride, padding, dilation, groups):
    # A 1-d convolution is a 2-d one over a height of 1.
    s, d = _first(stride, 1), _first(dilation, 1)
    if isinstance(padding, str):
        [(lo, hi)] = _string_padding(padding, w.checked_type.shape[2:], (d,), (s,))
    else:
        lo = hi = _first(padding, 0)
    y = n.call("nn.conv2d", n.call("expand_dims", x, axis=2), n.call("expand_dims", w, axis=2),
               strides=(1, s), padding=(0, lo, 0, hi), dilation=(1, d), groups=int(groups))
    y = n.call("squeeze", y, axis=(2,))
    return _add_bias(n, y, bias, 1)


@converter("aten.conv2d.default", "aten.conv2d.padding")
def _aten_conv2d(n):
    return _conv2d(n, n.input(0), n.input(1), n.arg(2, "bias"), n.arg(3, "stride", 1),
                   n.arg(4, "padding", 0), n.arg(5, "dilation", 1), n.arg(6, "groups", 1))


@converter("aten.conv1d.default", "aten.conv1d.padding")
def _aten_conv1d(n):
    return _conv1d(n, n.input(0), n.input(1), n.arg(2, "bias"), n.arg(3, "stride", 1),
                   n.arg(4, "padding", 0), n.arg(5, "dilation", 1), n.arg(6, "groups", 1))


def _conv_transpose2d(n, x, w, bias, stride, padding, output_padding, groups, dilation):
    y = n.call("nn.conv2d_transpose", x, w, strides=_pair(stride, (1, 1)), padding=_pad4(padding),
               output_padding=_pair(output_padding, (0, 0)), dilation=_pair(dilation, (1, 1)),
               groups=int(groups))
    return _add_bias(n, y, bias, 1)


@converter("aten.conv_transpose2d.input")
def _aten_conv_transpose2d(n):
    return _conv_transpose2d(n, n.input(0), n.input(1), n.arg(2, "bias"), n.arg(3, "stride", 1),
                             n.arg(4, "padding", 0), n.arg(5, "output_padding", 0),
                             n.arg(6, "groups", 1), n.arg(7, "dilation", 1))


@converter("aten.convolution.default")
def _aten_convolution(n):
    x, w, bias = n.input(0), n.input(1), n.arg(2, "bias")
    stride, padding, dilation = n.arg(3), n.arg(4), n.arg(5)
    transposed, output_padding, groups = n.arg(6), n.arg(7), n.arg(8)
    rank = w.checked_type.ndim
    if transposed:
        if rank != 4:
            raise Unsupported(f"transposed convolution of rank {rank}")
        return _conv_transpose2d(n, x, w, bias, stride, padding, output_padding, groups, dilation)
    if rank == 4:
        return _conv2d(n, x, w, bias, stride, padding, dilation, groups)
    if rank == 3:
        return _conv1d(n, x, w, bias, stride, padding, dilation, groups)
    raise Unsupported(f"convolution of rank {rank}")


# --- dense and matmul ------------------------------------------------------------------------

def _transposed_2d(e):
    """The operand of `transpose(W, axes=[1, 0])`, or None: so W.T @ ... becomes a dense."""
    if isinstance(e, Call) and e.op is get_op("transpose") and e.checked_type.ndim == 2:
        axes = e.attrs.axes
        if axes is None or tuple(a % 2 for a in axes) == (1, 0):
            return e.args[0]
    return None


def _swapped_last_two(e):
    """The operand of a transpose that swaps only the last two axes, or None."""
    if isinstance(e, Call) and e.op is get_op("transpose") and e.checked_type.ndim >= 2:
        nd = e.checked_type.ndim
        axes = tuple(range(nd))[::-1] if e.attrs.axes is None else \
            tuple(a % nd for a in e.attrs.axes)
        if axes == tuple(range(nd - 2)) + (nd - 1, nd - 2):
            return e.args[0]
    return None


def _mm2d(n, a, b):
    w = _transposed_2d(b)
    if w is not None:
        return n.call("nn.dense", a, w)
    return n.call("nn.matmul", a, b)


def matmul(n, a: Expr, b: Expr) -> Expr:
    """torch.matmul semantics (1-d operands, batch broadcasting) with the catalog's 2-d and
    3-d matmuls.

    Example:
        >>> matmul(n, q, k_t)   # (B, H, S, D) @ (B, H, D, S) -> batch_matmul   # doctest: +SKIP
    """
    sa, sb = a.checked_type.shape, b.checked_type.shape
    if len(sa) == 1 and len(sb) == 1:
        y = _mm2d(n, n.call("reshape", a, newshape=(1, sa[0])),
                  n.call("reshape", b, newshape=(sb[0], 1)))
        return n.call("reshape", y, newshape=())
    if len(sa) == 1:
        y = matmul(n, n.call("expand_dims", a, axis=0), b)
        return n.call("squeeze", y, axis=(y.checked_type.ndim - 2,))
    if len(sb) == 1:
        y = matmul(n, a, n.call("expand_dims", b, axis=1))
        return n.call("squeeze", y, axis=(y.checked_type.ndim - 1,))
    if len(sa) == 2 and len(sb) == 2:
        return _mm2d(n, a, b)
    m, k = sa[-2], sa[-1]
    nn_ = sb[-1]
    if len(sb) == 2:
        # (..., m, k) @ (k, n): one 2-d matmul over all rows.
        rows = int(np.prod(sa[:-1]))
        y = _mm2d(n, n.call("reshape", a, newshape=(rows, k)), b)
        return n.call("reshape", y, newshape=tuple(sa[:-1]) + (nn_,))
    batch = np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
    bsize = int(np.prod(batch))
    # b given as a transpose of its last two axes is read transposed instead of materialized.
    b_inner = _swapped_last_two(b)
    a3 = _as_batch(n, a, batch, bsize)
    if b_inner is not None:
        b3 = _as_batch(n, b_inner, batch, bsize)
        y = n.call("nn.batch_matmul", a3, b3, transpose_b=True)
    else:
        y = n.call("nn.batch_matmul", a3, _as_batch(n, b, batch, bsize))
    return n.call("reshape", y, newshape=tuple(batch) + (m, nn_))


def _as_batch(n, x, batch, bsize):
    """x (..., r, c) as a 3-d (B, r, c); a batch of 1 stays 1 (batch_matmul broadcasts it)."""
    shape = x.checked_type.shape
    mine = int(np.prod(shape[:-2]))
    if mine != 1 and tuple(shape[:-2]) != tuple(batch):
        x = n.call("broadcast_to", x, shape=tuple(batch) + tuple(shape[-2:]))
        mine = bsize
    return n.call("reshape", x, newshape=(mine,) + tuple(shape[-2:]))


@converter("aten.linear.default")
def _linear(n):
    y = n.call("nn.dense", n.input(0), n.input(1))
    return _add_bias(n, y, n.arg(2, "bias"), -1)


@converter("aten.mm.default")
def _mm(n):
    return _mm2d(n, n.input(0), n.input(1))


@converter("aten.bmm.default")
def _bmm(n):
    a, b = n.input(0), n.input(1)
    inner = _swapped_last_two(b)
    if inner is not None:
        return n.call("nn.batch_matmul", a, inner, transpose_b=True)
    return n.call("nn.batch_matmul", a, b)


@converter("aten.matmul.default")
def _matmul(n):
    return matmul(n, n.input(0), n.input(1))


@converter("aten.addmm.default")
def _addmm(n):
    bias, a, b = n.input(0), n.input(1), n.input(2)
    beta, alpha = n.kwargs.get("beta", 1), n.kwargs.get("alpha", 1)
    y = _mm2d(n, a, b)
    dt = y.checked_type.dtype
    if alpha != 1:
        y = n.call("multiply", y, n.scalar(alpha, dt))
    if beta == 0:
        return y
    if beta != 1:
        bias = n.call("multiply", bias, n.scalar(beta, dt))
    if bias.checked_type.ndim == 1 and bias.checked_type.shape[0] == y.checked_type.shape[1] \
            and y.checked_type.shape[1] != 1:
        return n.call("nn.bias_add", y, bias, axis=-1)
    return n.call("add", y, bias)


# --- normalization ----------------------------------------------------------------------------

def _param_or(v, fill, size, dtype):
    if v is not None:
        return v
    return const(np.full(size, fill, dtype=dtype))


def _batch_norm(n, x, w, b, mean, var, eps):
    t = x.checked_type
    c = t.shape[1]
    w = _param_or(w, 1.0, (c,), t.dtype)
    b = _param_or(b, 0.0, (c,), t.dtype)
    if mean is None or var is None:
        raise Unsupported("batch norm without running statistics (training mode)")
    return n.call("nn.batch_norm", x, w, b, mean, var, axis=1, epsilon=float(eps))


@converter("aten._native_batch_norm_legit_no_training.default")
def _bn_no_training(n):
    y = _batch_norm(n, n.input(0), n.arg(1), n.arg(2), n.arg(3), n.arg(4), n.arg(6, "eps", 1e-5))
    return (y, None, None)


@converter("aten.batch_norm.default")
def _bn(n):
    if n.arg(5, "training"):
        raise Unsupported("batch norm in training mode (call model.eval())")
    return _batch_norm(n, n.input(0), n.arg(1), n.arg(2), n.arg(3), n.arg(4), n.arg(7, "eps", 1e-5))


@converter("aten.native_batch_norm.default", "aten._native_batch_norm_legit.default")
def _native_bn(n):
    if n.arg(5, "training"):
        raise Unsupported("batch norm in training mode (call model.eval())")
    y = _batch_norm(n, n.input(0), n.arg(1), n.arg(2), n.arg(3), n.arg(4), n.arg(7, "eps", 1e-5))
    return (y, None, None)


@converter("aten._native_batch_norm_legit.no_stats")
def _bn_batch_stats(n):
    # Batch norm with the statistics of the batch itself: what instance norm lowers to.
    x, w, b, eps = n.input(0), n.arg(1), n.arg(2), float(n.arg(5, "eps", 1e-5))
    t = x.checked_type
    axes = (0,) + tuple(range(2, t.ndim))
    mean = n.call("mean", x, axis=axes, keepdims=True)
    centered = n.call("subtract", x, mean)
    var = n.call("mean", n.call("multiply", centered, centered), axis=axes, keepdims=True)
    y = n.call("multiply", centered, n.call("rsqrt", n.call("add", var, n.scalar(eps, t.dtype))))
    shape = (t.shape[1],) + (1,) * (t.ndim - 2)
    if w is not None:
        y = n.call("multiply", y, n.call("reshape", w, newshape=shape))
    if b is not None:
        y = n.call("add", y, n.call("reshape", b, newshape=shape))
    return (y, None, None)


def _layer_norm(n, x, shape, w, b, eps):
    shape = tuple(int(s) for s in shape)
    dt = x.checked_type.dtype
    w = _param_or(w, 1.0, shape, dt)
    b = _param_or(b, 0.0, shape, dt)
    return n.call("nn.layer_norm", x, w, b, axis=-len(shape), epsilon=float(eps))


@converter("aten.layer_norm.default")
def _aten_layer_norm(n):
    return _layer_norm(n, n.input(0), n.arg(1), n.arg(2, "weight"), n.arg(3, "bias"),
                       n.arg(4, "eps", 1e-5))


@converter("aten.native_layer_norm.default")
def _native_layer_norm(n):
    y = _layer_norm(n, n.input(0), n.arg(1), n.arg(2), n.arg(3), n.arg(4))
    return (y, None, None)


def _group_norm(n, x, groups, w, b, eps):
    t = x.checked_type
    shape, dt = t.shape, t.dtype
    nb, c = shape[0], shape[1]
    g = n.call("reshape", x, newshape=(nb, groups, -1))
    mean = n.call("mean", g, axis=(2,), keepdims=True)
    centered = n.call("subtract", g, mean)
    var = n.call("mean", n.call("multiply", centered, centered), axis=(2,), keepdims=True)
    inv = n.call("rsqrt", n.call("add", var, n.scalar(eps, dt)))
    y = n.call("reshape", n.call("multiply", centered, inv), newshape=shape)
    bshape = (c,) + (1,) * (len(shape) - 2)
    if w is not None:
        y = n.call("multiply", y, n.call("reshape", w, newshape=bshape))
    if b is not None:
        y = n.call("add", y, n.call("reshape", b, newshape=bshape))
    return y


@converter("aten.group_norm.default")
def _aten_group_norm(n):
    return _group_norm(n, n.input(0), int(n.arg(1)), n.arg(2, "weight"), n.arg(3, "bias"),
                       float(n.arg(4, "eps", 1e-5)))


@converter("aten.native_group_norm.default")
def _native_group_norm(n):
    y = _group_norm(n, n.input(0), int(n.arg(6)), n.arg(1), n.arg(2), float(n.arg(7)))
    return (y, None, None)


# --- pooling ----------------------------------------------------------------------------------

def _max_pool2d(n):
    k = _pair(n.arg(1, "kernel_size"))
    stride = _pair(n.arg(2, "stride"), k)
    return n.call("nn.max_pool2d", n.input(0), pool_size=k, strides=stride,
                  padding=_pad4(n.arg(3, "padding", 0)), dilation=_pair(n.arg(4, "dilation", 1)),
                  ceil_mode=bool(n.arg(5, "ceil_mode", False)))


@converter("aten.max_pool2d.default")
def _aten_max_pool2d(n):
    return _max_pool2d(n)


@converter("aten.max_pool2d_with_indices.default")
def _aten_max_pool2d_indices(n):
    return (_max_pool2d(n), None)


@converter("aten.avg_pool2d.default")
def _avg_pool2d(n):
    if n.arg(6, "divisor_override") is not None:
        raise Unsupported("avg_pool2d with divisor_override")
    k = _pair(n.arg(1, "kernel_size"))
    stride = _pair(n.arg(2, "stride"), k)
    return n.call("nn.avg_pool2d", n.input(0), pool_size=k, strides=stride,
                  padding=_pad4(n.arg(3, "padding", 0)),
                  ceil_mode=bool(n.arg(4, "ceil_mode", False)),
                  count_include_pad=bool(n.arg(5, "count_include_pad", True)))


def _adaptive(n, kind):
    x = n.input(0)
    out = tuple(n.shape[-2:])
    if x.checked_type.ndim != 4:
        raise Unsupported(f"adaptive pooling of a {x.checked_type.ndim}-d input")
    if out == (1, 1):
        return n.call(f"nn.global_{kind}_pool2d", x)
    if out == tuple(x.checked_type.shape[-2:]):
        return x
    return n.call(f"nn.adaptive_{kind}_pool2d", x, output_size=out)


@converter("aten.adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d.default")
def _adaptive_avg(n):
    return _adaptive(n, "avg")


@converter("aten.adaptive_max_pool2d.default")
def _adaptive_max(n):
    return (_adaptive(n, "max"), None)


# --- softmax ----------------------------------------------------------------------------------

def _softmax_like(n, op_name):
    x = n.input(0)
    dtype = n.kwargs.get("dtype")
    if dtype is not None or n.dtype != x.checked_type.dtype:
        x = n.cast(x, n.dtype)
    return n.call(op_name, x, axis=int(n.arg(1, "dim")))


@converter("aten.softmax.int", "aten._softmax.default", "aten._safe_softmax.default")
def _softmax(n):
    return _softmax_like(n, "nn.softmax")


@converter("aten.log_softmax.int", "aten._log_softmax.default")
def _log_softmax(n):
    return _softmax_like(n, "nn.log_softmax")


# --- resize -----------------------------------------------------------------------------------

def _check_scales(n, scales):
    if not scales:
        return
    x = n.input(0)
    for s, i, o in zip(scales, x.checked_type.shape[2:], n.shape[2:]):
        if s is not None and i * s != o:
            # torch then samples with 1/scale, not in/out, which image.resize2d cannot say.
            raise Unsupported(f"resize by non-integral scale factor {s}")


@converter("aten.upsample_nearest2d.vec", "aten.upsample_nearest2d.default")
def _upsample_nearest(n):
    scales = n.arg(2) if str(n.fx.target).endswith(".vec") else (n.arg(2), n.arg(3))
    _check_scales(n, scales)
    return n.call("image.resize2d", n.input(0), size=n.shape[2:], method="nearest",
                  coordinate_transformation_mode="asymmetric", rounding_method="floor")


@converter("aten.upsample_bilinear2d.vec", "aten.upsample_bilinear2d.default")
def _upsample_bilinear(n):
    align = bool(n.arg(2, "align_corners", False))
    scales = n.arg(3) if str(n.fx.target).endswith(".vec") else (n.arg(3), n.arg(4))
    _check_scales(n, scales)
    return n.call("image.resize2d", n.input(0), size=n.shape[2:], method="linear",
                  coordinate_transformation_mode="align_corners" if align else "half_pixel")


# --- embedding and attention ------------------------------------------------------------------

@converter("aten.embedding.default")
def _embedding(n):
    return n.call("take", n.input(0), n.input(1), axis=0)


@converter("aten.scaled_dot_product_attention.default")
def _sdpa(n):
    q, k, v = n.input(0), n.input(1), n.input(2)
    mask = n.arg(3, "attn_mask")
    if float(n.arg(4, "dropout_p", 0.0)) != 0.0:
        raise Unsupported("attention with dropout_p > 0")
    if n.kwargs.get("enable_gqa"):
        raise Unsupported("attention with enable_gqa")
    dt = q.checked_type.dtype
    e = q.checked_type.shape[-1]
    scale = n.kwargs.get("scale") or 1.0 / math.sqrt(e)
    nd = k.checked_type.ndim
    kt = n.call("transpose", k, axes=tuple(range(nd - 2)) + (nd - 1, nd - 2))
    scores = n.call("multiply", matmul(n, q, kt), n.scalar(scale, dt))
    length, s = q.checked_type.shape[-2], k.checked_type.shape[-2]
    if n.arg(5, "is_causal", False):
        keep = np.tril(np.ones((length, s), dtype=bool))
        scores = n.call("where", const(keep), scores, n.scalar(-np.inf, dt))
    if isinstance(mask, Expr):
        if mask.checked_type.dtype == "bool":
            scores = n.call("where", mask, scores, n.scalar(-np.inf, dt))
        else:
            scores = n.call("add", scores, n.cast(mask, dt))
    return matmul(n, n.call("nn.softmax", scores, axis=-1), v)

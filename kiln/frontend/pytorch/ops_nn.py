"""Converters of ATen neural-network ops: convolutions, dense/matmul, pooling, norms, softmax,
resize, embedding, attention."""
from __future__ import annotations

import math

import numpy as np

from ...graph import Call, Expr, const, get_op
from .registry import Unsupported, converter


def _ntuple(v, n: int, default=None):
    """A window attribute (stride, padding, ...) of n spatial axes: an int or one value for
    all of them, else one per axis."""
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    v = (int(v),) if isinstance(v, int) else tuple(int(x) for x in v)
    return v * n if len(v) == 1 else v


def _pair(v, default=None):
    return _ntuple(v, 2, default)


def _triple(v, default=None):
    return _ntuple(v, 3, default)


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


def _batched(n, conv, *args):
    """conv(n, x, w, *args) for a batched x, or for an unbatched one (rank one less than the
    weight's, which torch accepts) as a batch of one."""
    x, w = n.input(0), n.input(1)
    if x.checked_type.ndim != w.checked_type.ndim - 1:
        return conv(n, x, w, *args)
    y = conv(n, n.call("expand_dims", x, axis=0), w, *args)
    return n.call("squeeze", y, axis=(0,))


@converter("aten.conv2d.default", "aten.conv2d.padding")
def _aten_conv2d(n):
    return _batched(n, _conv2d, n.arg(2, "bias"), n.arg(3, "stride", 1), n.arg(4, "padding", 0),
                    n.arg(5, "dilation", 1), n.arg(6, "groups", 1))


@converter("aten.conv1d.default", "aten.conv1d.padding")
def _aten_conv1d(n):
    return _batched(n, _conv1d, n.arg(2, "bias"), n.arg(3, "stride", 1), n.arg(4, "padding", 0),
                    n.arg(5, "dilation", 1), n.arg(6, "groups", 1))


def _conv_transpose2d(n, x, w, bias, stride, padding, output_padding, groups, dilation):
    y = n.call("nn.conv2d_transpose", x, w, strides=_pair(stride, (1, 1)), padding=_pad4(padding),
               output_padding=_pair(output_padding, (0, 0)), dilation=_pair(dilation, (1, 1)),
               groups=int(groups))
    return _add_bias(n, y, bias, 1)


def _conv_transpose1d(n, x, w, bias, stride, padding, output_padding, groups, dilation):
    # a 2-d transposed convolution over a height of 1
    y = n.call("nn.conv2d_transpose", n.call("expand_dims", x, axis=2),
               n.call("expand_dims", w, axis=2), strides=(1, _first(stride, 1)),
               padding=(0, _first(padding, 0), 0, _first(padding, 0)),
               output_padding=(0, _first(output_padding, 0)), dilation=(1, _first(dilation, 1)),
               groups=int(groups))
    return _add_bias(n, n.call("squeeze", y, axis=(2,)), bias, 1)


@converter("aten.conv_transpose1d.default")
def _aten_conv_transpose1d(n):
    return _batched(n, _conv_transpose1d, n.arg(2, "bias"), n.arg(3, "stride", 1),
                    n.arg(4, "padding", 0), n.arg(5, "output_padding", 0), n.arg(6, "groups", 1),
                    n.arg(7, "dilation", 1))


@converter("aten.conv_transpose2d.input")
def _aten_conv_transpose2d(n):
    return _batched(n, _conv_transpose2d, n.arg(2, "bias"), n.arg(3, "stride", 1),
                    n.arg(4, "padding", 0), n.arg(5, "output_padding", 0), n.arg(6, "groups", 1),
                    n.arg(7, "dilation", 1))


@converter("aten.convolution.default")
def _aten_convolution(n):
    return _batched(n, _convolution)


def _convolution(n, x, w):
    bias = n.arg(2, "bias")
    stride, padding, dilation = n.arg(3), n.arg(4), n.arg(5)
    transposed, output_padding, groups = n.arg(6), n.arg(7), n.arg(8)
    rank = w.checked_type.ndim
    if transposed:
        if rank == 3:
            return _conv_transpose1d(n, x, w, bias, stride, padding, output_padding, groups,
                                     dilation)
        if rank != 4:
            raise Unsupported(f"transposed convolution of rank {rank}")
        return _conv_transpose2d(n, x, w, bias, stride, padding, output_padding, groups, dilation)
    if rank == 4:
        return _conv2d(n, x, w, bias, stride, padding, dilation, groups)
    if rank == 3:
        return _conv1d(n, x, w, bias, stride, padding, dilation, groups)
    if rank == 5:
        return _conv3d(n, x, w, bias, stride, padding, dilation, groups)
    raise Unsupported(f"convolution of rank {rank}")


def _conv3d(n, x, w, bias, stride, padding, dilation, groups):
    stride, dilation = _triple(stride, (1, 1, 1)), _triple(dilation, (1, 1, 1))
    if isinstance(padding, str):
        pads = _string_padding(padding, w.checked_type.shape[2:], dilation, stride)
        padding = tuple(lo for lo, _ in pads) + tuple(hi for _, hi in pads)
    else:
        padding = _triple(padding, (0, 0, 0)) * 2
    y = n.call("nn.conv3d", x, w, strides=stride, padding=padding, dilation=dilation,
               groups=int(groups))
    return _add_bias(n, y, bias, 1)


@converter("aten.conv3d.default", "aten.conv3d.padding")
def _aten_conv3d(n):
    return _batched(n, _conv3d, n.arg(2, "bias"), n.arg(3, "stride", 1), n.arg(4, "padding", 0),
                    n.arg(5, "dilation", 1), n.arg(6, "groups", 1))


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


def _beta_input_plus_alpha(n, bias, product):
    """beta * bias + alpha * product (the kwargs of addmv, addbmm ...); beta = 0 ignores bias,
    nan and inf included, as torch does."""
    beta, alpha = n.kwargs.get("beta", 1), n.kwargs.get("alpha", 1)
    dt = product.checked_type.dtype
    if alpha != 1:
        product = n.call("multiply", product, n.scalar(alpha, dt))
    if beta == 0:
        return product if product.checked_type.shape == n.shape else \
            n.call("broadcast_to", product, shape=n.shape)
    bias = n.cast(bias, dt)
    if beta != 1:
        bias = n.call("multiply", bias, n.scalar(beta, dt))
    return n.call("add", bias, product)


@converter("aten.addmv.default")
def _addmv(n):
    return _beta_input_plus_alpha(n, n.input(0), matmul(n, n.input(1), n.input(2)))


@converter("aten.addbmm.default")
def _addbmm(n):
    products = n.call("nn.batch_matmul", n.input(1), n.input(2))
    return _beta_input_plus_alpha(n, n.input(0), n.call("sum", products, axis=(0,)))


@converter("aten._trilinear.default")
def _trilinear(n):
    # each input unsqueezed at its expand dims, the three multiplied (broadcast) and summed
    # over sumdim: what bilinear layers lower to
    factors = []
    for i in range(3):
        x = n.input(i)
        for d in sorted(int(d) for d in n.arg(3 + i)):
            x = n.call("expand_dims", x, axis=d)
        factors.append(x)
    product = n.call("multiply", n.call("multiply", factors[0], factors[1]), factors[2])
    sumdim = tuple(sorted({int(d) % product.checked_type.ndim for d in n.arg(6, "sumdim")}))
    if not sumdim:
        return product
    return n.call("sum", product, axis=sumdim)


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


def _training_bn(n, running_mean, running_var):
    """Whether a training-mode batch norm can be imported: only without running statistics,
    whose update (a side effect on the model's buffers) kiln does not model."""
    if running_mean is not None or running_var is not None:
        raise Unsupported("batch norm in training mode, updating running statistics "
                          "(call model.eval(), or compile for training: kiln.torch.optimize"
                          "(..., training=True))")


@converter("aten.batch_norm.default")
def _bn(n):
    x, w, b, mean, var, eps = (n.input(0), n.arg(1), n.arg(2), n.arg(3), n.arg(4),
                               float(n.arg(7, "eps", 1e-5)))
    if n.arg(5, "training"):
        _training_bn(n, mean, var)
        return _batch_stats_norm(n, x, w, b, eps)[0]
    return _batch_norm(n, x, w, b, mean, var, eps)


@converter("aten.native_batch_norm.default", "aten._native_batch_norm_legit.default")
def _native_bn(n):
    x, w, b, mean, var, eps = (n.input(0), n.arg(1), n.arg(2), n.arg(3), n.arg(4),
                               float(n.arg(7, "eps", 1e-5)))
    if n.arg(5, "training"):
        _training_bn(n, mean, var)
        return _batch_stats_norm(n, x, w, b, eps)
    return (_batch_norm(n, x, w, b, mean, var, eps), None, None)


@converter("aten._native_batch_norm_legit.no_stats")
def _bn_batch_stats(n):
    # what instance norm lowers to
    return _batch_stats_norm(n, n.input(0), n.arg(1), n.arg(2), float(n.arg(5, "eps", 1e-5)))


def _batch_stats_norm(n, x, w, b, eps):
    """Batch norm with the statistics of the batch itself: (y, mean, 1 / sqrt(var + eps)),
    the last two per channel."""
    return _batch_stats(n, x, w, b, eps)[:3]


def _batch_stats(n, x, w, b, eps):
    """_batch_stats_norm's results, then the (biased) variance per channel."""
    t = x.checked_type
    axes = (0,) + tuple(range(2, t.ndim))
    mean, var = _moments(n, x, axes)
    rstd = n.call("rsqrt", n.call("add", var, n.scalar(eps, t.dtype)))
    y = n.call("multiply", n.call("subtract", x, mean), rstd)
    shape = (t.shape[1],) + (1,) * (t.ndim - 2)
    if w is not None:
        y = n.call("multiply", y, n.call("reshape", w, newshape=shape))
    if b is not None:
        y = n.call("add", y, n.call("reshape", b, newshape=shape))
    channels = (t.shape[1],)
    return (y, *(n.call("reshape", v, newshape=channels) for v in (mean, rstd, var)))


@converter("aten._native_batch_norm_legit_functional.default")
def _bn_functional(n):
    # what torch.export makes of a training-mode batch norm: (y, mean, rstd, new running mean,
    # new running variance), the last two written back to the model's buffers
    x, w, b, running_mean, running_var = (n.input(0), n.arg(1), n.arg(2), n.input(3),
                                          n.input(4))
    momentum, eps = float(n.arg(6, "momentum")), float(n.arg(7, "eps"))
    if not n.arg(5, "training"):
        return (_batch_norm(n, x, w, b, running_mean, running_var, eps), None, None,
                running_mean, running_var)
    y, mean, rstd, var = _batch_stats(n, x, w, b, eps)
    t = x.checked_type
    count = int(np.prod(t.shape)) // int(t.shape[1])
    # as eager: momentum * batch value + (1 - momentum) * running value, the variance unbiased
    unbiased = n.call("multiply", var, n.scalar(count / max(count - 1, 1), t.dtype))

    def update(running, batch):         # in the running statistics' dtype
        dtype = running.checked_type.dtype
        return n.call("add", n.call("multiply", n.cast(batch, dtype), n.scalar(momentum, dtype)),
                      n.call("multiply", running, n.scalar(1.0 - momentum, dtype)))
    return (y, mean, rstd, update(running_mean, mean), update(running_var, unbiased))


def _layer_norm(n, x, shape, w, b, eps):
    shape = tuple(int(s) for s in shape)
    dt = x.checked_type.dtype
    if eps < 0 and shape:
        # torch takes any eps; nn.layer_norm only a non-negative one
        nd = x.checked_type.ndim
        mean, rstd = _mean_rstd(n, x, tuple(range(nd - len(shape), nd)), eps)
        y = n.call("multiply", n.call("subtract", x, mean), rstd)
        y = y if w is None else n.call("multiply", y, w)
        return y if b is None else n.call("add", y, b)
    w = _param_or(w, 1.0, shape, dt)
    b = _param_or(b, 0.0, shape, dt)
    return n.call("nn.layer_norm", x, w, b, axis=-len(shape), epsilon=float(eps))


@converter("aten.layer_norm.default")
def _aten_layer_norm(n):
    return _layer_norm(n, n.input(0), n.arg(1), n.arg(2, "weight"), n.arg(3, "bias"),
                       n.arg(4, "eps", 1e-5))


def _mean_rstd(n, x, axes, eps):
    """The mean and 1 / sqrt(variance + eps) of x over axes (kept as size 1), which the
    native norms return besides their result."""
    mean, var = _moments(n, x, axes)
    return mean, n.call("rsqrt", n.call("add", var, n.scalar(eps, x.checked_type.dtype)))


def _moments(n, x, axes):
    """The mean and (biased) variance of x over axes, kept as size 1."""
    mean = n.call("mean", x, axis=axes, keepdims=True)
    centered = n.call("subtract", x, mean)
    return mean, n.call("mean", n.call("multiply", centered, centered), axis=axes,
                        keepdims=True)


@converter("aten.native_layer_norm.default")
def _native_layer_norm(n):
    x, shape, eps = n.input(0), n.arg(1), float(n.arg(4))
    y = _layer_norm(n, x, shape, n.arg(2), n.arg(3), eps)
    nd = x.checked_type.ndim
    axes = tuple(range(nd - len(shape), nd))
    if not axes:
        return (y, None, None)
    # unused (the usual case), these two never reach the compiled graph
    mean, rstd = _mean_rstd(n, x, axes, eps)
    return (y, mean, rstd)


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
    x, groups, eps = n.input(0), int(n.arg(6)), float(n.arg(7))
    y = _group_norm(n, x, groups, n.arg(1), n.arg(2), eps)
    batch = x.checked_type.shape[0]
    mean, rstd = _mean_rstd(n, n.call("reshape", x, newshape=(batch, groups, -1)), (2,), eps)
    return (y, n.call("reshape", mean, newshape=(batch, groups)),
            n.call("reshape", rstd, newshape=(batch, groups)))


# --- pooling ----------------------------------------------------------------------------------

def _max_pool2d(n, x):
    k = _pair(n.arg(1, "kernel_size"))
    stride = _pair(n.arg(2, "stride"), k)
    return n.call("nn.max_pool2d", x, pool_size=k, strides=stride,
                  padding=_pad4(n.arg(3, "padding", 0)), dilation=_pair(n.arg(4, "dilation", 1)),
                  ceil_mode=bool(n.arg(5, "ceil_mode", False)))


def _unbatched_pool(n, pool):
    """pool(n, x) of a (N, C, H, W) input, or of an unbatched (C, H, W) one as a batch of 1;
    pool returns one expression or a tuple of them."""
    x = n.input(0)
    if x.checked_type.ndim != 3:
        return pool(n, x)
    out = pool(n, n.call("expand_dims", x, axis=0))
    if isinstance(out, tuple):
        return tuple(n.call("squeeze", o, axis=(0,)) for o in out)
    return n.call("squeeze", out, axis=(0,))


@converter("aten.max_pool2d.default")
def _aten_max_pool2d(n):
    return _unbatched_pool(n, _max_pool2d)


@converter("aten.max_pool2d_with_indices.default")
def _aten_max_pool2d_indices(n):
    # the indices are built only when something reads them
    return _unbatched_pool(n, lambda n, x: (_max_pool2d(n, x), _max_pool2d_indices(n, x)))


def _max_pool2d_indices(n, x):
    """The indices output of max_pool2d_with_indices (see max_indices)."""
    k = _pair(n.arg(1, "kernel_size"))
    stride, padding = _pair(n.arg(2, "stride"), k), _pair(n.arg(3, "padding", 0), (0, 0))
    dilation = _pair(n.arg(4, "dilation", 1), (1, 1))
    windows = [[range(o * s - p, o * s - p + kk * d, d) for o in range(out)]
               for out, kk, s, p, d in zip(n.shape[-2:], k, stride, padding, dilation)]
    return max_indices(n, x, *windows)


@converter("aten.max_pool2d_with_indices_backward.default")
def _max_pool2d_backward(n):
    # the gradient of each window's output added at the input position its index names
    grad, x, indices = n.input(0), n.input(1), n.input(7, "indices")
    shape = tuple(x.checked_type.shape)
    lead = int(np.prod(shape[:-2]))
    rows = (lead, -1)
    zeros = const(np.zeros((lead, shape[-2] * shape[-1]), dtype=x.checked_type.dtype))
    y = n.call("scatter_elements", zeros, n.call("reshape", n.cast(indices, "int64"),
                                                 newshape=rows),
               n.call("reshape", n.cast(grad, x.checked_type.dtype), newshape=rows), axis=1,
               reduction="add")
    return n.call("reshape", y, newshape=shape)


def max_indices(n, x, row_windows, col_windows):
    """The flat (h * W + w) input index of each pooling window's maximum, as torch returns it:
    the first maximum in the window's row-major order, or its last NaN. Windows (one list of
    input positions per output row, and per output column; positions outside the input are
    padding) are gathered as (N, C, OH, OW, taps) through a constant table of flat indices.

    Example:
        >>> max_indices(n, x, [range(0, 2), range(2, 4)], [range(0, 2), range(2, 4)])
        ... # doctest: +SKIP
    """
    nb, c, h, w = x.checked_type.shape
    table = _window_table(row_windows, col_windows, h, w)
    oh, ow, taps = table.shape
    windows = n.call("take", n.call("reshape", x, newshape=(nb, c, h * w)), const(table), axis=2)
    tap = n.call("argmax", windows, axis=4)
    nan = n.cast(n.call("not_equal", windows, windows), "uint8")
    reverse = n.call("strided_slice", nan, begin=(taps - 1,), end=(-taps - 1,), strides=(-1,),
                     axes=(4,))
    last_nan = n.call("subtract", n.scalar(taps - 1, "int64"), n.call("argmax", reverse, axis=4))
    tap = n.call("where", n.cast(n.call("max", nan, axis=(4,)), "bool"), last_nan, tap)
    base = (np.arange(oh * ow, dtype=np.int64) * taps).reshape(oh, ow)
    return n.call("take", const(table.reshape(-1)), n.call("add", tap, const(base)))


def _window_table(row_windows, col_windows, h, w):
    """(OH, OW, taps) flat input indices of each window's taps, taps = the largest window. A
    tap in the padding (or past a smaller window's end) repeats the window's first input
    position: it changes neither the maximum nor, ties going to the first tap, which index
    torch reports (torch starts from that one)."""
    rows = [[r for r in win if 0 <= r < h] for win in row_windows]
    cols = [[q for q in win if 0 <= q < w] for win in col_windows]
    taps = max(len(r) for r in rows) * max(len(q) for q in cols)
    table = np.empty((len(rows), len(cols), taps), dtype=np.int64)
    for i, r in enumerate(rows):
        for j, q in enumerate(cols):
            flat = (np.asarray(r)[:, None] * w + np.asarray(q)[None, :]).reshape(-1)
            table[i, j] = np.concatenate([flat, np.full(taps - flat.size, flat[0])])
    return table


@converter("aten.avg_pool2d.default")
def _aten_avg_pool2d(n):
    return _unbatched_pool(n, _avg_pool2d)


def _avg_pool2d(n, x):
    k = _pair(n.arg(1, "kernel_size"))
    stride = _pair(n.arg(2, "stride"), k)
    ceil_mode = bool(n.arg(4, "ceil_mode", False))
    padding = _pair(n.arg(3, "padding", 0), (0, 0))
    divisor = n.arg(6, "divisor_override")
    y = n.call("nn.avg_pool2d", x, pool_size=k, strides=stride, padding=padding * 2,
               ceil_mode=ceil_mode,
               count_include_pad=divisor is not None or bool(n.arg(5, "count_include_pad", True)))
    if divisor is None:
        return y
    # the window sums: the averages times their counts (padding counted), over the divisor
    counts = np.outer(*[_window_counts(size, kk, s, p, out) for size, kk, s, p, out in
                        zip(x.checked_type.shape[-2:], k, stride, padding,
                            y.checked_type.shape[-2:])])
    dt = y.checked_type.dtype
    return n.call("multiply", y, const((counts / int(divisor)).astype(dt)))


def _window_counts(size, k, stride, pad, out):
    """Entries of each pooling window along one axis, padding counted, windows cut at the end
    of the padded input (torch's count_include_pad divisor)."""
    starts = np.arange(out) * stride - pad
    return np.minimum(starts + k, size + pad) - starts


def _adaptive(n, kind, x=None):
    x = n.input(0) if x is None else x
    out = tuple(n.shape[-2:])
    if x.checked_type.ndim != 4:
        raise Unsupported(f"adaptive pooling of a {x.checked_type.ndim}-d input")
    if out == (1, 1):
        return n.call(f"nn.global_{kind}_pool2d", x)
    if out == tuple(x.checked_type.shape[-2:]):
        return x
    return n.call(f"nn.adaptive_{kind}_pool2d", x, output_size=out)


def _pool3d(n, kind):
    x = n.input(0)
    if x.checked_type.ndim != 5:
        raise Unsupported(f"{kind}_pool3d of a {x.checked_type.ndim}-d input")
    k = _triple(n.arg(1, "kernel_size"), None)
    stride = _triple(n.arg(2, "stride"), k)
    padding = _triple(n.arg(3, "padding", 0), (0, 0, 0)) * 2
    if kind == "max":
        return n.call("nn.max_pool3d", x, pool_size=k, strides=stride, padding=padding,
                      dilation=_triple(n.arg(4, "dilation", 1), (1, 1, 1)),
                      ceil_mode=bool(n.arg(5, "ceil_mode", False)))
    if n.arg(6, "divisor_override") is not None:
        raise Unsupported("avg_pool3d with divisor_override")
    return n.call("nn.avg_pool3d", x, pool_size=k, strides=stride, padding=padding,
                  ceil_mode=bool(n.arg(4, "ceil_mode", False)),
                  count_include_pad=bool(n.arg(5, "count_include_pad", True)))


@converter("aten.max_pool3d.default")
def _aten_max_pool3d(n):
    return _pool3d(n, "max")


@converter("aten.max_pool3d_with_indices.default")
def _aten_max_pool3d_indices(n):
    # no indices: an import that reads them reports that output as unsupported
    return _pool3d(n, "max"), None


@converter("aten.avg_pool3d.default")
def _aten_avg_pool3d(n):
    return _pool3d(n, "avg")


@converter("aten.adaptive_avg_pool3d.default", "aten._adaptive_avg_pool3d.default")
def _adaptive_avg3d(n):
    x = n.input(0)
    out = tuple(n.shape[-3:])
    if x.checked_type.ndim != 5:
        raise Unsupported(f"adaptive_avg_pool3d of a {x.checked_type.ndim}-d input")
    if out == (1, 1, 1):
        return n.call("mean", x, axis=(2, 3, 4), keepdims=True)
    if out == tuple(x.checked_type.shape[-3:]):
        return x
    raise Unsupported(f"adaptive_avg_pool3d to {out} (only to 1x1x1 or the input's size)")


@converter("aten.adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d.default")
def _adaptive_avg(n):
    return _unbatched_pool(n, lambda n, x: _adaptive(n, "avg", x))


@converter("aten.adaptive_max_pool2d.default")
def _adaptive_max(n):
    def pool(n, x):
        # torch's adaptive windows: [floor(i * in / out), ceil((i + 1) * in / out))
        windows = [[range(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]
                   for size, out in zip(x.checked_type.shape[-2:], n.shape[-2:])]
        return _adaptive(n, "max", x), max_indices(n, x, *windows)
    return _unbatched_pool(n, pool)


# --- softmax ----------------------------------------------------------------------------------

def _softmax_like(n, op_name):
    x = n.input(0)
    dtype = n.kwargs.get("dtype")
    if dtype is not None or n.dtype != x.checked_type.dtype:
        x = n.cast(x, n.dtype)
    if x.checked_type.ndim == 0:
        # over the one element (1, or 0 for log_softmax; nan where x is not finite)
        y = n.call(op_name, n.call("reshape", x, newshape=(1,)), axis=0)
        return n.call("reshape", y, newshape=())
    return n.call(op_name, x, axis=int(n.arg(1, "dim")))


@converter("aten.softmax.int", "aten._softmax.default")
def _softmax(n):
    return _softmax_like(n, "nn.softmax")


@converter("aten._safe_softmax.default")
def _safe_softmax(n):
    # softmax, but 0 rather than nan along rows that are -inf throughout (fully masked)
    y = _softmax_like(n, "nn.softmax")
    x = n.cast(n.input(0), n.dtype)
    if x.checked_type.ndim == 0:
        masked = n.call("equal", x, n.scalar(-np.inf, n.dtype))
    else:
        axis = int(n.arg(1, "dim")) % x.checked_type.ndim
        masked = n.call("equal", n.call("max", x, axis=(axis,), keepdims=True),
                        n.scalar(-np.inf, n.dtype))
    return n.call("where", masked, n.scalar(0, n.dtype), y)


@converter("aten.log_softmax.int", "aten._log_softmax.default")
def _log_softmax(n):
    return _softmax_like(n, "nn.log_softmax")


# --- resize -----------------------------------------------------------------------------------

def _integral_scales(n, scales) -> bool:
    """Whether every given scale factor maps the input size onto the output size exactly:
    otherwise torch samples with 1 / scale, not in / out, which image.resize2d cannot say."""
    x = n.input(0)
    return all(s is None or i * s == o for s, i, o in
               zip(scales or (), x.checked_type.shape[2:], n.shape[2:]))


def _scale_of(size, out, scale):
    """torch's compute_scales_value: the float32 step from one output index to the next in
    input coordinates: 1 / scale when given, else in / out."""
    if scale is not None and scale > 0:
        return np.float32(1.0 / scale)
    return np.float32(size) / np.float32(out)


def _nearest_index(size, out, scale):
    """torch's nearest_idx for each output index along one axis."""
    i = np.arange(out)
    if out == size:
        return i
    if out == 2 * size:
        return i >> 1
    step = _scale_of(size, out, scale)
    return np.minimum(np.floor(i.astype(np.float32) * step).astype(np.int64), size - 1)


def _linear_taps(size, out, scale):
    """torch's (index0, index1, weight0, weight1) of linear interpolation along one axis,
    align_corners=False, computed in float32 as torch does."""
    step = _scale_of(size, out, scale)
    real = step * (np.arange(out).astype(np.float32) + np.float32(0.5)) - np.float32(0.5)
    real = np.maximum(real, np.float32(0))
    index = np.minimum(np.floor(real).astype(np.int64), size - 1)
    weight = np.clip(real - index.astype(np.float32), np.float32(0), np.float32(1))
    return index, index + (index < size - 1), np.float32(1) - weight, weight


def _upsample_gather(n, x, method, scales):
    """Resizing as torch computes it for scale factors that do not divide the sizes: each
    output row and column read (and, for linear, weighted) through constant index tables."""
    (h, w), (oh, ow) = x.checked_type.shape[2:], n.shape[2:]
    scales = list(scales) + [None] * (2 - len(scales))
    if method == "nearest":
        rows = n.call("take", x, const(_nearest_index(h, oh, scales[0])), axis=2)
        return n.call("take", rows, const(_nearest_index(w, ow, scales[1])), axis=3)
    r0, r1, h0, h1 = _linear_taps(h, oh, scales[0])
    c0, c1, w0, w1 = _linear_taps(w, ow, scales[1])

    def along_width(rows):
        # x[.., c0] * w0 + x[.., c1] * w1, torch's order of operations
        return n.call("add", n.call("multiply", n.call("take", rows, const(c0), axis=3),
                                    const(w0)),
                      n.call("multiply", n.call("take", rows, const(c1), axis=3), const(w1)))

    top = along_width(n.call("take", x, const(r0), axis=2))
    bottom = along_width(n.call("take", x, const(r1), axis=2))
    return n.call("add", n.call("multiply", top, const(h0[:, None])),
                  n.call("multiply", bottom, const(h1[:, None])))


@converter("aten.upsample_nearest2d.vec", "aten.upsample_nearest2d.default")
def _upsample_nearest(n):
    scales = n.arg(2) if str(n.fx.target).endswith(".vec") else (n.arg(2), n.arg(3))
    if not _integral_scales(n, scales):
        return _upsample_gather(n, n.input(0), "nearest", scales)
    return n.call("image.resize2d", n.input(0), size=n.shape[2:], method="nearest",
                  coordinate_transformation_mode="asymmetric", rounding_method="floor")


@converter("aten.upsample_bilinear2d.vec", "aten.upsample_bilinear2d.default")
def _upsample_bilinear(n):
    align = bool(n.arg(2, "align_corners", False))
    scales = n.arg(3) if str(n.fx.target).endswith(".vec") else (n.arg(3), n.arg(4))
    # with align_corners torch ignores the scale factors
    if not align and not _integral_scales(n, scales):
        return _upsample_gather(n, n.input(0), "linear", scales)
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
    dropout_p = float(n.arg(4, "dropout_p", 0.0))
    if dropout_p != 0.0 and n.random is None:
        raise Unsupported("attention with dropout_p > 0 (random; kiln.torch.optimize(..., "
                          "training=True) compiles it)")
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
    weights = n.call("nn.softmax", scores, axis=-1)
    if dropout_p == 1.0:            # as eager's math path: attention weights times zero
        weights = n.call("multiply", weights, n.scalar(0.0, dt))
    elif dropout_p != 0.0:          # ... or times a dropout mask of their shape
        weights = n.call("multiply", weights, n.random.dropout_mask(weights, dropout_p))
    return matmul(n, weights, v)

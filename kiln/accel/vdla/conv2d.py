"""Int8 conv2d with requantization on VDLA: compute, packed layouts and schedule.

y = clip(conv(x, w) >> shift, -128, 127) (from 0 with relu), int8, with channels in blocks of
16 so that every buffer entry is one pixel's 16 channels: data (N, C/16, H, W, 16), weights
(O/16, C/16, KH, KW, 16, 16) and output (N, O/16, OH, OW, 16). Each GEMM micro-op multiplies
one input pixel's channel block by a weight block into one output pixel's block.

The schedule tiles the output into `rows` output rows × `out_blocks` channel blocks (whole
output width) and accumulates over chunks of `in_blocks` input channel blocks. A chunk's
input window is loaded with its zero padding (LOAD's pads) and its weights beside it; with
`vthreads` > 1 the tile's rows are split among virtual threads, each loading its own window.

Example:
    >>> s, args = schedule_conv2d(1, 32, 14, 14, 32, 3, 1, 1, rows=7, out_blocks=1)
"""
from __future__ import annotations

import numpy as np

from ... import te
from .isa import VDLAConfig
from .placement import place, requantize


def pack_data(x: np.ndarray, block: int = 16) -> np.ndarray:
    """NCHW int8 -> (N, C/16, H, W, 16)."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def pack_kernel(w: np.ndarray, block: int = 16) -> np.ndarray:
    """OIHW int8 -> (O/16, I/16, KH, KW, 16 out, 16 in)."""
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // block, block, i // block, block, kh, kw)
                                .transpose(0, 2, 4, 5, 1, 3))


def unpack_output(y: np.ndarray) -> np.ndarray:
    """(N, O/16, OH, OW, 16) -> NCHW."""
    n, ob, oh, ow, b = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, ob * b, oh, ow)


def conv_int64(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """numpy's exact NCHW convolution of integer arrays (OIHW weights), in int64.

    Example:
        >>> conv_int64(np.ones((1, 1, 3, 3), np.int8), np.ones((1, 1, 3, 3), np.int8), 1, 0)
        array([[[[9]]]])
    """
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    acc = np.zeros((n, o, oh, ow), np.int64)
    for r in range(kh):
        for s in range(kw):
            patch = xp[:, :, r:r + stride * oh:stride, s:s + stride * ow:stride]
            acc += np.einsum("nchw,oc->nohw", patch, w[:, :, r, s].astype(np.int64))
    return acc


def reference(x: np.ndarray, w: np.ndarray, stride: int, pad: int, shift: int,
              relu: bool = False) -> np.ndarray:
    """numpy's requantized convolution, NCHW int8 (with `relu`, clipped to [0, 127])."""
    return np.clip(conv_int64(x, w, stride, pad) >> shift, 0 if relu else -128,
                   127).astype(np.int8)


def conv_geometry(height: int, width: int, kernel: int, stride: int, pad: int):
    """(output rows, output columns) of a square-kernel convolution."""
    return (height + 2 * pad - kernel) // stride + 1, (width + 2 * pad - kernel) // stride + 1


def fits(tile, channels: int, height: int, width: int, out_channels: int, kernel: int,
         stride: int, pad: int, vthreads: int, config: VDLAConfig = VDLAConfig()) -> bool:
    """Whether a tile (rows, output blocks, input blocks, split) divides the output and every
    virtual thread's accumulators, input window and weights fit VDLA's buffers.

    Example:
        >>> fits((8, 2, 2, "rows"), 64, 56, 56, 64, 3, 1, 1, vthreads=2)
        True
    """
    rows, obt, ibt, split = tile
    oh, ow = conv_geometry(height, width, kernel, stride, pad)
    cb, ob = channels // config.block_in, out_channels // config.block_out
    if oh % rows or ob % obt or cb % ibt or (rows if split == "rows" else obt) % vthreads:
        return False
    per_rows = rows // vthreads if split == "rows" else rows
    per_blocks = obt // vthreads if split == "blocks" else obt
    acc = 2 * per_rows * ow * per_blocks                   # accumulators + requantized
    window = ibt * ((per_rows - 1) * stride + kernel) * ((ow - 1) * stride + kernel)
    wgt = per_blocks * ibt * kernel * kernel
    return (vthreads * acc <= config.acc_entries and vthreads * window <= config.inp_entries
            and vthreads * wgt <= config.wgt_entries)


def default_tiling(channels: int, height: int, width: int, out_channels: int, kernel: int,
                   stride: int, pad: int, vthreads: int = 2,
                   config: VDLAConfig = VDLAConfig()):
    """The tile that fits (see `fits`) with the most output per load: most output pixels ×
    blocks, then most input blocks per chunk, virtual threads splitting rows before blocks.
    Returns (rows, output blocks, input blocks, split).

    Example:
        >>> default_tiling(64, 56, 56, 64, 3, 1, 1)
        (4, 4, 4, 'rows')
    """
    oh, _ = conv_geometry(height, width, kernel, stride, pad)
    cb, ob = channels // config.block_in, out_channels // config.block_out
    best = None
    for rows in _divisors(oh):
        for obt in _divisors(ob):
            for ibt in _divisors(cb):
                for split in ("rows", "blocks"):
                    tile = (rows, obt, ibt, split)
                    if fits(tile, channels, height, width, out_channels, kernel, stride, pad,
                            vthreads, config):
                        key = (rows * obt, ibt, split == "rows")
                        if best is None or key > best[0]:
                            best = (key, tile)
    if best is None:
        raise ValueError(f"VDLA conv2d: no tiling of a {height}x{width} {channels}->"
                         f"{out_channels} kernel-{kernel} stride-{stride} convolution with "
                         f"{vthreads} virtual threads fits VDLA's buffers")
    return best[1]


def _divisors(n: int) -> list:
    return [d for d in range(n, 0, -1) if n % d == 0]


def schedule_conv2d(batch: int, channels: int, height: int, width: int, out_channels: int,
                    kernel: int, stride: int, pad: int, rows: int = 1, out_blocks: int = 1,
                    in_blocks: int = 1, vthreads: int = 1, split: str = "rows", shift: int = 8,
                    relu: bool = False):
    """(schedule, [data, kernel, output]) of the tiled convolution for target "vdla"; the
    virtual threads share out the tile's `split`: "rows" or output channel "blocks". The
    output is clip(conv >> shift, -128, 127), or with `relu` clip(conv >> shift, 0, 127).

    Example:
        >>> s, args = schedule_conv2d(1, 64, 56, 56, 64, 3, 1, 1, rows=8, out_blocks=2,
        ...                           in_blocks=2, vthreads=2)
    """
    config = VDLAConfig()
    b = config.block_in
    if channels % b or out_channels % config.block_out:
        raise ValueError(f"VDLA conv2d: channels ({channels}) and out_channels "
                         f"({out_channels}) must be multiples of {b}")
    oh, ow = conv_geometry(height, width, kernel, stride, pad)
    cb, ob = channels // b, out_channels // b
    if split not in ("rows", "blocks"):
        raise ValueError(f"VDLA conv2d: virtual threads split 'rows' or 'blocks', not {split!r}")
    if oh % rows or ob % out_blocks or cb % in_blocks or \
            (rows if split == "rows" else out_blocks) % vthreads:
        raise ValueError(f"VDLA conv2d: tiles of {rows} rows, {out_blocks} output and "
                         f"{in_blocks} input channel blocks, {vthreads} virtual threads do not "
                         f"divide a {oh}x{ow} output of {ob} blocks from {cb} input blocks")
    data = te.placeholder((batch, cb, height, width, b), "int8", name="data")
    weight = te.placeholder((ob, cb, kernel, kernel, b, b), "int8", name="weight")
    data_buf = te.compute((batch, cb, height + 2 * pad, width + 2 * pad, b), lambda n, c, y, x, i:
                          te.if_then_else(te.all(y >= pad, y < height + pad, x >= pad,
                                                 x < width + pad),
                                          data[n, c, y - pad, x - pad, i], te.const(0, "int8")),
                          name="data_buf")
    weight_buf = te.compute(weight.shape, lambda *i: weight(*i), name="weight_buf")
    rc = te.reduce_axis((0, cb), name="rc")
    ry = te.reduce_axis((0, kernel), name="ry")
    rx = te.reduce_axis((0, kernel), name="rx")
    ri = te.reduce_axis((0, b), name="ri")
    acc = te.compute((batch, ob, oh, ow, b), lambda n, o, y, x, j: te.sum(
        data_buf[n, rc, y * stride + ry, x * stride + rx, ri].astype("int32")
        * weight_buf[o, rc, ry, rx, j, ri].astype("int32"), axis=[rc, ry, rx, ri]), name="acc")
    req, out = requantize(acc, shift, "out", relu)

    s = te.create_schedule(out.op)
    n, o, y, x, j = out.op.axis
    oo, oi = s[out].split(o, factor=out_blocks)
    yo, yi = s[out].split(y, factor=rows)
    s[out].reorder(n, oo, yo, oi, yi, x, j)
    host, store = yo, oi
    if vthreads > 1 and split == "rows":
        tv, yi = s[out].split(yi, nparts=vthreads)
        s[out].reorder(tv, oi, yi)
    elif vthreads > 1:
        tv, oi = s[out].split(oi, nparts=vthreads)
    if vthreads > 1:
        s[out].bind(tv, te.thread_axis("vthread"))
        host, store = tv, oi
    an, ao, ay, ax, aj = s[acc].op.axis
    rc_, ry_, rx_, ri_ = s[acc].op.reduce_axis
    rco, rci = s[acc].split(rc_, factor=in_blocks)
    s[acc].reorder(rco, rci, ry_, rx_, an, ao, ay, ax, aj, ri_)
    place(s, (data_buf, weight_buf), acc, req, out, host, store, rco, aj)
    return s, [data, weight, out]

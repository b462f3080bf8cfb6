"""GPU schedule of conv2d NCHW (plain, grouped, depthwise) with its fused epilogue: the direct
convolution of the TVM paper's GPU templates. A block computes a tile of output channels x rows x columns;
each of its threads a register tile of it, repeated over virtual threads whose tiles
interleave (§4.4); the padded input and the weights of one step of the reduction (input
channels x kernel rows x kernel columns) pass through shared memory, fetched by all the
block's threads together.

The tile comes from a tuning log (autotvm's "conv2d_nchw.gpu", "group_conv2d_nchw.gpu" and
"depthwise_conv2d_nchw.gpu" templates). Without one the
generic schedule (one thread per output element) runs: on an H100, ResNet-18 took 3.31 ms with
one fixed tile of this schedule for all its convolutions and 1.51 ms with the generic one, so
the tile is the tuner's to choose per shape.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import te
from .. import tags
from ..utils import get_const_tuple, tuned_values
from .generic import schedule_generic
from .tiling import cooperative_fetch, single_anchor, stage_operands


@dataclass(frozen=True)
class ConvTile:
    """One point of the schedule. Along output channels (f), rows (y) and columns (x): the
    virtual threads, threads and outputs per thread of a block, (vthread, threads, inner);
    the reduction steps per shared-memory fetch along input channels (rc), kernel rows (ry)
    and kernel columns (rx); the auto-unroll limit of a thread's loops (0: none)."""
    f: tuple
    y: tuple
    x: tuple
    rc: int
    ry: int
    rx: int
    unroll: int = 0

    @property
    def threads(self) -> int:
        return self.f[1] * self.y[1] * self.x[1]


CONV_TAGS = (tags.CONV2D_NCHW, tags.GROUP_CONV2D_NCHW, tags.DEPTHWISE_CONV2D_NCHW)


def schedule_conv2d_nchw(outs):
    """The tuned direct schedule of a fused conv2d_nchw when a tuning log has its tile, else
    the generic GPU schedule.

    Example:
        >>> s = schedule_conv2d_nchw([topi.nn.relu(topi.nn.conv2d_nchw(x, w, 1, 1, 1))])  # doctest: +SKIP
    """
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    conv = single_anchor(outs, CONV_TAGS)
    tile = tuned_values(conv) if conv is not None else None
    return schedule_generic(outs) if tile is None else schedule_conv2d_tile(outs, conv, tile)


def schedule_conv2d_tile(outs, conv, tile: ConvTile):
    """The direct schedule of a fused conv2d_nchw (`conv`, behind the single output) with
    `tile`.

    Example:
        >>> t = ConvTile((1, 4, 2), (1, 4, 1), (1, 8, 1), rc=8, ry=1, rx=3)
        >>> s = schedule_conv2d_tile([y], conv.op, t)      # doctest: +SKIP
    """
    s, out, local, (data_shared, kernel_shared) = stage_operands(outs, conv)

    n, f, y, x = out.op.axis
    names = ("z", "y", "x")
    threads = [te.thread_axis((0, t), f"threadIdx.{a}") for (_, t, _), a in
               zip((tile.f, tile.y, tile.x), names)]
    blocks, vthreads, thread_loops, inner_loops = [], [], [], []
    for axis, (v, t, inner), a in zip((f, y, x), (tile.f, tile.y, tile.x), names):
        b, rest = out.split(axis, factor=v * t * inner)
        if v > 1:
            vv, rest = out.split(rest, nparts=v)
            vthreads.append((vv, te.thread_axis((0, v), "vthread", name=f"v{a}")))
        tt, ii = out.split(rest, nparts=t)
        blocks.append(b)
        thread_loops.append(tt)
        inner_loops.append(ii)
    out.reorder(n, *blocks, *(vv for vv, _ in vthreads), *thread_loops, *inner_loops)
    out.bind(out.fuse(n, blocks[0]), te.thread_axis("blockIdx.z"))
    out.bind(blocks[1], te.thread_axis("blockIdx.y"))
    out.bind(blocks[2], te.thread_axis("blockIdx.x"))
    for vv, vthread in vthreads:
        out.bind(vv, vthread)
    for loop, thread in zip(thread_loops, threads):
        out.bind(loop, thread)
    if tile.unroll:
        out.pragma(thread_loops[0], "auto_unroll_max_step", tile.unroll)

    local.compute_at(out, thread_loops[-1])
    # (rc, ry, rx); a depthwise convolution reduces over (ry, rx) only
    steps = (tile.rc, tile.ry, tile.rx)[-len(local.op.reduce_axis):]
    outer, inner = zip(*(local.split(r, factor=f) for r, f in zip(local.op.reduce_axis, steps)))
    local.reorder(*outer, *inner, *local.op.axis)
    extents = (tile.x[1], tile.y[1], tile.f[1])
    for st in (data_shared, kernel_shared):
        st.compute_at(local, outer[-1])
        cooperative_fetch(st, list(zip(reversed(threads), extents)))
    return s


def default_conv_tile(conv) -> ConvTile:
    """A tile that fits any conv2d_nchw within 64 threads and a few KiB of shared memory: the
    tuning template's default, not a fast schedule (see the module's docstring).

    Example:
        >>> default_conv_tile(y.op)                              # doctest: +SKIP
        ConvTile(f=(1, 4, 2), y=(1, 4, 1), x=(1, 4, 1), rc=8, ry=1, rx=3, unroll=0)
    """
    _, f, h, w = (int(d) for d in get_const_tuple(conv.output(0).shape))
    rc, ry, rx = reduce_extents(conv)
    tx = _pow2_at_most(min(w, 8))
    ty = _pow2_at_most(min(h, 8))
    tf = _pow2_at_most(min(f, max(1, 64 // (tx * ty))))
    fi = _pow2_at_most(min(max(1, f // tf), 2))
    return ConvTile((1, tf, fi), (1, ty, 1), (1, tx, 1), rc=_pow2_at_most(min(rc, 8)), ry=1,
                    rx=rx)


def reduce_extents(conv) -> tuple:
    """(input channels, kernel rows, kernel columns) a convolution reduces over; 1 input
    channel for a depthwise one.

    Example:
        >>> reduce_extents(depthwise.op)                  # doctest: +SKIP
        (1, 3, 3)
    """
    extents = tuple(int(get_const_tuple((r.dom.extent,))[0]) for r in conv.reduce_axis)
    return (1,) * (3 - len(extents)) + extents


def _pow2_at_most(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)

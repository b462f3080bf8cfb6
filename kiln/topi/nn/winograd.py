"""Winograd convolution F(m x m, 3 x 3) (Lavin & Gray 2015) in the blocked layout NCHW[x]c,
for 3x3 stride-1 undilated convolutions.

An output tile of m x m pixels comes from an alpha x alpha input tile (alpha = m + 2):

    Y = A^T [ (G g G^T) . (B^T d B) ] A        (. : elementwise over the alpha x alpha points)

Stages (P = N * tiles_h * tiles_w tiles, tile p = (n, th, tw) row-major):

    data_pad [N, C/ic, th*m + 2, tw*m + 2, ic]        zero padding (covers the last tile)
    VR [alpha, alpha, C/ic, P, ic]       input transform, columns: B^T d (point e1, column s)
    V  [alpha, alpha, C/ic, P, ic]       input transform, rows: (B^T d) B
    U  [alpha, alpha, O/oc, C/ic, ic, oc]   the weight G g G^T, transformed offline (numpy)
    M  [alpha, alpha, O/oc, P, oc]       per point: a GEMM over the input channels
    MC [alpha, m, O/oc, P, oc]           output transform, rows: M A (point e1, pixel x)
    out [N, O/oc, OH, OW, oc]            output transform, columns: A^T (M A)
                                         (tag "conv2d_winograd_nchwc")

Each transform is two 1-D passes (winograd_stages names them), written out term by term with
their constant coefficients (zero terms dropped, +-1 without a multiply): each stage's body
is a select over one index, which folds to one short sum once the schedule unrolls it. As one
2-D pass, F(4x4)'s input transform was one expression of 484 loads (36 points of up to 16
terms under a 36-way select) for the simplifier, and 484 terms per tile for LLVM; the
separable form has 22 loads per stage and 264 terms per tile (the output transform 180
instead of 324). Multiplies saved: 2.25x (m = 2) or 4x (m = 4); float32 error grows with m
(F(4x4) loses a few bits).

Example:
    >>> from kiln import te
    >>> x = te.placeholder((1, 4, 56, 56, 16)); u = te.placeholder((6, 6, 4, 4, 16, 16))
    >>> conv2d_winograd_nchwc(x, u, padding=1).shape
    (1, 4, 56, 56, 16)
"""
from __future__ import annotations

import math
from fractions import Fraction as Fr
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from ... import te
from ..utils import TopiError, get_const_tuple
from .conv2d import _conv_attrs, pad_spatial
from .conv2d_nchwc import group_blocks

CONV2D_WINOGRAD_NCHWC = "conv2d_winograd_nchwc"

# (B^T, G, A^T) per output tile size m, exact fractions (Lavin & Gray 2015, points 0, +-1,
# +-2 and infinity for m = 4; 0, +-1 and infinity for m = 2).
_MATRICES = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [Fr(1, 2), Fr(1, 2), Fr(1, 2)], [Fr(1, 2), Fr(-1, 2), Fr(1, 2)], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[Fr(1, 4), 0, 0], [Fr(-1, 6), Fr(-1, 6), Fr(-1, 6)], [Fr(-1, 6), Fr(1, 6), Fr(-1, 6)],
         [Fr(1, 24), Fr(1, 12), Fr(1, 6)], [Fr(1, 24), Fr(-1, 12), Fr(1, 6)], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}


def winograd_matrices(tile: int):
    """(B^T, G, A^T) of F(tile x tile, 3 x 3) as float64 arrays, shapes (a, a), (a, 3),
    (tile, a) with a = tile + 2.

    Example:
        >>> [m.shape for m in winograd_matrices(2)]
        [(4, 4), (4, 3), (2, 4)]
    """
    _check_tile(tile)
    return tuple(np.array([[float(v) for v in row] for row in m]) for m in _MATRICES[tile])


def _check_tile(tile: int) -> None:
    if tile not in _MATRICES:
        raise TopiError(f"winograd: output tile must be one of {sorted(_MATRICES)}, got {tile}")


def winograd_weight_transform_numpy(w_oihw: np.ndarray, tile: int, in_block: int,
                                    out_block: int) -> np.ndarray:
    """OIHW 3x3 weight -> U = G w G^T packed as [a, a, O/oc, I/ic, ic, oc] (a = tile + 2),
    computed in float64 and returned in the weight's dtype; done once, at compile time.

    Example:
        >>> winograd_weight_transform_numpy(np.zeros((32, 16, 3, 3)), 4, 16, 16).shape
        (6, 6, 2, 1, 16, 16)
    """
    w = np.asarray(w_oihw)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise TopiError(f"winograd_weight_transform_numpy: weight must be [O, I, 3, 3], "
                        f"got {w.shape}")
    o, i = w.shape[:2]
    for channels, block, what in ((o, out_block, "output"), (i, in_block, "input")):
        if block < 1 or channels % block:
            raise TopiError(f"winograd_weight_transform_numpy: {channels} {what} channels are "
                            f"not a multiple of block {block}")
    kernel, denominator = _integer_weight_kernel(tile)
    a = tile + 2
    out = np.empty((a, a, o // out_block, i // in_block, in_block, out_block), dtype=w.dtype)
    rows = w.reshape(o // out_block, out_block * i, 9)
    block = np.empty((a * a, out_block * i))        # one output block, float64, reused
    for b in range(o // out_block):
        for s in range(0, out_block * i, _KERNELS_PER_PRODUCT):
            cols = slice(s, s + _KERNELS_PER_PRODUCT)
            np.matmul(kernel, rows[b, cols].T, out=block[:, cols])
        block /= denominator
        out[:, :, b] = block.reshape(a, a, out_block, i // in_block, in_block) \
            .transpose(0, 1, 3, 4, 2)
    return out


# Kernels per (a*a, 9) x (9, n) product: few enough that OpenBLAS runs it on one thread
# (under 65536 * 4 multiply-adds). Its threads spin-wait, and on a busy 2-core machine one
# product per weight took 6x longer than these chunks (0.21 s against 0.035 s for
# ResNet-18's 13 weights); the float64 block also stays in cache.
_KERNELS_PER_PRODUCT = 768


@lru_cache(maxsize=None)
def _integer_weight_kernel(tile: int):
    """(K, d) with K = kron(d G, d G) in integers (as float64, read-only) and d the least
    common denominator of G's entries, so that G w G^T = (K @ vec(w)) / d^2.

    Integer coefficients keep the nine-term sums of float32 weights exact (unless a kernel's
    weights span more than ~2^15 in magnitude), so the one division rounds correctly and the
    result does not depend on how the BLAS orders its sums (the old float64 einsum with G's
    rounded fractions missed the nearest float32 on ~0.5% of F(4x4) entries)."""
    _check_tile(tile)
    g = [[Fr(v) for v in row] for row in _MATRICES[tile][1]]
    d = math.lcm(*(v.denominator for row in g for v in row))
    g_int = np.array([[float(v * d) for v in row] for row in g])
    kernel = np.kron(g_int, g_int)
    kernel.setflags(write=False)
    return kernel, float(d * d)


def _weighted_sum(terms, dtype):
    """sum(c * x) over (c, x) with c a nonzero Fraction; +-1 need no multiply. A positive
    term goes first, so the sum does not start with a negation."""
    terms = sorted(terms, key=lambda t: t[0] < 0)
    total = None
    for c, x in terms:
        if c == 1 or c == -1:
            term = x
        else:
            term = te.const(float(abs(c)), dtype) * x
        if total is None:
            total = -term if c < 0 else term
        else:
            total = total - term if c < 0 else total + term
    return total if total is not None else te.const(0.0, dtype)


def _transform_1d(matrix, i, read, dtype):
    """sum_r matrix[i][r] * read(r) for an index expression i: a select chain over the rows
    of `matrix` that folds to one sum when i is a constant after unrolling."""
    sums = [_weighted_sum([(c, read(r)) for r, c in enumerate(row) if c != 0], dtype)
            for row in matrix]
    result = sums[-1]
    for a in range(len(sums) - 2, -1, -1):
        result = te.if_then_else(i == a, sums[a], result)
    return result


class WinogradStages(NamedTuple):
    """The stages of conv2d_winograd_nchwc, from its output back (module docstring)."""

    output_rows: te.Tensor      # MC: M A
    gemm: te.Tensor             # M
    kernel: te.Tensor           # U
    input: te.Tensor            # V: (B^T d) B
    input_columns: te.Tensor    # VR: B^T d
    padded: te.Tensor           # data_pad, or the data when nothing pads


def winograd_stages(anchor_op) -> WinogradStages:
    """The stages behind a conv2d_winograd_nchwc output op, for schedules and templates.

    Example:
        >>> winograd_stages(y.op).gemm.shape   # doctest: +SKIP
        (6, 6, 4, 49, 16)
    """
    (output_rows,) = anchor_op.input_tensors()
    (gemm,) = output_rows.op.input_tensors()
    v, kernel = gemm.op.input_tensors()
    (columns,) = v.op.input_tensors()
    (padded,) = columns.op.input_tensors()
    return WinogradStages(output_rows, gemm, kernel, v, columns, padded)


def winograd_tiles(oh: int, ow: int, tile: int) -> tuple:
    """(tiles_h, tiles_w) of an oh x ow output in tile x tile tiles (the last ones partial).

    Example:
        >>> winograd_tiles(14, 14, 4)
        (4, 4)
    """
    return -(-oh // tile), -(-ow // tile)


def conv2d_winograd_nchwc(data, kernel, strides=1, padding=0, dilation=1, out_dtype=None):
    """3x3 stride-1 convolution of blocked data [N, C/ic, H, W, ic] by Winograd F(m x m, 3x3)
    with the transformed weight [a, a, O/oc, C/(G ic), ic, oc] (a = m + 2, from
    `winograd_weight_transform_numpy`; G groups, channel blocks inside groups as in
    conv2d_nchwc: each point's GEMM runs over the input blocks of the output block's group);
    output [N, O/oc, OH, OW, oc] tagged "conv2d_winograd_nchwc".

    Example:
        >>> y = conv2d_winograd_nchwc(x, u, padding=1)  # doctest: +SKIP
    """
    op = CONV2D_WINOGRAD_NCHWC
    if data.ndim != 5 or kernel.ndim != 6:
        raise TopiError(f"{op}: data must be 5-D and the transformed kernel 6-D, got "
                        f"{tuple(data.shape)} and {tuple(kernel.shape)}")
    n, cb, h, w, ic = get_const_tuple(data.shape)
    alpha, alpha2, ob, kcb, kic, oc = get_const_tuple(kernel.shape)
    tile = alpha - 2
    if alpha != alpha2 or tile not in _MATRICES:
        raise TopiError(f"{op}: the transformed kernel {tuple(kernel.shape)} must start with "
                        f"a x a, a = m + 2 for a tile m in {sorted(_MATRICES)}")
    groups, in_block = group_blocks(op, data, kernel, ob, kcb, kic)
    strides, dilation, pads = _conv_attrs((3, 3), strides, padding, dilation, op)
    if strides != (1, 1) or dilation != (1, 1):
        raise TopiError(f"{op}: Winograd needs stride 1 and dilation 1, got strides "
                        f"{strides}, dilation {dilation}")
    top, left, bottom, right = pads
    oh, ow = h + top + bottom - 2, w + left + right - 2
    if oh < 1 or ow < 1:
        raise TopiError(f"{op}: the output would be empty ({oh}x{ow}) for input {h}x{w}")
    out_dtype = out_dtype or data.dtype
    th, tw = winograd_tiles(oh, ow, tile)
    ntiles = n * th * tw
    bt, _, at = _MATRICES[tile]
    # Pad to whole tiles: the extra rows/columns only feed outputs that are never stored.
    pad = pad_spatial(data, (top, left, th * tile + 2 - h - top, tw * tile + 2 - w - left),
                      "NCHW")

    def vr_compute(e1, s, c, p, ci):
        b, rest = p // (th * tw), p % (th * tw)
        y0, x0 = (rest // tw) * tile, (rest % tw) * tile
        return _transform_1d(bt, e1, lambda r: te.cast(pad[b, c, y0 + r, x0 + s, ci], out_dtype),
                             out_dtype)

    vr = te.compute((alpha, alpha, cb, ntiles, ic), vr_compute, name="winograd_input_columns",
                    tag="winograd_input_columns")
    v = te.compute((alpha, alpha, cb, ntiles, ic),
                   lambda e1, e2, c, p, ci: _transform_1d(
                       bt, e2, lambda s: vr[e1, s, c, p, ci], out_dtype),
                   name="winograd_input", tag="winograd_input")
    rc = te.reduce_axis((0, kcb), name="rc")
    rci = te.reduce_axis((0, ic), name="rci")
    m = te.compute((alpha, alpha, ob, ntiles, oc),
                   lambda e1, e2, f, p, fi: te.sum(
                       v[e1, e2, in_block(f, rc), p, rci] * te.cast(kernel[e1, e2, f, rc, rci, fi],
                                                                out_dtype), axis=[rc, rci]),
                   name="winograd_gemm", tag="winograd_gemm")
    attrs = {"strides": strides, "padding": pads, "dilation": dilation, "groups": groups,
             "in_block": ic, "out_block": oc, "tile": tile}

    mc = te.compute((alpha, tile, ob, ntiles, oc),
                    lambda e1, xi, f, p, fi: _transform_1d(
                        at, xi, lambda e2: m[e1, e2, f, p, fi], out_dtype),
                    name="winograd_output_rows", tag="winograd_output_rows")

    def y_compute(b, f, y, x, fi):
        p = b * (th * tw) + (y // tile) * tw + x // tile
        return _transform_1d(at, y % tile, lambda e1: mc[e1, x % tile, f, p, fi], out_dtype)

    return te.compute((n, ob, oh, ow, oc), y_compute, name=op, tag=op, attrs=attrs)

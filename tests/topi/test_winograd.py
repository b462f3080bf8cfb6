"""Winograd F(m x m, 3x3) convolution in the blocked layout (kiln/topi/nn/winograd.py) with the
x86 schedule, against torch.nn.functional.conv2d in float64.

Tolerance: the transforms scale values up and down (F(4x4): B^T entries up to 5, A^T up to 8,
G down to 1/24), so float32 rounding errors are amplified relative to the direct sum. The error
is bounded relative to the output's magnitude, not per element: |got - ref| <= tol * max|ref|,
with tol = 5e-5 for m = 4 (measured up to 1.6e-5 on 512 channels) and 5e-6 for m = 2
(measured up to 9e-7); inputs in [-1, 1), up to 4608-term reductions.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kiln import te
from kiln.driver.lower import lower
from kiln.target import Target
from kiln.tir import Allocate, BufferLoad, BufferStore, For, post_order_visit
from kiln.topi import tags
from kiln.topi.nn.conv2d import get_pad_tuple
from kiln.topi.nn.conv2d_nchwc import nchw_to_nchwc, nchwc_to_nchw
from kiln.topi.nn.winograd import (CONV2D_WINOGRAD_NCHWC, conv2d_winograd_nchwc,
                                   winograd_matrices, winograd_stages, winograd_tiles,
                                   winograd_weight_transform_numpy)
from kiln.topi.utils import TopiError
from kiln.topi.x86.winograd import (schedule_conv2d_winograd_nchwc, use_winograd,
                                    winograd_tile)

TOL = {2: 5e-6, 4: 5e-5}
rng = np.random.default_rng(11)


def _rand(*shape):
    return rng.uniform(-1, 1, size=shape).astype("float32")


def _ref(x, w, pads):
    top, left, bottom, right = pads
    xt = F.pad(torch.from_numpy(x).double(), (left, right, top, bottom))
    return F.conv2d(xt, torch.from_numpy(w).double()).numpy()


def _check(got, ref, tile):
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err <= TOL[tile], f"max error {err:.2e} of max|ref| exceeds {TOL[tile]:.0e}"


@pytest.mark.parametrize("tile", [2, 4])
def test_matrices_give_1d_correlation(tile):
    """A^T [(G g) . (B^T d)] == correlate(d, g) for one tile, exactly up to float64 rounding."""
    bt, g, at = winograd_matrices(tile)
    d, k = rng.standard_normal(tile + 2), rng.standard_normal(3)
    want = np.array([d[i:i + 3] @ k for i in range(tile)])
    np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, rtol=1e-12, atol=1e-12)


def test_weight_transform_layout():
    w = _rand(32, 16, 3, 3)
    u = winograd_weight_transform_numpy(w, 4, 16, 8)
    assert u.shape == (6, 6, 4, 1, 16, 8) and u.dtype == np.float32
    _, g, _ = winograd_matrices(4)
    # Output channel 13 = block 1, lane 5; input channel 7.
    np.testing.assert_allclose(u[:, :, 1, 0, 7, 5], g @ w[13, 7].astype(np.float64) @ g.T,
                               rtol=1e-6, atol=1e-7)


# (C, H, W, O), padding
CASES = [
    ((64, 56, 56, 64), 1),          # ResNet-18 layer1 (C2)
    ((128, 28, 28, 128), 1),        # C6
    ((16, 13, 17, 32), 1),          # partial tiles in both directions
    ((32, 9, 11, 16), (0, 1, 2, 1)),  # asymmetric padding, odd output
    ((16, 5, 5, 16), 0),            # no padding, 3x3 output (a single partial tile)
]


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("shape,padding", CASES)
def test_winograd_matches_conv(shape, padding, tile, build_run):
    c, h, w, o = shape
    x = te.placeholder((1, c // 16, h, w, 16), name="x")
    u = te.placeholder((tile + 2, tile + 2, o // 16, c // 16, 16, 16), name="u")
    y = conv2d_winograd_nchwc(x, u, 1, padding)
    assert y.op.tag == CONV2D_WINOGRAD_NCHWC
    xa, wa = _rand(1, c, h, w), _rand(o, c, 3, 3)
    got = build_run(schedule_conv2d_winograd_nchwc, y, [x, u],
                    [nchw_to_nchwc(xa, 16), winograd_weight_transform_numpy(wa, tile, 16, 16)])
    ref = _ref(xa, wa, get_pad_tuple(padding))
    assert got.shape == (1, o // 16) + ref.shape[2:] + (16,)
    _check(nchwc_to_nchw(got), ref, tile)


# (C, H, W, O, groups, block): channel blocks inside groups
GROUPED = [
    ((64, 14, 14, 64), 2, 16),      # 32 per group
    ((64, 9, 11, 32), 4, 8),        # 16 -> 8 per group, partial tiles
    ((96, 7, 7, 96), 3, 16),        # an odd group count: a tile's blocks straddle groups
]


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("shape,groups,block", GROUPED)
def test_grouped_winograd_matches_conv(shape, groups, block, tile, build_run):
    """Each point's GEMM runs over the input blocks of its output block's group."""
    c, h, w, o = shape
    x = te.placeholder((1, c // block, h, w, block), name="x")
    u = te.placeholder((tile + 2, tile + 2, o // block, c // groups // block, block, block),
                       name="u")
    y = conv2d_winograd_nchwc(x, u, 1, 1)
    assert y.op.attrs["groups"] == groups
    xa, wa = _rand(1, c, h, w), _rand(o, c // groups, 3, 3)
    got = build_run(schedule_conv2d_winograd_nchwc, y, [x, u],
                    [nchw_to_nchwc(xa, block),
                     winograd_weight_transform_numpy(wa, tile, block, block)])
    xt = F.pad(torch.from_numpy(xa).double(), (1, 1, 1, 1))
    ref = F.conv2d(xt, torch.from_numpy(wa).double(), groups=groups).numpy()
    _check(nchwc_to_nchw(got), ref, tile)


@pytest.mark.parametrize("tile", [2, 4])
def test_winograd_bias_relu_residual_epilogue(tile, build_run):
    """relu(conv + bias + residual) fused into the output transform."""
    c, h, o = 32, 14, 32
    x = te.placeholder((1, c // 16, h, h, 16), name="x")
    u = te.placeholder((tile + 2, tile + 2, o // 16, c // 16, 16, 16), name="u")
    b = te.placeholder((o // 16, 16), name="b")
    r = te.placeholder((1, o // 16, h, h, 16), name="r")
    y = conv2d_winograd_nchwc(x, u, 1, 1)
    added = te.compute(y.shape, lambda n, f, i, j, fi: y[n, f, i, j, fi] + b[f, fi]
                       + r[n, f, i, j, fi], name="bias_res", tag=tags.BROADCAST)
    out = te.compute(y.shape, lambda *i: te.max(added[i], te.const(0.0, "float32")),
                     name="relu", tag=tags.ELEMWISE)
    xa, wa, ba, ra = _rand(1, c, h, h), _rand(o, c, 3, 3), _rand(o), _rand(1, o, h, h)
    got = build_run(schedule_conv2d_winograd_nchwc, out, [x, u, b, r],
                    [nchw_to_nchwc(xa, 16), winograd_weight_transform_numpy(wa, tile, 16, 16),
                     ba.reshape(o // 16, 16), nchw_to_nchwc(ra, 16)])
    ref = np.maximum(_ref(xa, wa, (1, 1, 1, 1)) + ba[None, :, None, None] + ra, 0)
    _check(nchwc_to_nchw(got), ref, tile)


def test_winograd_two_outputs(build_run):
    """The conv itself and a consumer both outputs: the transform runs once, at the root."""
    x = te.placeholder((1, 1, 8, 8, 16), name="x")
    u = te.placeholder((6, 6, 1, 1, 16, 16), name="u")
    y = conv2d_winograd_nchwc(x, u, 1, 1)
    z = te.compute(y.shape, lambda *i: y[i] * 2.0, name="double", tag=tags.ELEMWISE)
    xa, wa = _rand(1, 16, 8, 8), _rand(16, 16, 3, 3)
    got_y, got_z = build_run(schedule_conv2d_winograd_nchwc, [y, z], [x, u],
                             [nchw_to_nchwc(xa, 16), winograd_weight_transform_numpy(wa, 4, 16,
                                                                                      16)])
    ref = _ref(xa, wa, (1, 1, 1, 1))
    _check(nchwc_to_nchw(got_y), ref, 4)
    _check(nchwc_to_nchw(got_z), 2 * ref, 4)


def test_winograd_errors():
    x = te.placeholder((1, 1, 8, 8, 16), name="x")
    with pytest.raises(TopiError, match="stride 1"):
        conv2d_winograd_nchwc(x, te.placeholder((6, 6, 1, 1, 16, 16)), 2, 1)
    with pytest.raises(TopiError, match="a x a"):
        conv2d_winograd_nchwc(x, te.placeholder((5, 5, 1, 1, 16, 16)), 1, 1)
    with pytest.raises(TopiError, match="input blocks"):
        conv2d_winograd_nchwc(x, te.placeholder((6, 6, 1, 2, 16, 16)), 1, 1)
    with pytest.raises(TopiError, match=r"\[O, I, 3, 3\]"):
        winograd_weight_transform_numpy(np.zeros((4, 4, 5, 5)), 4, 4, 4)
    with pytest.raises(TopiError, match="not a multiple of block"):
        winograd_weight_transform_numpy(np.zeros((24, 16, 3, 3)), 4, 16, 16)
    with pytest.raises(TopiError, match="output tile"):
        winograd_matrices(3)


def test_tiles_and_use_winograd(avx512):
    assert winograd_tiles(14, 14, 4) == (4, 4) and winograd_tiles(7, 5, 2) == (4, 3)
    s1, pad, dil = (1, 1), (1, 1, 1, 1), (1, 1)
    # ResNet-18's 3x3 stride-1 layers: measured faster (see kiln/topi/x86/winograd.py).
    for c, h in ((64, 56), (128, 28), (256, 14)):
        assert winograd_tile((1, c, h, h), (c, c, 3, 3), s1, pad, dil) == 4
        assert use_winograd((1, c, h, h), (c, c, 3, 3), s1, pad, dil)
    assert winograd_tile((1, 512, 7, 7), (512, 512, 3, 3), s1, pad, dil) == 2
    # 14x14 with 512 channels: F(4x4)'s 36/9 x weight traffic made it slower than F(2x2).
    assert winograd_tile((1, 512, 14, 14), (512, 512, 3, 3), s1, pad, dil) == 2
    # Not 3x3 stride 1, dilated, or channels that do not fill vector blocks: direct conv.
    assert not use_winograd((1, 64, 56, 56), (64, 64, 3, 3), (2, 2), pad, dil)
    assert not use_winograd((1, 64, 56, 56), (64, 64, 1, 1), s1, (0, 0, 0, 0), dil)
    assert not use_winograd((1, 64, 56, 56), (64, 64, 3, 3), s1, pad, (2, 2))
    assert not use_winograd((1, 3, 224, 224), (64, 3, 3, 3), s1, pad, dil)
    assert not use_winograd((1, 24, 56, 56), (24, 24, 3, 3), s1, pad, dil)
    # Grouped (measured on AVX2): F(4x4) up to 28 wide outputs, from 14 wide with 64 channels
    # per group, 28 wide with 32; never with fewer (the direct row tiles beat it) or depthwise.
    assert winograd_tile((1, 128, 28, 28), (128, 64, 3, 3), s1, pad, dil, groups=2) == 4
    assert winograd_tile((1, 128, 28, 28), (128, 32, 3, 3), s1, pad, dil, groups=4) == 4
    assert winograd_tile((1, 256, 14, 14), (256, 64, 3, 3), s1, pad, dil, groups=4) == 4
    assert winograd_tile((1, 1024, 7, 7), (1024, 64, 3, 3), s1, pad, dil, groups=16) == 0
    assert winograd_tile((1, 256, 56, 56), (256, 64, 3, 3), s1, pad, dil, groups=4) == 0
    assert winograd_tile((1, 512, 14, 14), (512, 32, 3, 3), s1, pad, dil, groups=16) == 0
    assert winograd_tile((1, 512, 14, 14), (512, 16, 3, 3), s1, pad, dil, groups=32) == 0
    assert winograd_tile((1, 64, 28, 28), (64, 16, 3, 3), s1, pad, dil, groups=4) == 0
    assert winograd_tile((1, 128, 56, 56), (128, 4, 3, 3), s1, pad, dil, groups=32) == 0
    assert winograd_tile((1, 64, 28, 28), (64, 1, 3, 3), s1, pad, dil, groups=64) == 0


@pytest.mark.parametrize("tile", [2, 4])
def test_transforms_are_two_short_passes(tile):
    """Each transform runs as two 1-D passes (winograd_stages): once unrolled, no store sums
    more than a = m + 2 loads (as one 2-D pass, F(4x4)'s input points summed up to 16 and
    its output pixels up to 25), and the first passes live in per-tile buffers of a x a
    vectors inside the tile loops, not in whole tensors at the root (a cut edge tile too: 14
    pixels in tiles of 4)."""
    x = te.placeholder((1, 2, 14, 14, 8), name="x")
    u = te.placeholder((tile + 2, tile + 2, 2, 2, 8, 8), name="u")
    y = conv2d_winograd_nchwc(x, u, 1, 1)
    stages = winograd_stages(y.op)
    assert stages.kernel is u and stages.gemm.op.tag == "winograd_gemm"
    with Target("llvm -mcpu=haswell"):
        f = lower(schedule_conv2d_winograd_nchwc([y]), [x, u, y], name="f")
    stores = _find(f.body, lambda n: isinstance(n, BufferStore))
    most = max(len(_find(st.value, lambda e: isinstance(e, BufferLoad))) for st in stores)
    assert 3 <= most <= tile + 2
    allocated = {n.buffer.name: n for n in _find(f.body, lambda n: isinstance(n, Allocate))}
    loops = _find(f.body, lambda n: isinstance(n, For))
    for first in (stages.input_columns, stages.output_rows):
        alloc = allocated[first.op.name]
        assert int(alloc.extent) <= (tile + 2) ** 2 * 8
        assert any(_find(loop.body, lambda n: n is alloc) for loop in loops), \
            f"{first.op.name} is allocated at the root"


def _find(stmt, pred):
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if pred(n) else None)
    return found

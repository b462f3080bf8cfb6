"""conv2d / depthwise conv2d in the blocked layout NCHW[x]c with the x86 register-tiled
schedule, against torch.nn.functional.conv2d (layouts converted in numpy).

Tolerances: float32 inputs in [-1, 1); reductions of up to 4608 terms (512 channels x 3x3)
for the ResNet shapes: rtol 1e-4, atol 2e-4 (values reach ~30 there); small cases 1e-4.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import kiln
from kiln import te
from kiln.topi import tags
from kiln.topi.nn.conv2d import get_pad_tuple
from kiln.topi.nn.conv2d_nchwc import (CONV2D_NCHWC, DEPTHWISE_CONV2D_NCHWC, channel_block,
                                       conv2d_nchwc, depthwise_conv2d_nchwc, nchw_to_nchwc,
                                       nchwc_to_nchw, pack_conv_kernel_numpy,
                                       pack_depthwise_kernel_numpy, pads_in_place, reduction_op)
from kiln.topi.utils import TopiError
from kiln.topi.x86.conv2d_nchwc import (channel_tile, default_tile, pixel_pass_tile,
                                        schedule_blocked_tile, schedule_conv2d_nchwc)
from kiln.topi.x86.utils import register_tile, schedule_by_tag

RTOL, ATOL = 1e-4, 2e-4


def torch_conv(x, w, stride, pads, dilation, groups=1):
    top, left, bottom, right = pads
    xt = F.pad(torch.from_numpy(x), (left, right, top, bottom))
    return F.conv2d(xt, torch.from_numpy(w), stride=stride, dilation=dilation,
                    groups=groups).numpy()


def packed_bias_relu(y, bias):
    """relu(y + bias[f, fi]) on a blocked output: broadcast + elementwise stages."""
    added = te.compute(y.shape, lambda n, f, h, w, fi: y[n, f, h, w, fi] + bias[f, fi],
                       name="bias_add", tag=tags.BROADCAST)
    return te.compute(y.shape, lambda *i: te.max(added[i], te.const(0, y.dtype)),
                      name="relu", tag=tags.ELEMWISE)


# (C, H, W), (O, kh, kw), strides, padding, dilation
CONV_CASES = [
    ((64, 56, 56), (64, 3, 3), 1, 1, 1),        # ResNet-18 layer1 (C2)
    ((64, 56, 56), (128, 1, 1), 2, 0, 1),       # downsample 1x1 stride 2 (C5)
    ((128, 28, 28), (256, 3, 3), 2, 1, 1),      # C7
    ((512, 7, 7), (512, 3, 3), 1, 1, 1),        # C12: 7x7 output, 2-row tile
    ((3, 30, 30), (64, 7, 7), 2, 3, 1),         # the stem, 3-channel block (scaled down)
    ((32, 28, 28), (16, 1, 1), 1, 0, 1),        # MobileNet-V2 projection 1x1
    ((24, 13, 17), (40, 3, 3), 1, 1, 1),        # channel block 8, prime width: a tail tile
    ((16, 11, 31), (32, 3, 5), (2, 1), (1, 0, 2, 3), (1, 2)),   # asymmetric everything
]


@pytest.mark.parametrize("dshape,kshape,strides,padding,dilation", CONV_CASES)
def test_conv2d_nchwc_bias_relu(dshape, kshape, strides, padding, dilation, build_run, rand):
    c, h, w = dshape
    o, kh, kw = kshape
    ic, oc = channel_block(c), channel_block(o)
    x = te.placeholder((1, c // ic, h, w, ic), name="x")
    wt = te.placeholder((o // oc, c // ic, kh, kw, ic, oc), name="w")
    b = te.placeholder((o // oc, oc), name="b")
    y = conv2d_nchwc(x, wt, strides, padding, dilation)
    assert reduction_op(y).tag == CONV2D_NCHWC
    out = packed_bias_relu(y, b)
    xa, wa, ba = rand((1, c, h, w)), rand((o, c, kh, kw)), rand((o,))
    got = build_run(schedule_conv2d_nchwc, out, [x, wt, b],
                    [nchw_to_nchwc(xa, ic), pack_conv_kernel_numpy(wa, ic, oc),
                     ba.reshape(o // oc, oc)])
    ref = torch_conv(xa, wa, strides, get_pad_tuple(padding), dilation)
    ref = np.maximum(ref + ba[None, :, None, None], 0)
    np.testing.assert_allclose(nchwc_to_nchw(got), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("c,o,h,w", [(64, 128, 7, 7), (16, 32, 5, 9), (32, 16, 14, 14)])
def test_pointwise_conv_runs_as_a_pixel_row(c, o, h, w, build_run, rand):
    """A 1x1 stride-1 unpadded conv is computed over its pixels as one row: the register
    tile (2 blocks x pixels, the last tile shorter) covers exactly its pixels, not the box of
    rows they touch, and the result equals torch's, alone and with bias, residual and relu."""
    ic, oc = channel_block(c), channel_block(o)
    x = te.placeholder((1, c // ic, h, w, ic), name="x")
    wt = te.placeholder((o // oc, c // ic, 1, 1, ic, oc), name="w")
    y = conv2d_nchwc(x, wt, 1, 0)
    assert y.shape == (1, o // oc, h, w, oc) and reduction_op(y).attrs["pixels"] == (h, w)
    r = te.placeholder(y.shape, name="r")
    res = te.compute(y.shape, lambda *i: y[i] + r[i], name="add", tag=tags.ELEMWISE)
    out = te.compute(y.shape, lambda *i: te.max(res[i], te.const(0, "float32")),
                     name="relu", tag=tags.ELEMWISE)
    nb, _, pixels = channel_tile(o // oc, 1, h * w)
    text = str(kiln.lower(schedule_conv2d_nchwc(out), [x, wt, r, out]))
    assert f"allocate(float32, [{nb * pixels * oc}])" in text
    xa, wa, ra = rand((1, c, h, w)), rand((o, c, 1, 1)), rand((1, o, h, w))
    args = [nchw_to_nchwc(xa, ic), pack_conv_kernel_numpy(wa, ic, oc)]
    ref = torch_conv(xa, wa, 1, (0, 0, 0, 0), 1)
    got = build_run(schedule_conv2d_nchwc, y, [x, wt], args)
    np.testing.assert_allclose(nchwc_to_nchw(got), ref, rtol=RTOL, atol=ATOL)
    got = build_run(schedule_conv2d_nchwc, out, [x, wt, r], args + [nchw_to_nchwc(ra, oc)])
    np.testing.assert_allclose(nchwc_to_nchw(got), np.maximum(ref + ra, 0), rtol=RTOL,
                               atol=ATOL)


@pytest.mark.parametrize("cin,cout,size,passes,groups", [(160, 80, 7, 5, 1), (256, 128, 5, 4, 1),
                                                         (160, 48, 7, 3, 1), (256, 128, 7, 2, 2)])
def test_pointwise_conv_in_passes_over_input_blocks(cin, cout, size, passes, groups, build_run,
                                                    rand):
    """A 1x1 conv's pixel row in passes over `passes` input channel blocks (the last pass
    shorter where they do not divide the blocks: 10 in passes of 3): the accumulators of the task's whole row live in
    one buffer between passes, and the result (with a residual add and relu) equals torch's
    on this host, whatever its vector width."""
    x = te.placeholder((1, cin // 16, size, size, 16), name="x")
    wt = te.placeholder((cout // 16, cin // 16 // groups, 1, 1, 16, 16), name="w")
    y = conv2d_nchwc(x, wt, 1, 0)
    r = te.placeholder(y.shape, name="r")
    out = te.compute(y.shape, lambda *i: te.max(y[i] + r[i], te.const(0, "float32")),
                     name="relu", tag=tags.ELEMWISE)
    nblocks = next(b for b in (5, 4, 3) if (cout // 16 // groups) % b == 0)

    def schedule(outs):
        return schedule_by_tag(outs, {CONV2D_NCHWC: lambda s, op, outs: schedule_blocked_tile(
            s, op, outs, nblocks, 1, 4, pass_blocks=passes)})
    text = str(kiln.lower(schedule([out]), [x, wt, r, out]))
    assert f"allocate(float32, [{nblocks * size * size * 16}])" in text
    xa, ra = rand((1, cin, size, size)), rand((1, cout, size, size))
    wa = rand((cout, cin // groups, 1, 1))
    got = build_run(schedule, out, [x, wt, r], [nchw_to_nchwc(xa, 16),
                                                 pack_conv_kernel_numpy(wa, 16, 16),
                                                 nchw_to_nchwc(ra, 16)])
    ref = np.maximum(torch_conv(xa, wa, 1, (0, 0, 0, 0), 1, groups) + ra, 0)
    np.testing.assert_allclose(nchwc_to_nchw(got), ref, rtol=RTOL, atol=ATOL)


def test_pixel_pass_tile_heuristic():
    """AVX-512 pixel rows whose usual tile reads much kernel, or one block of an odd count,
    get the tile with the fewest loads per FMA (within a group's blocks) in passes that
    divide the input blocks, near 20 KiB of kernel each; small inputs, long rows (28x28),
    rows of one tile and AVX2's 16 registers keep channel_tile's."""
    kib = 1024
    assert pixel_pass_tile(25, 49, 25, kib, 32) == (5, 4, 5)    # RegNet's 400 -> 400 at 7x7
    assert pixel_pass_tile(128, 49, 64, kib, 32) == (4, 6, 4)   # 1024 -> 2048 at 7x7
    assert pixel_pass_tile(32, 196, 64, kib, 32) == (4, 6, 4)   # 1024 -> 512 at 14x14
    assert pixel_pass_tile(12, 49, 40, kib, 32, groups=3) == (4, 6, 5)   # within a group
    assert pixel_pass_tile(12, 49, 40, kib, 32, groups=6) == (2, 12, 10)
    assert pixel_pass_tile(10, 196, 10, kib, 32) is None        # (2, 14) reads 20 KiB
    assert pixel_pass_tile(32, 784, 32, kib, 32) is None        # 28x28: one long row
    assert pixel_pass_tile(128, 49, 64, kib, 16) is None        # AVX2
    assert pixel_pass_tile(1, 196, 2, kib, 32) is None          # one block: nothing better
    assert pixel_pass_tile(5, 49, 4, kib, 32) is None           # one pass covers the input
    assert pixel_pass_tile(6, 1, 64, kib, 32) is None           # one pixel: no reuse
    x = te.placeholder((1, 64, 7, 7, 16), name="x")
    wt = te.placeholder((128, 64, 1, 1, 16, 16), name="w")
    op = reduction_op(conv2d_nchwc(x, wt, 1, 0))
    assert default_tile(op, 32) == {"nblocks": 4, "rows": 1, "cols": 6, "pass_blocks": 4}
    assert default_tile(op, 16) == dict(zip(("nblocks", "rows", "cols"),
                                            channel_tile(128, 1, 49, 16)))


def test_pixel_row_read_by_two_outputs_keeps_a_register_tile(rand):
    """Two outputs read a pixel row: the row stays at the root with its own register tile
    (not recomputed whole for every tile of a bounding box), and both outputs are right."""
    x = te.placeholder((1, 2, 14, 14, 8), name="x")
    wt = te.placeholder((4, 2, 1, 1, 8, 8), name="w")
    y = conv2d_nchwc(x, wt, 1, 0)
    relu = te.compute(y.shape, lambda *i: te.max(y[i], te.const(0, "float32")), name="relu",
                      tag=tags.ELEMWISE)
    dbl = te.compute(y.shape, lambda *i: y[i] * 2.0, name="dbl", tag=tags.ELEMWISE)
    s = schedule_conv2d_nchwc([relu, dbl])
    text = str(kiln.lower(s, [x, wt, relu, dbl]))
    nb, _, pixels = channel_tile(4, 1, 196)
    assert f"allocate(float32, [{nb * pixels * 8}], scope='local')" in text
    xa, wa = rand((1, 16, 14, 14)), rand((32, 16, 1, 1))
    outs = [np.zeros((1, 4, 14, 14, 8), "float32") for _ in range(2)]
    kiln.build(s, [x, wt, relu, dbl])(nchw_to_nchwc(xa, 8), pack_conv_kernel_numpy(wa, 8, 8),
                                      *outs)
    ref = torch_conv(xa, wa, 1, (0, 0, 0, 0), 1)
    np.testing.assert_allclose(nchwc_to_nchw(outs[0]), np.maximum(ref, 0), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(nchwc_to_nchw(outs[1]), 2 * ref, rtol=RTOL, atol=ATOL)


def test_conv2d_nchwc_alone_and_residual(build_run, rand):
    """The anchor as the output (a cache_write tile), and a residual add epilogue."""
    x = te.placeholder((1, 2, 14, 14, 16), name="x")
    wt = te.placeholder((2, 2, 3, 3, 16, 16), name="w")
    r = te.placeholder((1, 2, 14, 14, 16), name="r")
    y = conv2d_nchwc(x, wt, 1, 1)
    xa, wa, ra = rand((1, 32, 14, 14)), rand((32, 32, 3, 3)), rand((1, 32, 14, 14))
    args = [nchw_to_nchwc(xa, 16), pack_conv_kernel_numpy(wa, 16, 16)]
    ref = torch_conv(xa, wa, 1, (1, 1, 1, 1), 1)
    got = build_run(schedule_conv2d_nchwc, y, [x, wt], args)
    np.testing.assert_allclose(nchwc_to_nchw(got), ref, rtol=RTOL, atol=ATOL)
    added = te.compute(y.shape, lambda *i: y[i] + r[i], name="add", tag=tags.ELEMWISE)
    out = te.compute(y.shape, lambda *i: te.max(added[i], te.const(0, "float32")),
                     name="relu", tag=tags.ELEMWISE)
    got = build_run(schedule_conv2d_nchwc, out, [x, wt, r], args + [nchw_to_nchwc(ra, 16)])
    np.testing.assert_allclose(nchwc_to_nchw(got), np.maximum(ref + ra, 0), rtol=RTOL,
                               atol=ATOL)


# C, H, W, stride, multiplier, kernel, block
DW_CASES = [
    (32, 56, 56, 1, 1, 3, 16),     # MobileNet-V2 (spatially scaled down)
    (144, 28, 28, 2, 1, 3, 16),
    (960, 7, 7, 1, 1, 3, 16),
    (24, 9, 23, 2, 1, 5, 8),       # odd: 5x5, stride 2, block 8, prime width
    (8, 10, 10, 1, 2, 3, 16),      # multiplier 2: output block differs from input block
]


@pytest.mark.parametrize("c,h,w,stride,mult,k,block", DW_CASES)
def test_depthwise_conv2d_nchwc(c, h, w, stride, mult, k, block, build_run, rand):
    o = c * mult
    ib, ob = min(block, c), block
    x = te.placeholder((1, c // ib, h, w, ib), name="x")
    wt = te.placeholder((o // ob, 1, k, k, 1, ob), name="w")
    b = te.placeholder((o // ob, ob), name="b")
    y = depthwise_conv2d_nchwc(x, wt, stride, k // 2)
    assert y.op.tag == DEPTHWISE_CONV2D_NCHWC
    out = packed_bias_relu(y, b)
    xa, wa, ba = rand((1, c, h, w)), rand((o, 1, k, k)), rand((o,))
    got = build_run(schedule_conv2d_nchwc, out, [x, wt, b],
                    [nchw_to_nchwc(xa, ib), pack_depthwise_kernel_numpy(wa, ob),
                     ba.reshape(o // ob, ob)])
    p = k // 2
    ref = torch_conv(xa, wa, stride, (p, p, p, p), 1, groups=c)
    np.testing.assert_allclose(nchwc_to_nchw(got), np.maximum(ref + ba[None, :, None, None], 0),
                               rtol=RTOL, atol=ATOL)


def test_register_tile_divides_output():
    for oh, ow in [(56, 56), (28, 28), (14, 14), (7, 7), (112, 112), (13, 17), (3, 5)]:
        rows, cols = register_tile(oh, ow)
        assert oh % rows == 0 and rows * cols <= 16
        assert ow % cols == 0 or ow > 14
        assert cols >= min(ow, 7)
    assert register_tile(56, 56) == (1, 14)
    assert register_tile(8, 8) == (2, 8)


def test_channel_tile_takes_two_blocks_when_they_divide(avx512):
    # Two channel blocks x up to 14 pixels (28 of 32 zmm); one block for an odd count.
    for blocks, oh, ow in [(4, 56, 56), (8, 28, 28), (32, 7, 7), (32, 14, 14), (4, 112, 112)]:
        nb, rows, cols = channel_tile(blocks, oh, ow)
        assert nb == 2 and rows * cols <= 14 and oh % rows == 0 and ow % cols == 0
    assert channel_tile(3, 56, 56)[0] == 1 and channel_tile(1, 8, 8) == (1, 2, 8)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([(2, 16, 32), (3, 24, 12), (4, 32, 32), (8, 64, 32), (16, 64, 64),
                        (5, 40, 80)]),
       st.sampled_from([1, 3]), st.sampled_from([1, 2]), st.integers(5, 16), st.data())
def test_grouped_conv2d_nchwc_random_tiles(groups_cin_cout, k, stride, size, data):
    """Grouped convolutions (blocks inside groups) under random register tiles and reduction
    orders compute what torch does; a tile's channel blocks may straddle groups."""
    from kiln.topi.x86.conv2d_nchwc import schedule_blocked_tile
    from kiln.topi.x86.utils import schedule_by_tag
    groups, c, o = groups_cin_cout
    ic = channel_block(c // groups, data.draw(st.sampled_from([4, 8, 16])))
    oc = channel_block(o // groups, data.draw(st.sampled_from([4, 8, 16])))
    pad = data.draw(st.integers(0, k // 2))
    oh = (size + 2 * pad - k) // stride + 1
    ob = o // oc
    tile = (data.draw(st.sampled_from([b for b in (1, 2, 4) if ob % b == 0])),
            data.draw(st.sampled_from([r for r in (1, 2, 3) if oh % r == 0])),
            data.draw(st.integers(1, min(oh, 8))))
    order = data.draw(st.sampled_from([(0, 1, 2, 3), (1, 2, 0, 3)]))
    x = te.placeholder((1, c // ic, size, size, ic), name="x")
    wt = te.placeholder((ob, c // groups // ic, k, k, ic, oc), name="w")
    y = conv2d_nchwc(x, wt, stride, pad)
    assert reduction_op(y).attrs["groups"] == groups

    def schedule(outs):
        return schedule_by_tag(outs, {CONV2D_NCHWC: lambda s, op, outs: schedule_blocked_tile(
            s, op, outs, *tile, reduce_order=order)})
    rng = np.random.default_rng(size)
    xa = rng.uniform(-1, 1, (1, c, size, size)).astype("float32")
    wa = rng.uniform(-1, 1, (o, c // groups, k, k)).astype("float32")
    got = np.zeros(tuple(int(d) for d in y.shape), "float32")
    kiln.build(schedule([y]), [x, wt, y])(nchw_to_nchwc(xa, ic),
                                          pack_conv_kernel_numpy(wa, ic, oc), got)
    ref = torch_conv(xa, wa, stride, (pad,) * 4, 1, groups=groups)
    np.testing.assert_allclose(nchwc_to_nchw(got), ref, rtol=RTOL, atol=ATOL)


def test_errors_name_the_problem():
    x = te.placeholder((1, 2, 8, 8, 16), name="x")
    with pytest.raises(TopiError, match="input blocks"):
        conv2d_nchwc(x, te.placeholder((1, 4, 3, 3, 8, 16)), 1, 1)
    with pytest.raises(TopiError, match="6-D"):
        conv2d_nchwc(x, te.placeholder((16, 32, 3, 3)), 1, 1)
    with pytest.raises(TopiError, match="do not split into the 2 groups"):
        conv2d_nchwc(x, te.placeholder((3, 1, 3, 3, 16, 16)), 1, 1)
    with pytest.raises(TopiError, match=r"\[O/oc, 1, KH, KW, 1, oc\]"):
        depthwise_conv2d_nchwc(x, te.placeholder((2, 2, 3, 3, 1, 16)), 1, 1)
    with pytest.raises(TopiError, match="not a multiple of block"):
        nchw_to_nchwc(np.zeros((1, 20, 4, 4)), 16)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.sampled_from([3, 8, 16, 32]), st.integers(1, 5),
       st.integers(1, 5), st.sampled_from([1, 2, 4, 8, 16]))
def test_layout_round_trip(n, c, h, w, block):
    """nchwc_to_nchw inverts nchw_to_nchwc, and element (n, c, y, x) lands at
    (n, c // b, y, x, c % b)."""
    if c % block:
        return
    x = np.arange(n * c * h * w, dtype="float32").reshape(n, c, h, w)
    blocked = nchw_to_nchwc(x, block)
    np.testing.assert_array_equal(nchwc_to_nchw(blocked), x)
    np.testing.assert_array_equal(blocked[:, 1 % (c // block), :, :, block - 1],
                                  x[:, (1 % (c // block)) * block + block - 1])


def test_pack_conv_kernel_index_map():
    w = np.random.default_rng(0).standard_normal((32, 24, 3, 3)).astype("float32")
    p = pack_conv_kernel_numpy(w, 8, 16)
    assert p.shape == (2, 3, 3, 3, 8, 16)
    assert p[1, 2, 0, 1, 5, 7] == w[1 * 16 + 7, 2 * 8 + 5, 0, 1]


# --- padding read in place (nn.conv2d_nchwc.pads_in_place) --------------------------------

def _lowered_text(out, ins):
    import kiln
    return str(kiln.lower(schedule_conv2d_nchwc([out]), list(ins) + [out]))


def _innermost_bodies(text, header="for rci in range"):
    """The statements of every `for rci` loop (lines indented deeper than its header)."""
    lines = text.splitlines()
    bodies = []
    for k, line in enumerate(lines):
        if header in line:
            depth = len(line) - len(line.lstrip())
            body = []
            for nxt in lines[k + 1:]:
                if len(nxt) - len(nxt.lstrip()) <= depth:
                    break
                body.append(nxt)
            bodies.append("\n".join(body))
    return bodies


@pytest.mark.parametrize("stride", [1, 2])
def test_in_place_padding_has_no_copy_and_a_guard_free_interior(stride, avx512):
    """C6 / C7-like: no data_pad stage or buffer, and some innermost reduction loop reads
    the input with no bounds test (the interior that LoopPartition split off)."""
    x = te.placeholder((1, 2, 28, 28, 16), name="x")
    wt = te.placeholder((4, 2, 3, 3, 16, 16), name="w")
    y = conv2d_nchwc(x, wt, stride, 1)
    assert [t.op.name for t in y.op.input_tensors()] == ["x", "w"]
    text = _lowered_text(y, [x, wt])
    assert "data_pad" not in text
    bodies = _innermost_bodies(text)
    clean = [b for b in bodies if "x[" in b and "likely" not in b]
    assert clean, text
    # 2 channel blocks x 14 columns: a full tile's 28 accumulations, unguarded
    assert max(b.count("x[") for b in clean) == 28


def test_wide_output_keeps_the_padded_copy():
    x = te.placeholder((1, 4, 56, 56, 16), name="x")
    wt = te.placeholder((4, 4, 3, 3, 16, 16), name="w")
    y = conv2d_nchwc(x, wt, 1, 1)
    assert y.op.input_tensors()[0].op.name == "data_pad"
    assert "likely" not in _lowered_text(y, [x, wt])
    assert pads_in_place((1, 1, 1, 1), 28) and not pads_in_place((1, 1, 1, 1), 56)
    assert not pads_in_place((0, 0, 0, 0), 7)


# (C, H, W), (O, k), stride, padding: 7x7 / 13x13 / 1x1 outputs, kernels 1/3/5/7
ODD_CASES = [
    ((32, 7, 7), (32, 3), 1, 1),       # 7x7 output, every tile a border tile
    ((16, 13, 13), (32, 3), 1, 1),     # 13x13: prime width, tail tile
    ((16, 13, 13), (16, 5), 1, 2),
    ((16, 13, 13), (32, 7), 2, 3),     # 7x7 stride 2 on 13x13 -> 7x7
    ((32, 3, 3), (32, 3), 1, 0),       # 1x1 output, no padding
    ((32, 2, 2), (32, 3), 2, 1),       # 1x1 output from padding alone
    ((16, 7, 7), (32, 7), 1, 3),       # padding 3: most taps in the padding
    ((16, 9, 9), (16, 1), 2, 0),       # 1x1 stride 2
    ((16, 5, 5), (16, 1), 1, 1),       # 1x1 kernel with padding: zero border outputs
    ((8, 12, 12), (16, 5), 2, 2),      # channel block 8, 5x5 stride 2
    ((16, 30, 30), (32, 3), 1, 1),     # 30 wide: the padded copy (past the threshold)
    ((32, 7, 7), (64, 1), 1, 0),       # 1x1: a row of 49 pixels, the last tile shorter
    ((16, 3, 11), (16, 1), 1, 0),
]


@pytest.mark.parametrize("dshape,kshape,stride,pad", ODD_CASES)
def test_odd_shapes_bias_relu_and_residual(dshape, kshape, stride, pad, build_run, rand):
    """relu(conv + bias + residual) against torch, padding in place or copied."""
    c, h, w = dshape
    o, k = kshape
    ic, oc = channel_block(c), channel_block(o)
    x = te.placeholder((1, c // ic, h, w, ic), name="x")
    wt = te.placeholder((o // oc, c // ic, k, k, ic, oc), name="w")
    b = te.placeholder((o // oc, oc), name="b")
    y = conv2d_nchwc(x, wt, stride, pad)
    r = te.placeholder(y.shape, name="r")
    added = te.compute(y.shape, lambda n, f, i, j, fi: y[n, f, i, j, fi] + b[f, fi],
                       name="bias_add", tag=tags.BROADCAST)
    res = te.compute(y.shape, lambda *i: added[i] + r[i], name="add", tag=tags.ELEMWISE)
    out = te.compute(y.shape, lambda *i: te.max(res[i], te.const(0, "float32")),
                     name="relu", tag=tags.ELEMWISE)
    ref = torch_conv(xa := rand((1, c, h, w)), wa := rand((o, c, k, k)), stride,
                     (pad,) * 4, 1)
    ba, ra = rand((o,)), rand(ref.shape)
    got = build_run(schedule_conv2d_nchwc, out, [x, wt, b, r],
                    [nchw_to_nchwc(xa, ic), pack_conv_kernel_numpy(wa, ic, oc),
                     ba.reshape(o // oc, oc), nchw_to_nchwc(ra, oc)])
    want = np.maximum(ref + ba[None, :, None, None] + ra, 0)
    np.testing.assert_allclose(nchwc_to_nchw(got), want, rtol=RTOL, atol=ATOL)

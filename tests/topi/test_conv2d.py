"""conv2d computes (NCHW / NHWC, strides, dilation, asymmetric padding, groups, depthwise)
with their x86 schedules, against torch.nn.functional.conv2d.

Tolerances: float32 inputs in [-1, 1), reductions of up to ~300 terms: rtol 1e-4, atol 1e-4;
float64: rtol 1e-10, atol 1e-12.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import te
from kiln.topi import tags
from kiln.topi.nn.conv2d import (conv2d_nchw, conv2d_nhwc, depthwise_conv2d_nchw,
                                 get_pad_tuple)
from kiln.topi.utils import TopiError
from kiln.topi.x86.conv2d import (schedule_conv2d_nchw, schedule_conv2d_nhwc,
                                  schedule_depthwise_conv2d)

RTOL = ATOL = 1e-4


def torch_conv(x, w, stride, pads, dilation, groups):
    top, left, bottom, right = pads
    xt = F.pad(torch.from_numpy(x), (left, right, top, bottom))
    return F.conv2d(xt, torch.from_numpy(w), stride=stride, dilation=dilation,
                    groups=groups).numpy()


# (N, C, H, W), (K, kh, kw), strides, padding, dilation, groups
NCHW_CASES = [
    ((1, 3, 7, 9), (5, 3, 3), 1, 1, 1, 1),                     # tiny, odd sizes
    ((2, 8, 19, 21), (20, 3, 3), 1, 1, 1, 1),                  # K and OW not multiples of 8/16
    ((1, 16, 17, 17), (12, 1, 1), 2, 0, 1, 1),                 # 1x1, stride 2
    ((1, 4, 11, 13), (6, 3, 5), (2, 1), (1, 0, 2, 3), (1, 2), 1),   # asymmetric everything
    ((1, 8, 10, 10), (12, 3, 3), 1, (1, 1), 1, 4),             # grouped
    ((2, 6, 9, 33), (6, 3, 3), 2, 1, 1, 6),                    # depthwise, stride 2
    ((1, 4, 8, 8), (8, 3, 3), 1, 2, 2, 4),                     # depthwise, multiplier 2, dilated
]


@pytest.mark.parametrize("dshape,kshape,strides,padding,dilation,groups", NCHW_CASES)
def test_conv2d_nchw_fused_bias_relu(dshape, kshape, strides, padding, dilation, groups,
                                     build_run, bias_relu, rand):
    n, c, h, w = dshape
    k, kh, kw = kshape
    x = te.placeholder(dshape, name="x")
    wt = te.placeholder((k, c // groups, kh, kw), name="w")
    b = te.placeholder((k,), name="b")
    y = conv2d_nchw(x, wt, strides, padding, dilation, groups)
    out = bias_relu(y, b, axis=1)
    xa, wa, ba = rand(dshape), rand((k, c // groups, kh, kw)), rand((k,))
    got = build_run(schedule_conv2d_nchw, out, [x, wt, b], [xa, wa, ba])
    pads = get_pad_tuple(padding)
    ref = torch_conv(xa, wa, strides, pads, dilation, groups) + ba[None, :, None, None]
    np.testing.assert_allclose(got, np.maximum(ref, 0), rtol=RTOL, atol=ATOL)


def test_conv2d_nchw_tags():
    x = te.placeholder((1, 8, 6, 6), name="x")
    assert conv2d_nchw(x, te.placeholder((4, 8, 3, 3)), 1, 1).op.tag == tags.CONV2D_NCHW
    assert conv2d_nchw(x, te.placeholder((8, 2, 3, 3)), 1, 1, 1, 4).op.tag == tags.GROUP_CONV2D_NCHW
    assert depthwise_conv2d_nchw(x, te.placeholder((16, 1, 3, 3)), 1, 1).op.tag == \
        tags.DEPTHWISE_CONV2D_NCHW


def test_conv2d_nchw_anchor_is_output(build_run, rand):
    """No epilogue: the schedule accumulates in a cache_write stage."""
    x = te.placeholder((1, 5, 12, 18), name="x")
    w = te.placeholder((9, 5, 3, 3), name="w")
    y = conv2d_nchw(x, w, 1, (0, 1), 1)
    xa, wa = rand((1, 5, 12, 18)), rand((9, 5, 3, 3))
    got = build_run(schedule_conv2d_nchw, y, [x, w], [xa, wa])
    np.testing.assert_allclose(got, torch_conv(xa, wa, 1, (0, 1, 0, 1), 1, 1), rtol=RTOL, atol=ATOL)


def test_conv2d_nchw_two_outputs(build_run, bias_relu, rand):
    """The group's outputs are the conv itself and the relu after it."""
    x = te.placeholder((1, 3, 9, 9), name="x")
    w = te.placeholder((4, 3, 3, 3), name="w")
    b = te.placeholder((4,), name="b")
    y = conv2d_nchw(x, w, 1, 1, 1)
    out = bias_relu(y, b, axis=1)
    xa, wa, ba = rand((1, 3, 9, 9)), rand((4, 3, 3, 3)), rand((4,))
    got_y, got_out = build_run(schedule_conv2d_nchw, [y, out], [x, w, b], [xa, wa, ba])
    ref = torch_conv(xa, wa, 1, (1, 1, 1, 1), 1, 1)
    np.testing.assert_allclose(got_y, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got_out, np.maximum(ref + ba[None, :, None, None], 0),
                               rtol=RTOL, atol=ATOL)


def test_depthwise_schedule_float64(build_run, rand):
    x = te.placeholder((2, 3, 10, 7), "float64", name="x")
    w = te.placeholder((3, 1, 3, 3), "float64", name="w")
    y = depthwise_conv2d_nchw(x, w, 1, 1)
    xa, wa = rand((2, 3, 10, 7), "float64"), rand((3, 1, 3, 3), "float64")
    got = build_run(schedule_depthwise_conv2d, y, [x, w], [xa, wa])
    np.testing.assert_allclose(got, torch_conv(xa, wa, 1, (1, 1, 1, 1), 1, 3),
                               rtol=1e-10, atol=1e-12)


# (N, H, W, C), (kh, kw, K), strides, padding, dilation, groups
NHWC_CASES = [
    ((1, 7, 9, 3), (3, 3, 5), 1, 1, 1, 1),
    ((2, 10, 11, 16), (3, 3, 40), 2, (1, 0, 1, 1), 1, 1),
    ((1, 9, 9, 8), (3, 3, 8), 1, 2, 2, 8),                     # depthwise in NHWC
    ((1, 6, 6, 8), (1, 1, 12), 1, 0, 1, 2),                    # grouped 1x1
]


@pytest.mark.parametrize("dshape,kshape,strides,padding,dilation,groups", NHWC_CASES)
def test_conv2d_nhwc_fused_bias_relu(dshape, kshape, strides, padding, dilation, groups,
                                     build_run, bias_relu, rand):
    n, h, w, c = dshape
    kh, kw, k = kshape
    x = te.placeholder(dshape, name="x")
    wt = te.placeholder((kh, kw, c // groups, k), name="w")
    b = te.placeholder((k,), name="b")
    y = conv2d_nhwc(x, wt, strides, padding, dilation, groups)
    assert y.op.tag == tags.CONV2D_NHWC
    out = bias_relu(y, b, axis=3)
    xa, wa, ba = rand(dshape), rand((kh, kw, c // groups, k)), rand((k,))
    got = build_run(schedule_conv2d_nhwc, out, [x, wt, b], [xa, wa, ba])
    ref = torch_conv(xa.transpose(0, 3, 1, 2), wa.transpose(3, 2, 0, 1), strides,
                     get_pad_tuple(padding), dilation, groups).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, np.maximum(ref + ba, 0), rtol=RTOL, atol=ATOL)


def test_conv2d_nhwc_float64(build_run, rand):
    x = te.placeholder((1, 5, 6, 4), "float64", name="x")
    w = te.placeholder((3, 3, 4, 6), "float64", name="w")
    y = conv2d_nhwc(x, w, 1, "SAME")
    xa, wa = rand((1, 5, 6, 4), "float64"), rand((3, 3, 4, 6), "float64")
    got = build_run(schedule_conv2d_nhwc, y, [x, w], [xa, wa])
    ref = torch_conv(xa.transpose(0, 3, 1, 2), wa.transpose(3, 2, 0, 1), 1, (1, 1, 1, 1), 1, 1)
    np.testing.assert_allclose(got, ref.transpose(0, 2, 3, 1), rtol=1e-10, atol=1e-12)


def test_get_pad_tuple_forms():
    assert get_pad_tuple(2) == (2, 2, 2, 2)
    assert get_pad_tuple((1, 2)) == (1, 2, 1, 2)
    assert get_pad_tuple((0, 1, 2, 3)) == (0, 1, 2, 3)
    assert get_pad_tuple("VALID") == (0, 0, 0, 0)
    assert get_pad_tuple("SAME", (4, 3), (1, 2)) == (1, 2, 2, 2)


@pytest.mark.parametrize("kwargs,match", [
    (dict(groups=3), "not divisible by groups 3"),
    (dict(padding=(1, 2, 3)), "padding must be"),
    (dict(padding=-1), "non-negative"),
    (dict(strides=0), "strides must be >= 1"),
    (dict(dilation=(1, 1, 1)), "dilation must be an int or a pair"),
])
def test_conv2d_bad_attributes(kwargs, match):
    x = te.placeholder((1, 4, 8, 8), name="x")
    w = te.placeholder((4, 4, 3, 3), name="w")
    args = dict(strides=1, padding=0, dilation=1)
    args.update(kwargs)
    with pytest.raises(TopiError, match=match):
        conv2d_nchw(x, w, **args)


def test_conv2d_bad_shapes():
    x = te.placeholder((1, 4, 8, 8), name="x")
    with pytest.raises(TopiError, match="2 input channels per group"):
        conv2d_nchw(x, te.placeholder((4, 2, 3, 3)), 1, 0)
    with pytest.raises(TopiError, match="kernel must be 4-D"):
        conv2d_nchw(x, te.placeholder((4, 4, 3)), 1, 0)
    with pytest.raises(TopiError, match="output would be empty"):
        conv2d_nchw(x, te.placeholder((4, 4, 9, 9)), 1, 0)


def test_conv2d_symbolic_batch(build_run, rand):
    n = te.var("n")
    x = te.placeholder((n, 3, 9, 9), name="x")
    w = te.placeholder((4, 3, 3, 3), name="w")
    y = conv2d_nchw(x, w, 1, 1)
    wa = rand((4, 3, 3, 3))
    f = kiln.build(schedule_conv2d_nchw(y), [x, w, y])
    for batch in (1, 3):
        xa = rand((batch, 3, 9, 9))
        got = np.zeros((batch, 4, 9, 9), "float32")
        f(xa, wa, got)
        np.testing.assert_allclose(got, torch_conv(xa, wa, 1, (1, 1, 1, 1), 1, 1),
                                   rtol=RTOL, atol=ATOL)

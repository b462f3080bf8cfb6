"""conv2d_transpose_nchw with the x86 schedule, against torch.nn.functional.conv_transpose2d.

Tolerances: float32 inputs in [-1, 1): rtol 1e-4, atol 1e-4; float64: rtol 1e-10, atol 1e-12.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kiln import te
from kiln.topi import tags
from kiln.topi.nn.conv2d_transpose import conv2d_transpose_nchw
from kiln.topi.utils import TopiError
from kiln.topi.x86.conv2d import schedule_conv2d_transpose

RTOL = ATOL = 1e-4

# (N, Cin, H, W), (Cout, kh, kw), strides, padding, output_padding, dilation, groups
CASES = [
    ((1, 3, 5, 6), (4, 3, 3), 2, 1, 1, 1, 1),
    ((1, 4, 5, 5), (4, 3, 3), 1, 0, 0, 1, 1),
    ((1, 4, 5, 5), (3, 3, 3), 1, 2, 0, 1, 1),          # padding larger than d*(k-1): cropped
    ((2, 8, 7, 9), (6, 3, 2), (3, 2), (2, 1), (1, 0), (2, 1), 2),
    ((1, 16, 6, 6), (8, 4, 4), 2, 1, 0, 1, 1),
]


@pytest.mark.parametrize("dshape,kshape,strides,padding,output_padding,dilation,groups", CASES)
def test_conv2d_transpose_fused_bias_relu(dshape, kshape, strides, padding, output_padding,
                                          dilation, groups, build_run, bias_relu, rand):
    n, c, h, w = dshape
    k, kh, kw = kshape
    x = te.placeholder(dshape, name="x")
    wt = te.placeholder((c, k // groups, kh, kw), name="w")
    b = te.placeholder((k,), name="b")
    y = conv2d_transpose_nchw(x, wt, strides, padding, output_padding, dilation, groups)
    assert y.op.tag == tags.CONV2D_TRANSPOSE_NCHW
    out = bias_relu(y, b, axis=1)
    xa, wa, ba = rand(dshape), rand((c, k // groups, kh, kw)), rand((k,))
    got = build_run(schedule_conv2d_transpose, out, [x, wt, b], [xa, wa, ba])
    ref = F.conv_transpose2d(torch.from_numpy(xa), torch.from_numpy(wa), stride=strides,
                             padding=padding, output_padding=output_padding, groups=groups,
                             dilation=dilation).numpy()
    np.testing.assert_allclose(got, np.maximum(ref + ba[None, :, None, None], 0),
                               rtol=RTOL, atol=ATOL)


def test_conv2d_transpose_float64_anchor_is_output(build_run, rand):
    x = te.placeholder((1, 2, 4, 5), "float64", name="x")
    w = te.placeholder((2, 3, 3, 3), "float64", name="w")
    y = conv2d_transpose_nchw(x, w, 2, 1, 1)
    xa, wa = rand((1, 2, 4, 5), "float64"), rand((2, 3, 3, 3), "float64")
    got = build_run(schedule_conv2d_transpose, y, [x, w], [xa, wa])
    ref = F.conv_transpose2d(torch.from_numpy(xa), torch.from_numpy(wa), stride=2, padding=1,
                             output_padding=1).numpy()
    assert got.shape == ref.shape == (1, 3, 8, 10)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_conv2d_transpose_errors():
    x = te.placeholder((1, 4, 5, 5), name="x")
    with pytest.raises(TopiError, match="output_padding"):
        conv2d_transpose_nchw(x, te.placeholder((4, 2, 3, 3)), 1, 0, 1)
    with pytest.raises(TopiError, match="kernel has 3 input channels"):
        conv2d_transpose_nchw(x, te.placeholder((3, 2, 3, 3)), 1, 0)
    with pytest.raises(TopiError, match="groups"):
        conv2d_transpose_nchw(x, te.placeholder((4, 2, 3, 3)), 1, 0, groups=3)

"""The integer blocked convolution (kiln/topi/nn/conv2d_nchwc_int8.py) under its x86 schedule,
exact against an int64 reference for random shapes, strides, paddings and both packed forms
(int8 groups of 4 for `vpdpbusd` / `vpmaddubsw`, int16 pairs for `vpmaddwd`), and the check that
keeps `vpmaddubsw` away from weights whose pairs would saturate it."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import te
from kiln.target import Target
from kiln.topi.nn.conv2d_nchwc import nchw_to_nchwc, nchwc_to_nchw
from kiln.topi.nn.conv2d_nchwc_int8 import conv2d_nchwc_int8, pack_conv_kernel_int8_numpy
from kiln.topi.x86.conv2d_int8 import schedule_conv2d_nchwc_int8
from kiln.topi.x86.tensor_intrin import conv_int8_layout, dot_u8s8_avx2, pairs_fit_int16

HOST = Target("llvm")
HASWELL = Target("llvm -mcpu=haswell")


def _reference(x, w, stride, pad):
    return torch.nn.functional.conv2d(torch.from_numpy(x.astype("float64")),
                                      torch.from_numpy(w.astype("float64")),
                                      stride=stride, padding=pad).numpy().astype("int64")


def _conv(x, w, stride, pad, in_block, group, dtype, lanes=8):
    xb = nchw_to_nchwc(x, in_block)
    wp = pack_conv_kernel_int8_numpy(w, in_block, lanes, group, dtype)
    X = te.placeholder(xb.shape, str(x.dtype), name="X")
    W = te.placeholder(wp.shape, dtype, name="W")
    Y = conv2d_nchwc_int8(X, W, stride, pad)
    f = kiln.build(schedule_conv2d_nchwc_int8([Y]), [X, W, Y], target="llvm")
    y = np.zeros(tuple(int(d) for d in Y.shape), "int32")
    f(xb, wp, y)
    return nchwc_to_nchw(y)


def _host_kind(x_dtype, weight):
    """(group, kernel dtype) this machine's conv_int8_layout picks, as ConvertConvLayout would."""
    lanes, group, dtype = conv_int8_layout(HOST, weight)
    if x_dtype == "int8":
        group, dtype = 2, "int16"
    return lanes, group, dtype


@settings(max_examples=25, deadline=None, derandomize=True)
@given(cblocks=st.integers(1, 3), oblocks=st.integers(1, 3), size=st.integers(3, 12),
       k=st.sampled_from([1, 2, 3, 5]), stride=st.integers(1, 2), pad=st.integers(0, 2),
       seven_bit=st.booleans(), x_dtype=st.sampled_from(["uint8", "int8"]),
       seed=st.integers(0, 2 ** 16))
def test_random_convolutions_are_exact(cblocks, oblocks, size, k, stride, pad, seven_bit,
                                       x_dtype, seed):
    if not HOST.has_feature("avx2"):
        pytest.skip("the integer convolution needs AVX2")
    if size + 2 * pad < k:
        return
    rng = np.random.default_rng(seed)
    info = np.iinfo(x_dtype)
    x = rng.integers(info.min, info.max + 1, (1, 8 * cblocks, size, size)).astype(x_dtype)
    bound = 64 if seven_bit else 128
    w = rng.integers(-bound, bound, (8 * oblocks, 8 * cblocks, k, k)).astype("int8")
    lanes, group, dtype = _host_kind(x_dtype, w)
    if lanes != 8:
        pytest.skip("the test packs 8 output lanes")
    got = _conv(x, w, stride, pad, 8, group, dtype)
    np.testing.assert_array_equal(got, _reference(x, w, stride, pad))


@pytest.mark.parametrize("group,dtype", [(4, "int8"), (2, "int16")])
def test_extreme_values_with_both_kernel_forms(group, dtype):
    """255 x ±64 in every tap (int8 form) and 255 x ±128 (int16 form): the sums are exact."""
    if not HOST.has_feature("avx2"):
        pytest.skip("the integer convolution needs AVX2")
    x = np.full((1, 16, 6, 6), 255, "uint8")
    bound = 64 if dtype == "int8" else 128
    w = np.where(np.arange(16 * 16 * 9).reshape(16, 16, 3, 3) % 2, -bound, bound - 1)
    w = w.astype("int8")
    got = _conv(x, w, 1, 1, 8, group, dtype)
    np.testing.assert_array_equal(got, _reference(x, w, 1, 1))


def test_vpmaddubsw_is_only_picked_when_every_pair_fits_int16():
    w = np.full((8, 8, 3, 3), 64, "int8")
    assert conv_int8_layout(HASWELL, w) == (8, 4, "int8")
    w[3, 5, 1, 2] = 65                      # pairs with channel 4: 65 + 64 > 128
    assert conv_int8_layout(HASWELL, w) == (8, 2, "int16")
    w[3, 5, 1, 2] = 127
    w[3, 4, 1, 2] = 0                       # 127 + 0 fits
    assert conv_int8_layout(HASWELL, w) == (8, 4, "int8")
    # an image's 3 channels pad to 4 (the padded channel's weights are 0)
    assert conv_int8_layout(HASWELL, np.full((8, 3, 7, 7), 64, "int8")) == (8, 4, "int8")
    assert conv_int8_layout(Target("llvm -mcpu=cascadelake"), w) == (16, 4, "int8")
    assert pairs_fit_int16(np.array([[128, 0, -64, -64]])) and not pairs_fit_int16(
        np.array([[0, 0, -65, -64]]))


def test_a_pair_over_the_bound_would_saturate():
    """Why the check exists: vpmaddubsw saturates 255 * 127 + 255 * 127 at 32767."""
    if not HOST.has_feature("avx2") or HOST.has_feature("avx512vnni"):
        pytest.skip("needs AVX2 (vpmaddubsw)")
    intrin = dot_u8s8_avx2()
    d, k = intrin.op.input_tensors()
    out = intrin.op.output(0)
    s = te.create_schedule(out.op)
    s[out].tensorize(s[out].op.axis[0], intrin)
    f = kiln.build(s, [d, k, out], target="llvm")
    data = np.full(4, 255, "uint8")
    kernel = np.full((8, 4), 127, "int8")
    got = np.zeros(8, "int32")
    f(data, kernel, got)
    assert (got == 2 * 32767).all() and 4 * 255 * 127 != 2 * 32767

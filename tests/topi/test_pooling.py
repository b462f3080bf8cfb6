"""pool2d / adaptive_pool2d / global_pool2d with their x86 schedules, against torch.

Tolerances: max pooling is exact; averages (float32) rtol 1e-5, atol 1e-6; float64 1e-12.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kiln import te
from kiln.topi import tags
from kiln.topi.nn.pooling import adaptive_pool2d, global_pool2d, pool2d
from kiln.topi.utils import TopiError
from kiln.topi.x86.pooling import schedule_adaptive_pool, schedule_pool

# shape, kernel, strides, padding, dilation, ceil_mode
WINDOWS = [
    ((1, 2, 7, 9), 3, 2, 1, 1, False),
    ((2, 3, 8, 11), 3, 2, 1, 1, True),
    ((1, 3, 8, 37), (3, 2), (2, 1), (1, 1), (2, 1), True),
    ((1, 16, 35, 35), 2, 2, 0, 1, False),
    ((1, 1, 5, 5), 2, 2, 0, 1, True),            # last window half outside
]


@pytest.mark.parametrize("shape,kernel,strides,padding,dilation,ceil_mode", WINDOWS)
def test_max_pool(shape, kernel, strides, padding, dilation, ceil_mode, build_run, rand):
    x = te.placeholder(shape, name="x")
    y = pool2d(x, kernel, strides, padding, dilation, "max", ceil_mode)
    assert y.op.tag == tags.POOL
    xa = rand(shape)
    got = build_run(schedule_pool, y, [x], [xa])
    ref = F.max_pool2d(torch.from_numpy(xa), kernel, strides, padding, dilation,
                       ceil_mode=ceil_mode).numpy()
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("shape,kernel,strides,padding,ceil_mode", [
    ((2, 3, 8, 11), 3, 2, 1, True),
    ((1, 4, 9, 20), (2, 3), (1, 2), (1, 1), False),
    ((1, 2, 6, 6), 3, 3, 1, True),
])
def test_avg_pool(shape, kernel, strides, padding, ceil_mode, count_include_pad, build_run,
                  rand):
    x = te.placeholder(shape, name="x")
    y = pool2d(x, kernel, strides, padding, 1, "avg", ceil_mode, count_include_pad)
    xa = rand(shape)
    got = build_run(schedule_pool, y, [x], [xa])
    ref = F.avg_pool2d(torch.from_numpy(xa), kernel, strides, padding, ceil_mode=ceil_mode,
                       count_include_pad=count_include_pad).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def _numpy_avg_pool_asym(x, k, s, pads, include_pad):
    """ONNX AveragePool with asymmetric pads, floor mode, as a direct loop."""
    top, left, bottom, right = pads
    n, c, h, w = x.shape
    oh = (h + top + bottom - k) // s + 1
    ow = (w + left + right - k) // s + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * s - top, j * s - left
            ys = [y for y in range(y0, y0 + k) if 0 <= y < h]
            xs = [v for v in range(x0, x0 + k) if 0 <= v < w]
            total = x[:, :, ys][:, :, :, xs].sum(axis=(2, 3))
            out[:, :, i, j] = total / (k * k if include_pad else len(ys) * len(xs))
    return out


@pytest.mark.parametrize("include_pad", [True, False])
def test_avg_pool_asymmetric_padding_fused_relu(include_pad, build_run, rand):
    x = te.placeholder((1, 3, 7, 8), name="x")
    y = pool2d(x, 3, 2, (0, 1, 2, 1), 1, "avg", False, include_pad)
    out = te.compute(y.shape, lambda *i: te.max(y[i], 0.0), name="relu", tag=tags.ELEMWISE)
    xa = rand((1, 3, 7, 8))
    got = build_run(schedule_pool, out, [x], [xa])
    ref = _numpy_avg_pool_asym(xa, 3, 2, (0, 1, 2, 1), include_pad)
    np.testing.assert_allclose(got, np.maximum(ref, 0), rtol=1e-5, atol=1e-6)


def test_max_pool_float64_and_int(build_run, rand):
    x = te.placeholder((1, 2, 9, 9), "float64", name="x")
    y = pool2d(x, 3, 2, 1, pool_type="max")
    xa = rand((1, 2, 9, 9), "float64")
    got = build_run(schedule_pool, y, [x], [xa])
    np.testing.assert_array_equal(got, F.max_pool2d(torch.from_numpy(xa), 3, 2, 1).numpy())
    xi = te.placeholder((1, 1, 6, 6), "int32", name="xi")
    yi = pool2d(xi, 2, 2, 1, pool_type="max")
    ai = np.arange(-18, 18, dtype="int32").reshape(1, 1, 6, 6)
    got = build_run(schedule_pool, yi, [xi], [ai])
    ref = F.max_pool2d(torch.from_numpy(ai.astype("float64")), 2, 2, 1).numpy().astype("int32")
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("output_size", [(1, 1), (3, 4), (7, 5), 2, (None, 3)])
def test_adaptive_pool(pool_type, output_size, build_run, rand):
    x = te.placeholder((2, 3, 10, 9), name="x")
    y = adaptive_pool2d(x, output_size, pool_type)
    xa = rand((2, 3, 10, 9))
    got = build_run(schedule_adaptive_pool, y, [x], [xa])
    fn = F.adaptive_max_pool2d if pool_type == "max" else F.adaptive_avg_pool2d
    ref = fn(torch.from_numpy(xa), output_size).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pool_type", ["max", "avg"])
def test_global_pool_fused_epilogue(pool_type, build_run, rand):
    x = te.placeholder((2, 20, 7, 7), name="x")
    y = global_pool2d(x, pool_type)
    assert y.shape == (2, 20, 1, 1)
    out = te.compute(y.shape, lambda *i: y[i] * 3.0, name="scale", tag=tags.ELEMWISE)
    xa = rand((2, 20, 7, 7))
    got = build_run(schedule_adaptive_pool, out, [x], [xa])
    ref = xa.max(axis=(2, 3), keepdims=True) if pool_type == "max" else \
        xa.mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(got, 3 * ref, rtol=1e-5, atol=1e-6)


def test_pool_errors():
    x = te.placeholder((1, 2, 4, 4), name="x")
    with pytest.raises(TopiError, match="pool_type must be"):
        pool2d(x, 2, pool_type="min")
    with pytest.raises(TopiError, match="larger than the padded input"):
        pool2d(x, 7)
    with pytest.raises(TopiError, match="4-D NCHW"):
        pool2d(te.placeholder((4, 4)), 2)
    with pytest.raises(TopiError, match="output_size must be positive"):
        adaptive_pool2d(x, 0)


def test_pool_two_epilogue_outputs(build_run, rand):
    """Two outputs read the anchor (which is not an output): it stays at the root."""
    x = te.placeholder((1, 4, 9, 9), name="x")
    y = pool2d(x, 3, 2, 1, pool_type="max")
    a = te.compute(y.shape, lambda *i: y[i] + 1.0, name="plus", tag=tags.ELEMWISE)
    b = te.compute(y.shape, lambda *i: y[i] * 2.0, name="times", tag=tags.ELEMWISE)
    xa = rand((1, 4, 9, 9))
    got_a, got_b = build_run(schedule_pool, [a, b], [x], [xa])
    ref = F.max_pool2d(torch.from_numpy(xa), 3, 2, 1).numpy()
    np.testing.assert_array_equal(got_a, ref + 1.0)
    np.testing.assert_array_equal(got_b, ref * 2.0)

"""pool2d / adaptive_pool2d / global_pool2d in the blocked layout NCHW{b}c with their x86
schedules (inner channel axis vectorized), against torch's NCHW pools on the unblocked data.

Tolerances: max pooling is exact; averages (float32) rtol 1e-5, atol 1e-6.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kiln import te
from kiln.topi import tags
from kiln.topi.nn.conv2d_nchwc import nchw_to_nchwc, nchwc_to_nchw
from kiln.topi.nn.pooling import adaptive_pool2d, global_pool2d, pool2d
from kiln.topi.utils import TopiError
from kiln.topi.x86.pooling import schedule_adaptive_pool, schedule_pool

# nchw shape, block, kernel, strides, padding, dilation, ceil_mode
WINDOWS = [
    ((1, 32, 12, 12), 16, 3, 2, 1, 1, False),       # ResNet's stem pool, smaller
    ((2, 16, 8, 11), 16, 3, 2, 1, 1, True),
    ((1, 16, 8, 13), 8, (3, 2), (2, 1), (1, 1), (2, 1), True),
    ((1, 16, 5, 5), 16, 2, 2, 0, 1, True),          # last window half outside
]


def _blocked(rand, shape, block):
    base = rand(shape)
    return base, nchw_to_nchwc(base, block)


@pytest.mark.parametrize("shape,block,kernel,strides,padding,dilation,ceil_mode", WINDOWS)
def test_blocked_max_pool(shape, block, kernel, strides, padding, dilation, ceil_mode,
                          build_run, rand):
    base, xb = _blocked(rand, shape, block)
    x = te.placeholder(xb.shape, name="x")
    y = pool2d(x, kernel, strides, padding, dilation, "max", ceil_mode,
               layout=f"NCHW{block}c")
    assert y.op.tag == tags.POOL and len(y.shape) == 5
    got = build_run(schedule_pool, y, [x], [xb])
    ref = F.max_pool2d(torch.from_numpy(base), kernel, strides, padding, dilation,
                       ceil_mode=ceil_mode).numpy()
    np.testing.assert_array_equal(nchwc_to_nchw(got), ref)


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_blocked_pool_reads_its_padding_in_place(dtype, build_run):
    """No padded copy: the windows read the input itself, the border through a bounds test
    (a quantized model's uint8 pool too, whose padding is its smallest value, 0)."""
    import kiln
    rng = np.random.default_rng(3)
    base = rng.integers(0, 256, (1, 16, 28, 30)).astype(dtype)
    xb = nchw_to_nchwc(base, 8)
    x = te.placeholder(xb.shape, dtype, name="x")
    y = pool2d(x, 3, 2, 1, 1, "max", layout="NCHW8c")
    assert "pool_pad" not in str(kiln.lower(schedule_pool(y), [x, y]))
    got = build_run(schedule_pool, y, [x], [xb])
    ref = F.max_pool2d(torch.from_numpy(base.astype("float32")), 3, 2, 1).numpy()
    np.testing.assert_array_equal(nchwc_to_nchw(got), ref.astype(dtype))


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("shape,block,kernel,strides,padding,ceil_mode", [
    ((2, 16, 8, 11), 16, 3, 2, 1, True),
    ((1, 32, 7, 7), 16, 3, 1, 1, False),
])
def test_blocked_avg_pool(shape, block, kernel, strides, padding, ceil_mode,
                          count_include_pad, build_run, rand):
    base, xb = _blocked(rand, shape, block)
    x = te.placeholder(xb.shape, name="x")
    y = pool2d(x, kernel, strides, padding, 1, "avg", ceil_mode, count_include_pad,
               layout=f"NCHW{block}c")
    got = build_run(schedule_pool, y, [x], [xb])
    ref = F.avg_pool2d(torch.from_numpy(base), kernel, strides, padding, ceil_mode=ceil_mode,
                       count_include_pad=count_include_pad).numpy()
    np.testing.assert_allclose(nchwc_to_nchw(got), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pool_type", ["avg", "max"])
def test_blocked_global_and_adaptive_pool(pool_type, build_run, rand):
    base, xb = _blocked(rand, (2, 32, 7, 9), 16)
    x = te.placeholder(xb.shape, name="x")
    t = torch.from_numpy(base)
    g = global_pool2d(x, pool_type, layout="NCHW16c")
    assert tuple(int(d) for d in g.shape) == (2, 2, 1, 1, 16)
    got = build_run(schedule_adaptive_pool, g, [x], [xb])
    ref = (t.mean if pool_type == "avg" else t.amax)(dim=(2, 3), keepdim=True).numpy()
    np.testing.assert_allclose(nchwc_to_nchw(got), ref, rtol=1e-5, atol=1e-6)
    a = adaptive_pool2d(x, (3, 4), pool_type, layout="NCHW16c")
    got = build_run(schedule_adaptive_pool, a, [x], [xb])
    fn = F.adaptive_avg_pool2d if pool_type == "avg" else F.adaptive_max_pool2d
    np.testing.assert_allclose(nchwc_to_nchw(got), fn(t, (3, 4)).numpy(), rtol=1e-5,
                               atol=1e-6)


def test_blocked_layout_errors_name_the_problem():
    with pytest.raises(TopiError, match="5-D NCHW16c"):
        pool2d(te.placeholder((1, 16, 4, 4)), 2, layout="NCHW16c")
    with pytest.raises(TopiError, match="last axis 16"):
        global_pool2d(te.placeholder((1, 2, 4, 4, 8)), layout="NCHW16c")
    with pytest.raises(TopiError, match="layout must be"):
        pool2d(te.placeholder((1, 16, 4, 4)), 2, layout="NHWC")

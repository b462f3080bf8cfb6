"""Int8 conv2d compiled for VDLA: padded input windows through LOAD's pads, strides, 1x1 and
3x3 kernels, virtual threads; results against numpy."""
import numpy as np
import pytest

import kiln
from kiln.accel.vdla.conv2d import (pack_data, pack_kernel, reference, schedule_conv2d,
                                    unpack_output)


def run_conv(n, c, h, w, o, k, stride, pad, seed=0, shift=8, **tiles):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
    wt = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    s, args = schedule_conv2d(n, c, h, w, o, k, stride, pad, shift=shift, **tiles)
    f = kiln.build(s, args, target="vdla")
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    y = np.zeros((n, o // 16, oh, ow, 16), np.int8)
    stats = f(pack_data(x), pack_kernel(wt), y)
    np.testing.assert_array_equal(unpack_output(y), reference(x, wt, stride, pad, shift))
    return f, stats


@pytest.mark.parametrize("k, stride, pad, rows, out_blocks, in_blocks, vthreads", [
    (3, 1, 1, 3, 1, 1, 1),
    (3, 1, 1, 6, 2, 2, 2),
    (3, 2, 1, 3, 1, 2, 1),
    (1, 1, 0, 2, 2, 1, 2),
    (1, 2, 0, 3, 1, 1, 1),
    (3, 1, 0, 2, 1, 1, 2),
    (3, 2, 1, 3, 2, 1, "2 blocks"),
])
def test_convolutions_are_exact(k, stride, pad, rows, out_blocks, in_blocks, vthreads):
    split = "rows"
    if isinstance(vthreads, str):
        vthreads, split = int(vthreads.split()[0]), "blocks"
    run_conv(1, 32, 6, 6, 32, k, stride, pad, seed=k * 10 + stride, shift=7, rows=rows,
             out_blocks=out_blocks, in_blocks=in_blocks, vthreads=vthreads, split=split)


def test_windows_at_the_edges_load_their_padding():
    f, _ = run_conv(1, 16, 6, 6, 16, 3, 1, 1, rows=3)
    loads = [line for line in f.get_source().splitlines() if "LOAD inp" in line]
    # Top tile: one padding row above and a column each side; bottom tile: a row below.
    assert any("pad [1, 0, 1, 1]" in line for line in loads)
    assert any("pad [0, 1, 1, 1]" in line for line in loads)


def test_bad_tilings_are_named():
    with pytest.raises(ValueError, match="do not divide a 6x6 output"):
        schedule_conv2d(1, 32, 6, 6, 32, 3, 1, 1, rows=4)
    with pytest.raises(ValueError, match="must be multiples of 16"):
        schedule_conv2d(1, 24, 6, 6, 32, 3, 1, 1)

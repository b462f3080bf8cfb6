"""The x86 depthwise conv2d schedule in NCHW16c (kiln.topi.x86.depthwise_nchwc): results
against torch.nn.functional.conv2d (groups = channels) with fused epilogues, and the
structure of its loop program (no padded copy; a guard-free interior).

Tolerances: float32 inputs in [-1, 1), 9-term sums (values below ~9): rtol 1e-5, atol 1e-5.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import te
from kiln.tir import Allocate, Call, For, post_order_visit
from kiln.topi import tags
from kiln.topi.nn.conv2d_nchwc import (DEPTHWISE_CONV2D_NCHWC, channel_block,
                                       depthwise_conv2d_nchwc, nchw_to_nchwc, nchwc_to_nchw,
                                       pack_depthwise_kernel_numpy)
from kiln.topi.x86.conv2d_nchwc import schedule_conv2d_nchwc
from kiln.topi.x86.depthwise_nchwc import depthwise_tile, row_chunks

RTOL, ATOL = 1e-5, 1e-5


def bias_clip(y, bias, lo, hi):
    """clip(y + bias[f, fi], lo, hi) (relu6 in MobileNet-V2): broadcast + elementwise."""
    added = te.compute(y.shape, lambda n, f, h, w, fi: y[n, f, h, w, fi] + bias[f, fi],
                       name="bias_add", tag=tags.BROADCAST)
    return te.compute(y.shape, lambda *i: te.min(te.max(added[i], te.const(lo, y.dtype)),
                                                 te.const(hi, y.dtype)),
                      name="clip", tag=tags.ELEMWISE)


def run_depthwise(c, h, w, stride, pad, build_run, rand, epilogue=True, k=3):
    blk = channel_block(c)
    x = te.placeholder((1, c // blk, h, w, blk), name="x")
    wt = te.placeholder((c // blk, 1, k, k, 1, blk), name="w")
    b = te.placeholder((c // blk, blk), name="b")
    y = depthwise_conv2d_nchwc(x, wt, stride, pad)
    assert y.op.tag == DEPTHWISE_CONV2D_NCHWC
    xa, wa, ba = rand((1, c, h, w)), rand((c, 1, k, k)), rand((c,))
    ins = [x, wt] + ([b] if epilogue else [])
    arrays = [nchw_to_nchwc(xa, blk), pack_depthwise_kernel_numpy(wa, blk)]
    if epilogue:
        arrays.append(ba.reshape(c // blk, blk))
    out = bias_clip(y, b, 0.0, 6.0) if epilogue else y
    got = nchwc_to_nchw(build_run(schedule_conv2d_nchwc, out, ins, arrays))
    ref = F.conv2d(torch.from_numpy(xa), torch.from_numpy(wa), stride=stride, padding=pad,
                   groups=c).numpy()
    if epilogue:
        ref = np.clip(ref + ba[None, :, None, None], 0.0, 6.0)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


# The paper's depthwise workloads D1-D9: (H/W, channels, stride), 3x3, padding 1.
PAPER = [(112, 32, 1), (112, 64, 2), (56, 128, 1), (56, 128, 2), (28, 256, 1),
         (28, 256, 2), (14, 512, 1), (14, 512, 2), (7, 1024, 1)]


@pytest.mark.parametrize("hw,c,stride", PAPER, ids=[f"D{i + 1}" for i in range(9)])
def test_paper_workloads_bias_relu6(hw, c, stride, build_run, rand):
    run_depthwise(c, hw, hw, stride, 1, build_run, rand)


# MobileNet-V2's depthwise layers not already among D1-D9 (channels, H/W, stride).
MOBILENET_V2 = [(96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 2), (384, 14, 1),
                (576, 14, 2), (960, 7, 1)]


@pytest.mark.parametrize("c,hw,stride", MOBILENET_V2)
def test_mobilenet_v2_layers(c, hw, stride, build_run, rand):
    run_depthwise(c, hw, hw, stride, 1, build_run, rand)


@pytest.mark.parametrize("h,w", [(7, 7), (13, 13), (1, 1), (13, 7), (9, 17)])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("pad", [0, 1])
def test_odd_sizes(h, w, stride, pad, build_run, rand):
    if pad == 0 and min(h, w) < 3:
        pytest.skip("a 3x3 kernel does not fit a 1x1 input without padding")
    run_depthwise(32, h, w, stride, pad, build_run, rand)


def test_anchor_as_output_and_5x5(build_run, rand):
    """No epilogue (the anchor is the output: a cache_write tile) and a 5x5 kernel, pad 2."""
    run_depthwise(16, 20, 20, 1, 2, build_run, rand, epilogue=False, k=5)
    run_depthwise(48, 15, 15, 2, 2, build_run, rand, epilogue=False, k=5)


def test_small_channel_block(build_run, rand):
    """24 channels: blocks of 8 lanes (half vectors) still take the same schedule."""
    run_depthwise(24, 10, 10, 1, 1, build_run, rand)


def _lowered(c, hw, stride):
    x = te.placeholder((1, c // 16, hw, hw, 16), name="x")
    wt = te.placeholder((c // 16, 1, 3, 3, 1, 16), name="w")
    y = depthwise_conv2d_nchwc(x, wt, stride, 1)
    s = schedule_conv2d_nchwc([y])
    return kiln.lower(s, [x, wt, y])


def _main_interior(func):
    """The loops over x tiles, and whether each holds a guarded load."""
    found = []

    def visit(n):
        if isinstance(n, For) and n.loop_var.name == "x.outer":
            guards = []
            post_order_visit(n.body, lambda e: guards.append(e) if isinstance(e, Call)
                             and e.op in ("if_then_else", "likely") else None)
            found.append((n, bool(guards)))
    post_order_visit(func.body, visit)
    return found


@pytest.mark.parametrize("stride", [1, 2])
def test_no_padded_copy_and_guard_free_interior(stride):
    func = _lowered(64, 56, stride)
    allocs = []
    post_order_visit(func.body, lambda n: allocs.append(n.buffer.name)
                     if isinstance(n, Allocate) else None)
    assert "data_pad" not in allocs, allocs
    loops = _main_interior(func)
    # The interior x-tile loop reads the input without guards (borders are split off;
    # where a border tile's guard is decided, the partition folds it away).
    assert any(not guarded for _, guarded in loops), [str(f.extent) for f, _ in loops]


def test_tile_heuristics(avx512):
    assert depthwise_tile(112, 112) == (2, 8)
    assert depthwise_tile(7, 7) == (1, 7)
    rows, cols = depthwise_tile(13, 13)          # prime: a fixed tile with a tail
    assert 4 < cols <= 8 and rows == 1
    assert depthwise_tile(1, 1) == (1, 1)
    # Enough parallel tasks for the pool, chunks a divisor of the row tiles.
    assert row_chunks(2, 56, cores=2) == 4 and 56 % row_chunks(2, 56, cores=2) == 0
    assert row_chunks(64, 7, cores=2) == 1
    assert row_chunks(1, 3, cores=2) == 3
    assert row_chunks(2, 56, cores=4) == 8

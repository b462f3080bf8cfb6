"""x86 templates of the blocked depthwise convolution (depthwise_conv2d_nchwc.x86) and the
Winograd convolution (conv2d_winograd_nchwc.x86): configs against torch, fallback = today's
schedule, args from the op, and task extraction + dispatch into kiln.compile for a model.

Tolerances: depthwise — 9-term float32 sums of values in [-1, 1): rtol 1e-5, atol 1e-5 (as
tests/topi/test_depthwise_nchwc_schedule.py). Winograd — |got - ref| <= tol * max|ref| against
float64 torch, tol 5e-6 for F(2x2) and 5e-5 for F(4x4) (as tests/topi/test_winograd.py: the
transforms amplify float32 rounding relative to the output's magnitude, not per element).
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kiln
from kiln import te
from kiln.autotvm.extract import extract_tasks
from kiln.autotvm.space import FallbackConfig
from kiln.autotvm.task import ApplyFixedConfigs, Task
from kiln.autotvm.templates.depthwise_nchwc import (DEPTHWISE_CONV2D_NCHWC_TEMPLATE,
                                                    depthwise_conv2d_nchwc_args)
from kiln.autotvm.templates.winograd import (CONV2D_WINOGRAD_NCHWC_TEMPLATE,
                                             conv2d_winograd_nchwc_args)
from kiln.runtime import GraphExecutor
from kiln.topi.nn.conv2d_nchwc import depthwise_conv2d_nchwc, nchw_to_nchwc, nchwc_to_nchw
from kiln.topi.nn.winograd import conv2d_winograd_nchwc, winograd_weight_transform_numpy
from kiln.topi.x86.conv2d_nchwc import schedule_conv2d_nchwc
from kiln.topi.x86.winograd import schedule_conv2d_winograd_nchwc, winograd_tile

from template_checks import imported_model, run_conv

DW_TOL = dict(rtol=1e-5, atol=1e-5)
WINO_TOL = {2: 5e-6, 4: 5e-5}

# 14x14 stride 1 with padding (the heuristic's 2x7 tile), 15x15 stride 2 (a 4-column tile
# with a tail is possible), and an unpadded 9x9 (no pad_root knob).
DW_ARGS = [
    [[1, 2, 14, 14, 16], [2, 1, 3, 3, 1, 16], [1, 1], [1, 1, 1, 1], [1, 1], "float32"],
    [[1, 1, 15, 15, 16], [1, 1, 3, 3, 1, 16], [2, 2], [1, 1, 1, 1], [1, 1], "float32"],
    [[1, 1, 9, 9, 16], [1, 1, 3, 3, 1, 16], [1, 1], [0, 0, 0, 0], [1, 1], "float32"],
]
# F(4x4) on 14x14 with 4 output blocks; F(2x2) on 9x11 with asymmetric padding and 3 blocks.
WINO_ARGS = [
    [[1, 2, 14, 14, 16], [6, 6, 4, 2, 16, 16], [1, 1, 1, 1], "float32"],
    [[1, 1, 9, 11, 16], [4, 4, 3, 1, 16, 16], [0, 1, 2, 1], "float32"],
]


def _unpack_depthwise(k):
    """[O/oc, 1, KH, KW, 1, oc] -> [O, 1, KH, KW]."""
    ob, _, kh, kw, _, oc = k.shape
    return k.reshape(ob, kh, kw, oc).transpose(0, 3, 1, 2).reshape(ob * oc, 1, kh, kw)


def _check_depthwise(args, sched, tensors, rng):
    data_shape, kernel_shape, strides, pads, dilation, _ = args
    x, w, out = run_conv(args, sched, tensors, rng)
    xt = F.pad(torch.from_numpy(nchwc_to_nchw(x)), (pads[1], pads[3], pads[0], pads[2]))
    ref = F.conv2d(xt, torch.from_numpy(_unpack_depthwise(w)), stride=strides,
                   dilation=dilation, groups=xt.shape[1]).numpy()
    np.testing.assert_allclose(nchwc_to_nchw(out), ref, **DW_TOL)


def _check_winograd(args, sched, tensors, rng):
    data_shape, kernel_shape, pads, _ = args
    tile = kernel_shape[0] - 2
    n, cb, h, w, ic = data_shape
    o = kernel_shape[2] * kernel_shape[5]
    f = kiln.build(sched, tensors, target="llvm")
    x = rng.uniform(-1, 1, (n, cb * ic, h, w)).astype("float32")
    wt = rng.uniform(-1, 1, (o, cb * ic, 3, 3)).astype("float32")
    u = winograd_weight_transform_numpy(wt, tile, ic, kernel_shape[5])
    out = np.zeros([int(d) for d in tensors[2].shape], "float32")
    f(nchw_to_nchwc(x, ic), u, out)
    xt = F.pad(torch.from_numpy(x).double(), (pads[1], pads[3], pads[0], pads[2]))
    ref = F.conv2d(xt, torch.from_numpy(wt).double()).numpy()
    err = np.abs(nchwc_to_nchw(out) - ref).max() / np.abs(ref).max()
    assert err <= WINO_TOL[tile], f"max error {err:.2e} of max|ref| exceeds {WINO_TOL[tile]}"


@pytest.mark.parametrize("args", DW_ARGS)
def test_depthwise_random_configs_match_torch(args, rng):
    task = Task(DEPTHWISE_CONV2D_NCHWC_TEMPLATE, args)
    space = task.config_space
    assert set(space.knobs) == {"tile_y", "tile_x", "row_chunks", "unroll_kernel", "pad_root"}
    assert len(space.knobs["pad_root"]) == (2 if any(args[3]) else 1)
    picks = space.sample(np.random.default_rng(1), 2)
    base = space.get(picks[0]).to_json()["knobs"]
    padded = len(space.knobs["pad_root"]) == 2
    # every unrolling choice, the last with a padded copy where there is padding
    picks += [space.index_of({**base, "unroll_kernel": u, "pad_root": padded and u == "none"})
              for u in ("both", "rx", "none")]
    # more chunks than row tiles (clipped: the last candidate is the height), and 2 chunks of
    # an odd number of row tiles (a guarded tail)
    chunks = space.knobs["row_chunks"].values
    picks.append(space.index_of({**base, "tile_y": 1, "tile_x": 3, "row_chunks": chunks[-1]}))
    if 2 in chunks:
        picks.append(space.index_of({**base, "tile_y": 2, "row_chunks": 2}))
    for index in picks:
        _check_depthwise(args, *task.instantiate(index), rng)


@pytest.mark.parametrize("args", WINO_ARGS)
def test_winograd_random_configs_match_torch(args, rng):
    task = Task(CONV2D_WINOGRAD_NCHWC_TEMPLATE, args)
    space = task.config_space
    assert set(space.knobs) == {"tile_oc", "tile_p", "gemm_order", "unroll_rci", "input_tiles"}
    picks = space.sample(np.random.default_rng(2), 2)
    base = space.get(picks[0]).to_json()["knobs"]
    # both GEMM orders, the lanes loop unrolled, the widest tiles (a tail when 14 does not
    # divide the tile count) and the most channel blocks
    picks += [space.index_of({**base, "gemm_order": o, "unroll_rci": o == "pf"})
              for o in ("fp", "pf")]
    picks.append(space.index_of({**base, "tile_oc": space.knobs["tile_oc"].values[-1],
                                 "tile_p": space.knobs["tile_p"].values[-1],
                                 "input_tiles": space.knobs["input_tiles"].values[-1]}))
    for index in picks:
        _check_winograd(args, *task.instantiate(index), rng)


def test_space_sizes():
    """Hundreds to a few thousand points for real layers (MobileNet's 112x112 depthwise,
    ResNet's 56x56 Winograd)."""
    dw = Task(DEPTHWISE_CONV2D_NCHWC_TEMPLATE,
              [[1, 2, 112, 112, 16], [2, 1, 3, 3, 1, 16], [1, 1], [1, 1, 1, 1], [1, 1],
               "float32"])
    # rows 1,2,4,7,8,14,16 x cols 1..8 x 10 divisors of 112 x 3 unrollings x 2 paddings
    assert len(dw.config_space) == 7 * 8 * 10 * 3 * 2
    wino = Task(CONV2D_WINOGRAD_NCHWC_TEMPLATE,
                [[1, 4, 56, 56, 16], [6, 6, 4, 4, 16, 16], [1, 1, 1, 1], "float32"])
    # blocks 1,2,4 x tiles 1..14 x 2 orders x 2 unrollings x divisors of 196 up to 28
    assert len(wino.config_space) == 3 * 14 * 2 * 2 * 6
    assert wino.default_config().to_json()["knobs"] == {
        "tile_oc": 2, "tile_p": 14, "gemm_order": "fp", "unroll_rci": False, "input_tiles": 14}


@pytest.mark.parametrize("args", DW_ARGS + [
    [[1, 2, 112, 112, 16], [2, 1, 3, 3, 1, 16], [1, 1], [1, 1, 1, 1], [1, 1], "float32"],
    [[1, 3, 20, 20, 8], [3, 1, 5, 5, 1, 8], [1, 1], [2, 2, 2, 2], [1, 1], "float32"]])
def test_depthwise_fallback_is_todays_schedule(args):
    task = Task(DEPTHWISE_CONV2D_NCHWC_TEMPLATE, args)
    s1, t1 = task.instantiate(FallbackConfig())
    with task.target:
        data = te.placeholder(args[0], "float32", name="data")
        kernel = te.placeholder(args[1], "float32", name="kernel")
        out = depthwise_conv2d_nchwc(data, kernel, *args[2:5])
        s2 = schedule_conv2d_nchwc([out])
    assert str(kiln.lower(s1, t1)) == str(kiln.lower(s2, [data, kernel, out]))
    assert depthwise_conv2d_nchwc_args(out.op) == args


@pytest.mark.parametrize("args", WINO_ARGS + [
    [[1, 4, 56, 56, 16], [6, 6, 4, 4, 16, 16], [1, 1, 1, 1], "float32"],
    [[1, 1, 5, 5, 16], [4, 4, 1, 1, 16, 16], [0, 0, 0, 0], "float32"]])
def test_winograd_fallback_is_todays_schedule(args):
    task = Task(CONV2D_WINOGRAD_NCHWC_TEMPLATE, args)
    s1, t1 = task.instantiate(FallbackConfig())
    with task.target:
        data = te.placeholder(args[0], "float32", name="data")
        kernel = te.placeholder(args[1], "float32", name="kernel")
        out = conv2d_winograd_nchwc(data, kernel, 1, args[2])
        s2 = schedule_conv2d_winograd_nchwc([out])
    assert str(kiln.lower(s1, t1)) == str(kiln.lower(s2, [data, kernel, out]))
    assert conv2d_winograd_nchwc_args(out.op) == args


class DwWinoNet(nn.Module):
    """A 3x3 stride-1 conv of 64 channels at 14x14 (Winograd), then a MobileNet-like block:
    1x1 conv, depthwise 3x3, 1x1 conv (the depthwise input is blocked, so it runs blocked)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3, padding=1)
        self.expand = nn.Conv2d(64, 64, 1)
        self.dw = nn.Conv2d(64, 64, 3, padding=1, groups=64)
        self.project = nn.Conv2d(64, 64, 1)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = torch.relu(self.expand(x))
        x = torch.clamp(self.dw(x), 0.0, 6.0)
        return self.project(x)


@pytest.fixture(scope="module")
def dw_wino_net():
    return imported_model(DwWinoNet, (1, 64, 14, 14))


def test_extract_and_compile_with_tuned_configs_match_torch(dw_wino_net, host_lanes):
    mod, params, x, ref = dw_wino_net
    tile = winograd_tile((1, 64, 14, 14), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
    if not tile:
        pytest.skip("no Winograd for this target (neither AVX-512 nor AVX2)")
    lanes, blocks = host_lanes, 64 // host_lanes
    tasks = extract_tasks(mod, params, target="llvm")
    by_name = {t.name: t for t in tasks}
    assert {CONV2D_WINOGRAD_NCHWC_TEMPLATE, DEPTHWISE_CONV2D_NCHWC_TEMPLATE} <= set(by_name)
    wino, dw = by_name[CONV2D_WINOGRAD_NCHWC_TEMPLATE], by_name[DEPTHWISE_CONV2D_NCHWC_TEMPLATE]
    assert wino.args == [[1, blocks, 14, 14, lanes],
                         [tile + 2, tile + 2, blocks, blocks, lanes, lanes], [1, 1, 1, 1],
                         "float32"]
    assert dw.args == [[1, blocks, 14, 14, lanes], [blocks, 1, 3, 3, 1, lanes], [1, 1],
                       [1, 1, 1, 1], [1, 1], "float32"]
    configs = {}
    for task, changes in ((wino, {"tile_oc": 4, "tile_p": 5, "gemm_order": "pf",
                                  "unroll_rci": True, "input_tiles": 2}),
                          (dw, {"tile_y": 7, "tile_x": 4, "row_chunks": 2,
                                "unroll_kernel": "rx", "pad_root": True})):
        default = task.default_config().to_json()["knobs"]
        assert all(default[k] != v for k, v in changes.items()), default
        space = task.config_space
        configs[task.key] = space.get(space.index_of({**default, **changes}))
    with ApplyFixedConfigs(configs) as ctx:
        lib = kiln.compile(mod, target="llvm", params=params)
    assert not set(configs) & set(ctx.fallbacks)
    texts = [str(f) for f in lib.prim_funcs]
    (dw_text,) = [t for t in texts if "depthwise_conv2d_nchwc = allocate" in t]
    assert f"depthwise_conv2d_nchwc = allocate(float32, [{28 * lanes}])" in dw_text  # 7 x 4
    assert "data_pad = allocate" in dw_text               # a padded copy (pad_root)
    (wino_text,) = [t for t in texts if "winograd_gemm.local = allocate" in t]
    # 4 blocks x 5 tiles
    assert f"winograd_gemm.local = allocate(float32, [{20 * lanes}]" in wino_text
    m = GraphExecutor(lib)
    m.run(**{m.get_input_names()[0]: x})
    got = m.get_output(0).numpy()
    # Winograd's bound relative to the output's magnitude; the direct convolutions after it
    # add float32 rounding only (measured ~1e-6 in all).
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err <= WINO_TOL[tile], f"max error {err:.2e} of max|ref|"

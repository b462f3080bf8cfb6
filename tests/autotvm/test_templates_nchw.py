"""x86 templates of the NCHW convolutions (conv2d_nchw.x86, group_conv2d_nchw.x86,
depthwise_conv2d_nchw.x86): random and hand-picked configs against torch, the fallback config
against today's schedule, task extraction and dispatch into kiln.compile.

Tolerance: float32 inputs in [-1, 1), sums of at most 72 products: rtol 1e-4, atol 1e-4.
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
from kiln.autotvm.templates.conv2d_nchw import (CONV2D_NCHW_TEMPLATE,
                                                DEPTHWISE_CONV2D_NCHW_TEMPLATE,
                                                GROUP_CONV2D_NCHW_TEMPLATE, conv2d_nchw_args)
from kiln.runtime import GraphExecutor
from kiln.topi.nn.conv2d import conv2d_nchw
from kiln.topi.x86.conv2d import schedule_conv2d_nchw

from template_checks import imported_model, run_conv

TOL = dict(rtol=1e-4, atol=1e-4)

# (template, [data, kernel, strides, padding, dilation, dtype])
CASES = [
    # padded (pad_at_tile is a knob); 12 output channels: blocks 1, 2, 3, 4, 6, 12
    (CONV2D_NCHW_TEMPLATE, [[1, 8, 10, 12], [12, 8, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1],
                            "float32"]),
    # no padding, 3x1 kernel, stride (2, 1), 13 channels (the heuristic's block 8 leaves a
    # partial block), a 21-wide output (column tails)
    (CONV2D_NCHW_TEMPLATE, [[1, 6, 9, 21], [13, 6, 3, 1], [2, 1], [0, 0, 0, 0], [1, 1],
                            "float32"]),
    (GROUP_CONV2D_NCHW_TEMPLATE, [[1, 8, 10, 10], [12, 2, 3, 3], [1, 1], [1, 1, 1, 1],
                                  [1, 1], "float32"]),
    (DEPTHWISE_CONV2D_NCHW_TEMPLATE, [[1, 8, 13, 20], [8, 1, 3, 3], [1, 1], [1, 1, 1, 1],
                                      [1, 1], "float32"]),
    # channel multiplier 2, batch 2, asymmetric padding, stride 2, dilated rows
    (DEPTHWISE_CONV2D_NCHW_TEMPLATE, [[2, 4, 11, 33], [8, 1, 3, 3], [2, 2], [1, 0, 2, 1],
                                      [2, 1], "float32"]),
]
IDS = [f"{name.split('.')[0]}-{k}" for k, (name, _) in enumerate(CASES)]


def _check(args, sched, tensors, rng):
    data_shape, kernel_shape, strides, pads, dilation, _ = args
    x, w, out = run_conv(args, sched, tensors, rng)
    top, left, bottom, right = pads
    xt = F.pad(torch.from_numpy(x), (left, right, top, bottom))
    ref = F.conv2d(xt, torch.from_numpy(w), stride=strides, dilation=dilation,
                   groups=data_shape[1] // kernel_shape[1]).numpy()
    np.testing.assert_allclose(out, ref, **TOL)


@pytest.mark.parametrize("name,args", CASES, ids=IDS)
def test_random_and_extreme_configs_match_torch(name, args, rng):
    task = Task(name, args)
    space = task.config_space
    knobs = space.knobs
    assert set(knobs) == {"tile_oc", "tile_y", "tile_x", "reduce_order", "unroll_kernel",
                          "pad_at_tile"}
    assert len(knobs["pad_at_tile"]) == (2 if any(args[3]) else 1)
    picks = space.sample(np.random.default_rng(1), 2)
    # every reduction order and unrolling once, on the largest tile, the padding at the
    # tile and at the root
    largest = {k: v.values[-1] for k, v in knobs.items() if k.startswith("tile")}
    pads = knobs["pad_at_tile"].values
    for i, (order, unroll) in enumerate(zip(knobs["reduce_order"].values,
                                            knobs["unroll_kernel"].values[::-1] * 3)):
        picks.append(space.index_of({**largest, "reduce_order": order, "unroll_kernel": unroll,
                                     "pad_at_tile": pads[(i + 1) % len(pads)]}))
    for index in picks:
        _check(args, *task.instantiate(index), rng)


@pytest.mark.parametrize("name,args", CASES, ids=IDS)
def test_fallback_is_todays_schedule(name, args):
    task = Task(name, args)
    s1, t1 = task.instantiate(FallbackConfig())
    with task.target:
        data = te.placeholder(args[0], "float32", name="data")
        kernel = te.placeholder(args[1], "float32", name="kernel")
        out = conv2d_nchw(data, kernel, *args[2:5], groups=args[0][1] // args[1][1])
        s2 = schedule_conv2d_nchw([out])
    today = str(kiln.lower(s2, [data, kernel, out]))
    assert str(kiln.lower(s1, t1)) == today
    # the default config dispatched to topi's schedule is today's program, too
    with task.target, ApplyFixedConfigs({task.key: task.default_config()}) as ctx:
        s3 = schedule_conv2d_nchw([out])
    assert ctx.fallbacks == [] and str(kiln.lower(s3, [data, kernel, out])) == today
    # the args computed from the op are the task's args (one function for both)
    assert conv2d_nchw_args(out.op) == args


def test_space_sizes_and_defaults():
    dw = Task(DEPTHWISE_CONV2D_NCHW_TEMPLATE,
              [[1, 32, 112, 112], [32, 1, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], "float32"])
    # channels 1, 2, 4 x rows 1, 2, 4, 7, 8, 14, 16 x columns 8, 16, 32 x 2 orders x 3
    # unrollings x padding at the tile or the root
    assert len(dw.config_space) == 3 * 7 * 3 * 2 * 3 * 2
    assert dw.default_config().to_json()["knobs"] == {
        "tile_oc": 1, "tile_y": 8, "tile_x": 16, "reduce_order": "yx", "unroll_kernel": "none",
        "pad_at_tile": True}
    pw = Task(CONV2D_NCHW_TEMPLATE,
              [[1, 64, 14, 14], [128, 64, 1, 1], [1, 1], [0, 0, 0, 0], [1, 1], "float32"])
    # a 1x1 kernel: one reduction order, nothing to unroll, no padding
    assert {k: len(v) for k, v in pw.config_space.knobs.items()} == {
        "tile_oc": 5, "tile_y": 2, "tile_x": 2, "reduce_order": 1, "unroll_kernel": 1,
        "pad_at_tile": 1}


def test_wrong_template_for_the_shapes_is_named():
    task = Task(CONV2D_NCHW_TEMPLATE,
                [[1, 8, 6, 6], [8, 1, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], "float32"])
    with pytest.raises(ValueError, match="depthwise_conv2d_nchw.x86"):
        task.config_space


def _run(lib, x):
    m = GraphExecutor(lib)
    m.run(**{m.get_input_names()[0]: x})
    return m.get_output(0).numpy()


def _kernel_text(lib, anchor):
    texts = [str(f) for f in lib.prim_funcs if anchor in str(f)]
    assert len(texts) == 1
    return texts[0]


def test_lone_depthwise_gets_a_task_and_compiles_with_its_config():
    """In NCHW (opt_level 2; at 3 a 28x28 depthwise conv runs blocked) its own template."""
    mod, params, x, ref = imported_model(
        lambda: nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.ReLU()),
        (1, 32, 28, 28))
    tasks = extract_tasks(mod, params, target="llvm", opt_level=2)
    assert [(t.name, t.args, t.count) for t in tasks] == [
        (DEPTHWISE_CONV2D_NCHW_TEMPLATE,
         [[1, 32, 28, 28], [32, 1, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], "float32"], 1)]
    task = tasks[0]
    space = task.config_space
    default = task.default_config().to_json()["knobs"]
    assert default == {"tile_oc": 1, "tile_y": 7, "tile_x": 16, "reduce_order": "yx",
                       "unroll_kernel": "none", "pad_at_tile": True}
    cfg = space.get(space.index_of({"tile_oc": 2, "tile_y": 4, "tile_x": 28, "reduce_order": "xy",
                                    "unroll_kernel": "ryrx", "pad_at_tile": False}))
    with ApplyFixedConfigs({task.key: cfg}) as ctx:
        lib = kiln.compile(mod, target="llvm", params=params, opt_level=2)
    assert ctx.fallbacks == []
    text = _kernel_text(lib, "depthwise_conv2d_nchw")
    assert "allocate(float32, [224])" in text      # 2 channels x 4 rows x 28 columns
    assert "data_pad = allocate(float32, [28800])" in text   # padded once, at the root
    np.testing.assert_allclose(_run(lib, x), ref, **TOL)
    # and untuned, the same model compiles to the heuristic's program (padding per row block)
    with ApplyFixedConfigs({}) as ctx:
        text = _kernel_text(kiln.compile(mod, target="llvm", params=params, opt_level=2),
                            "depthwise_conv2d_nchw")
    assert ctx.fallbacks == [task.key] and "[28800]" not in text


def test_grouped_conv_gets_a_task_and_compiles_with_its_config():
    """Below opt_level 3 (no blocked layout) a grouped convolution runs in NCHW, under its
    own template; at 3 it is a blocked conv2d_nchwc task like any other convolution."""
    mod, params, x, ref = imported_model(
        lambda: nn.Sequential(nn.Conv2d(16, 24, 3, padding=1, groups=4), nn.ReLU()),
        (1, 16, 12, 12))
    (task,) = extract_tasks(mod, params, target="llvm", opt_level=2)
    assert task.name == GROUP_CONV2D_NCHW_TEMPLATE
    space = task.config_space
    cfg = space.get(space.index_of({"tile_oc": 4, "tile_y": 2, "tile_x": 12,
                                    "reduce_order": "yxc", "unroll_kernel": "rx",
                                    "pad_at_tile": True}))
    with ApplyFixedConfigs({task.key: cfg}) as ctx:
        lib = kiln.compile(mod, target="llvm", params=params, opt_level=2)
    assert ctx.fallbacks == []
    assert "allocate(float32, [96])" in _kernel_text(lib, "group_conv2d_nchw")   # 4 x 2 x 12
    np.testing.assert_allclose(_run(lib, x), ref, **TOL)

    (blocked,) = extract_tasks(mod, params, target="llvm")
    assert blocked.name == "conv2d_nchwc.x86"
    space = blocked.config_space
    cfg = space.get(space.index_of({**space.get(0).knobs, "tile_y": 3, "tile_x": 4}))
    with ApplyFixedConfigs({blocked.key: cfg}) as ctx:
        lib = kiln.compile(mod, target="llvm", params=params)
    assert ctx.fallbacks == []
    np.testing.assert_allclose(_run(lib, x), ref, **TOL)



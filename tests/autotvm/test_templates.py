"""x86 templates (conv2d_nchwc.x86, dense_pack.x86), task extraction and dispatch into
kiln.compile; numbers checked against torch (conv) and numpy (dense)."""
import numpy as np
import pytest
import torch
from torch import nn

import kiln
from kiln import te
from kiln.autotvm.extract import extract_tasks
from kiln.autotvm.space import FallbackConfig
from kiln.autotvm.task import ApplyFixedConfigs, Task
from kiln.autotvm.templates import (BATCH_MATMUL_TEMPLATE, CONV2D_NCHWC_TEMPLATE,
                                    DENSE_PACK_TEMPLATE, MATMUL_TEMPLATE, conv2d_nchwc_args,
                                    dense_pack_args, matmul_args)
from kiln.runtime import GraphExecutor
from kiln.topi.nn.conv2d_nchwc import conv2d_nchwc, nchwc_to_nchw
from kiln.topi.nn.dense import batch_matmul, dense, matmul, pack_width
from kiln.topi.x86.conv2d_nchwc import schedule_conv2d_nchwc
from kiln.topi.x86.dense import schedule_batch_matmul, schedule_dense, schedule_matmul

from pinned_targets import AVX512
from template_checks import imported_model, run_conv

TOL = dict(rtol=1e-4, atol=1e-4)   # float32 sums of up to 288 products of values in [-1, 1]

# 10 wide: padding read in place; 30 wide: a padded copy (pad_root is a knob).
CONV_ARGS = [
    [[1, 2, 10, 10, 16], [2, 2, 3, 3, 16, 16], [1, 1], [1, 1, 1, 1], [1, 1], "float32"],
    [[1, 1, 30, 30, 16], [2, 1, 3, 3, 16, 16], [1, 1], [1, 1, 1, 1], [1, 1], "float32"],
]
DENSE_ARGS = [
    [[12, 40], [20, 40], 20, "float32"],          # the compute packs the weight itself
    [[12, 40], [2, 40, 16], 20, "float32"],       # already packed panels (NR = 16)
]


def _unpack_kernel(k):
    """[O/oc, I/ic, KH, KW, ic, oc] -> OIHW."""
    ob, cb, kh, kw, ic, oc = k.shape
    return k.transpose(0, 5, 1, 4, 2, 3).reshape(ob * oc, cb * ic, kh, kw)


def _check_conv(args, sched, tensors, rng):
    data_shape, kernel_shape, strides, pads, dilation, _ = args
    x, w, out = run_conv(args, sched, tensors, rng)
    ref = torch.nn.functional.conv2d(torch.from_numpy(nchwc_to_nchw(x)),
                                     torch.from_numpy(_unpack_kernel(w)), stride=strides,
                                     padding=(pads[0], pads[1]), dilation=dilation).numpy()
    np.testing.assert_allclose(nchwc_to_nchw(out), ref, **TOL)


def _unpacked(weight_shape, w, units):
    if len(weight_shape) == 2:
        return w
    return w.transpose(0, 2, 1).reshape(-1, weight_shape[1])[:units]


def _check_dense(args, sched, tensors, rng):
    data_shape, weight_shape, units, _ = args
    f = kiln.build(sched, tensors, target="llvm")
    x = rng.uniform(-1, 1, data_shape).astype("float32")
    w = rng.uniform(-1, 1, weight_shape).astype("float32")
    out = np.zeros((data_shape[0], units), "float32")
    f(x, w, out)
    np.testing.assert_allclose(out, x @ _unpacked(weight_shape, w, units).T, **TOL)


@pytest.mark.parametrize("args", CONV_ARGS)
def test_conv_template_random_configs_match_torch(args, rng):
    task = Task(CONV2D_NCHWC_TEMPLATE, args)
    space = task.config_space
    assert set(space.knobs) == {"tile_oc", "tile_y", "tile_x", "reduce_order", "unroll_rx",
                                "pad_root", "pass_blocks"}
    assert list(space.knobs)[-1] == "pass_blocks" and len(space.knobs["pass_blocks"]) == 1
    assert len(space.knobs["pad_root"]) == (2 if args[0][3] == 30 else 1)
    picks = space.sample(np.random.default_rng(1), 2)
    if len(space.knobs["pad_root"]) == 2:        # the padded copy inlined, too
        picks.append(space.index_of({"tile_oc": 1, "tile_y": 3, "tile_x": 7, "pad_root": False,
                                     "reduce_order": "yxc", "unroll_rx": True,
                                     "pass_blocks": 0}))
    # every reduction order, once with the kernel-column loop unrolled
    picks += [space.index_of({**space.get(picks[0]).to_json()["knobs"], "reduce_order": o,
                              "unroll_rx": o == "ycx"}) for o in ("cyx", "ycx", "yxc")]
    for index in picks:
        _check_conv(args, *task.instantiate(index), rng)


def test_conv_template_offers_the_heuristics_passes_over_input_blocks(rng):
    """1x1 convs at 7x7 on AVX-512 whose heuristic runs passes over input channel blocks: the
    fallback is the heuristic's pass tile; "pass_blocks" offers 0 or its passes, last, so a
    record written before the knob existed reads as one pass (4 output blocks: "tile_oc"
    unchanged). A 5-block tile is offered besides 1 (whose records of before then no longer
    fit: the dispatcher warns and uses the default). Configs with and without passes match
    torch (built for this host: the pass structure does not depend on the target)."""
    args = [[1, 16, 7, 7, 16], [4, 16, 1, 1, 16, 16], [1, 1], [0, 0, 0, 0], [1, 1], "float32"]
    task = Task(CONV2D_NCHWC_TEMPLATE, args, target=AVX512)
    space = task.config_space
    assert [e.val for e in space.knobs["tile_oc"]] == [1, 2, 4]
    assert [e.val for e in space.knobs["pass_blocks"]] == [0, 4]
    fallback = task.default_config()
    assert [fallback[k].val for k in ("tile_oc", "tile_x", "pass_blocks")] == [4, 6, 4]
    old = {k: v for k, v in fallback.to_json()["knobs"].items() if k != "pass_blocks"}
    before = space.index_of({**old, "pass_blocks": 0})    # the knob is the top digit
    assert space.from_json({"index": before, "knobs": old})["pass_blocks"].val == 0
    host = Task(CONV2D_NCHWC_TEMPLATE, args)
    for passes in (0, 4):
        config = host.config_space.index_of({**old, "pass_blocks": passes})
        _check_conv(args, *host.instantiate(config), rng)
    odd = Task(CONV2D_NCHWC_TEMPLATE, [[1, 10, 7, 7, 16], [5, 10, 1, 1, 16, 16], *args[2:]],
               target=AVX512)
    assert [e.val for e in odd.config_space.knobs["tile_oc"]] == [1, 5]
    assert [odd.default_config()[k].val for k in ("tile_oc", "tile_x", "pass_blocks")] == \
        [5, 4, 5]


@pytest.mark.parametrize("args", DENSE_ARGS)
def test_dense_template_random_configs_match_numpy(args, rng):
    task = Task(DENSE_PACK_TEMPLATE, args)
    # MR in 1..12 rows x k steps unrolled (1, 2, 4, 8 divide 40) x row or column threads x
    # panels per tile: 1 or 2 when the 20 columns take several panels (16 columns packed; the
    # host's width when the compute packs: AVX-512's 32 hold all 20) x panels prefetched 0, 1
    # or 2 column tiles ahead (only with several column tiles)
    with task.target:
        nr = args[1][2] if len(args[1]) == 3 else pack_width(20)
    panels = 2 if 20 > nr else 1
    assert len(task.config_space) == 12 * 4 * 2 * panels * (3 if panels == 2 else 1)
    # a 2-D weight is packed inside the kernel: compute_flop counts the packing's selects too
    assert task.flop == 2 * 12 * 40 * 20 if len(args[1]) == 3 else task.flop > 2 * 12 * 40 * 20
    picks = task.config_space.sample(np.random.default_rng(2), 3)
    if panels == 2:
        picks.append(task.config_space.index_of({"tile_y": 5, "k_unroll": 2, "col_parallel": False,
                                                 "tile_x": 2, "prefetch": 0}))
        picks += [task.config_space.index_of({"tile_y": 3, "k_unroll": 4, "col_parallel": col,
                                              "tile_x": 1, "prefetch": ahead})
                  for col, ahead in ((True, 1), (False, 2))]
    for index in picks:
        _check_dense(args, *task.instantiate(index), rng)


@pytest.mark.parametrize("args", CONV_ARGS)
def test_conv_fallback_is_todays_schedule(args):
    task = Task(CONV2D_NCHWC_TEMPLATE, args)
    s1, t1 = task.instantiate(FallbackConfig())
    with task.target:
        data = te.placeholder(args[0], "float32", name="data")
        kernel = te.placeholder(args[1], "float32", name="kernel")
        out = conv2d_nchwc(data, kernel, *args[2:5])
        s2 = schedule_conv2d_nchwc([out])
    assert str(kiln.lower(s1, t1)) == str(kiln.lower(s2, [data, kernel, out]))
    # and the args computed from the op are the task's args (one function for both)
    assert conv2d_nchwc_args(out.op) == args


@pytest.mark.parametrize("args", DENSE_ARGS)
def test_dense_fallback_is_todays_schedule(args):
    task = Task(DENSE_PACK_TEMPLATE, args)
    s1, t1 = task.instantiate(FallbackConfig())
    with task.target:
        data = te.placeholder(args[0], "float32", name="data")
        weight = te.placeholder(args[1], "float32", name="weight")
        out = dense(data, weight, units=args[2] if len(args[1]) == 3 else None)
        s2 = schedule_dense([out])
    assert str(kiln.lower(s1, t1)) == str(kiln.lower(s2, [data, weight, out]))
    assert dense_pack_args(out.op) == args


# (template, args): a transposed b is packed by the compute; batch 1 of b broadcasts.
MATMUL_ARGS = [
    (MATMUL_TEMPLATE, [[9, 24], [24, 20], False, False, "float32"]),
    (MATMUL_TEMPLATE, [[24, 9], [20, 24], True, True, "float32"]),
    (BATCH_MATMUL_TEMPLATE, [[3, 10, 16], [3, 24, 16], False, True, "float32"]),
    (BATCH_MATMUL_TEMPLATE, [[3, 10, 16], [1, 16, 24], False, False, "float32"]),
]
_MATMUL = {MATMUL_TEMPLATE: (matmul, schedule_matmul),
           BATCH_MATMUL_TEMPLATE: (batch_matmul, schedule_batch_matmul)}


def _op(x, transposed):
    return np.swapaxes(x, -1, -2) if transposed else x


@pytest.mark.parametrize("name,args", MATMUL_ARGS)
def test_matmul_templates_random_configs_match_numpy(name, args, rng):
    a_shape, b_shape, ta, tb, _ = args
    task = Task(name, args)
    assert set(task.config_space.knobs) == {"tile_y", "k_unroll", "col_parallel", "tile_x",
                                            "prefetch"}
    a = rng.uniform(-1, 1, a_shape).astype("float32")
    b = rng.uniform(-1, 1, b_shape).astype("float32")
    ref = _op(a, ta) @ _op(b, tb)
    for index in task.config_space.sample(np.random.default_rng(3), 3):
        sched, tensors = task.instantiate(index)
        f = kiln.build(sched, tensors, target="llvm")
        out = np.zeros(ref.shape, "float32")
        f(a, b, out)
        np.testing.assert_allclose(out, ref, **TOL)


@pytest.mark.parametrize("name,args", MATMUL_ARGS)
def test_matmul_fallback_is_todays_schedule(name, args):
    compute, schedule = _MATMUL[name]
    task = Task(name, args)
    s1, t1 = task.instantiate(FallbackConfig())
    with task.target:
        a = te.placeholder(args[0], "float32", name="a")
        b = te.placeholder(args[1], "float32", name="b")
        out = compute(a, b, args[2], args[3])
        s2 = schedule([out])
    assert str(kiln.lower(s1, t1)) == str(kiln.lower(s2, [a, b, out]))
    assert matmul_args(out.op) == args


class SmallNet(nn.Module):
    """Four direct convolutions (two of the same shape) and a dense: no Winograd (< 64
    channels)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 32, 3, padding=1)
        self.c4 = nn.Conv2d(32, 32, 3, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        for conv in (self.c1, self.c2, self.c3, self.c4):
            x = torch.relu(conv(x))
        return self.fc(x.mean((2, 3)))


@pytest.fixture(scope="module")
def small_net():
    return imported_model(SmallNet, (1, 3, 10, 10))


def test_extract_tasks_dedupes_counts_and_orders(small_net):
    mod, params, _, _ = small_net
    tasks = extract_tasks(mod, params, target=AVX512)      # 16-lane channel blocks
    assert [(t.name, t.count) for t in tasks] == [
        (CONV2D_NCHWC_TEMPLATE, 2), (CONV2D_NCHWC_TEMPLATE, 1), (CONV2D_NCHWC_TEMPLATE, 1),
        (DENSE_PACK_TEMPLATE, 1)]
    assert tasks[0].args[:2] == [[1, 2, 10, 10, 16], [2, 2, 3, 3, 16, 16]]   # c3 and c4
    assert tasks[0].flop == 2 * 100 * 32 * 32 * 9
    weights = [t.flop * t.count for t in tasks]
    assert weights == sorted(weights, reverse=True)
    assert len({t.key for t in tasks}) == len(tasks)


def test_compile_uses_dispatched_config_and_matches_torch(small_net, host_lanes):
    mod, params, x, ref = small_net
    task = extract_tasks(mod, params)[0]
    space = task.config_space
    # default for a 10x10 output: 2 blocks x 1 row x 10 columns (20 of AVX-512's 32
    # registers), AVX2: x 5 columns (10 of 16)
    default = task.default_config().to_json()["knobs"]
    assert default == {"tile_oc": 2, "tile_y": 1, "tile_x": {16: 10, 8: 5}[host_lanes],
                       "pad_root": True, "reduce_order": "cyx", "unroll_rx": False,
                       "pass_blocks": 0}
    cfg = space.get(space.index_of({**default, "tile_oc": 1, "tile_y": 2, "tile_x": 5}))
    with ApplyFixedConfigs({task.key: cfg}) as ctx:
        lib = kiln.compile(mod, target="llvm", params=params)
    assert task.key not in ctx.fallbacks and len(set(ctx.fallbacks)) == 3
    c3 = f"p0: Buffer(float32, [1, {32 // host_lanes}, 10, 10, {host_lanes}])"
    kernels = [str(f) for f in lib.prim_funcs if c3 in str(f) and "conv2d_nchwc" in f.name]
    assert len(kernels) == 1
    text = kernels[0]
    assert f"allocate(float32, [{10 * host_lanes}])" in text    # 1 block x 2 rows x 5 cols
    # a row loop in the tile, rows of 5 columns: the default (2 x 1 x 10 or, AVX2, 2 x 1 x 5)
    # has one row per tile; the 2 column tiles are peeled apart at the padded borders
    assert f"i2.inner*{5 * host_lanes}" in text
    m = GraphExecutor(lib)
    m.run(**{m.get_input_names()[0]: x})
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, **TOL)

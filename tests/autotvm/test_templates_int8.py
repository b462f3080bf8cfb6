"""x86 templates of the integer kernels (conv2d_nchwc_int8.x86, dense_int8.x86): random
configs equal the exact integer result, the fallback config is the schedule kiln.compile
builds, and a model's integer kernels become tasks whose configs kiln.compile dispatches."""
import numpy as np
import pytest
import torch

import kiln
from kiln import te
from kiln.autotvm.extract import extract_tasks
from kiln.autotvm.space import FallbackConfig
from kiln.autotvm.task import ApplyFixedConfigs, Task
from kiln.autotvm.templates.int8 import (CONV2D_NCHWC_INT8_TEMPLATE, DENSE_INT8_TEMPLATE,
                                         conv2d_nchwc_int8_args, dense_int8_args)
from kiln.graph import Function, IRModule, call, const, var
from kiln.runtime import GraphExecutor
from kiln.target import Target
from kiln.topi.nn.conv2d_nchwc import nchw_to_nchwc, nchwc_to_nchw
from kiln.topi.nn.conv2d_nchwc_int8 import conv2d_nchwc_int8, pack_conv_kernel_int8_numpy
from kiln.topi.x86.conv2d_int8 import schedule_conv2d_nchwc_int8
from kiln.topi.x86.dense_int8 import dense_int8, pack_int8_weight, schedule_dense_int8
from kiln.topi.x86.tensor_intrin import conv_int8_layout, dense_int8_layout

HOST = Target("llvm")
pytestmark = pytest.mark.skipif(conv_int8_layout(HOST, np.zeros((8, 8, 1, 1), "int8")) is None,
                                reason="no integer dot product on this CPU (kiln needs AVX2)")
RNG = np.random.default_rng(0)
# (weight bound, stride, padding): 7-bit weights take vpmaddubsw's int8 groups of 4 on AVX2,
# full-range ones vpmaddwd's int16 pairs
CONV_CASES = [(64, 1, 1), (128, 2, 1), (64, 1, 0)]


def _conv_case(bound, stride, pad, pad_value=3):
    w = RNG.integers(-bound, bound, (16, 16, 3, 3)).astype("int8")
    lanes, group, dtype = conv_int8_layout(HOST, w)
    packed = pack_conv_kernel_int8_numpy(w, 8, lanes, group, dtype)
    x = RNG.integers(0, 256, (1, 16, 9, 9)).astype("uint8")
    args = [[1, 2, 9, 9, 8], list(packed.shape), [stride, stride], [pad] * 4, [1, 1], "uint8",
            dtype, pad_value]
    padded = np.pad(x.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)),
                    constant_values=pad_value)
    ref = torch.nn.functional.conv2d(torch.from_numpy(padded), torch.from_numpy(
        w.astype("float64")), stride=stride).numpy().astype("int64")
    return args, nchw_to_nchwc(x, 8), packed, ref


def _run_conv(sched, tensors, data, packed):
    f = kiln.build(sched, tensors, target="llvm")
    out = np.zeros([int(d) for d in tensors[2].shape], "int32")
    f(data, packed, out)
    return nchwc_to_nchw(out)


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_int8_template_random_configs_are_exact(case):
    args, data, packed, ref = _conv_case(*case)
    task = Task(CONV2D_NCHWC_INT8_TEMPLATE, args)
    space = task.config_space
    assert set(space.knobs) == {"tile_oc", "tile_y", "tile_x", "reduce_order"}
    picks = space.sample(np.random.default_rng(1), 3)
    picks += [space.index_of({**space.get(picks[0]).to_json()["knobs"], "reduce_order": o})
              for o in ("cyx", "ycx", "yxc")]
    for index in picks:
        np.testing.assert_array_equal(_run_conv(*task.instantiate(index), data, packed), ref)


@pytest.mark.parametrize("case", CONV_CASES[:2])
def test_conv_int8_fallback_is_todays_schedule(case):
    args, *_ = _conv_case(*case)
    task = Task(CONV2D_NCHWC_INT8_TEMPLATE, args)
    s1, t1 = task.instantiate(FallbackConfig())
    with task.target:
        data = te.placeholder(args[0], "uint8", name="data")
        kernel = te.placeholder(args[1], args[6], name="kernel")
        out = conv2d_nchwc_int8(data, kernel, *args[2:5], pad_value=args[7])
        s2 = schedule_conv2d_nchwc_int8([out])
    assert str(kiln.lower(s1, t1)) == str(kiln.lower(s2, [data, kernel, out]))
    assert conv2d_nchwc_int8_args(out.op) == args


def _dense_case(bound):
    w = RNG.integers(-bound, bound, (24, 40)).astype("int8")
    lanes, group, dtype = dense_int8_layout(HOST, w)
    packed = pack_int8_weight(w, lanes, group, dtype)
    x = RNG.integers(0, 256, (7, 40)).astype("uint8")
    args = [[7, 40], list(packed.shape), 24, "uint8", dtype]
    return args, x, packed, x.astype("int64") @ w.T.astype("int64")


@pytest.mark.parametrize("bound", [64, 128])
def test_dense_int8_template_random_configs_are_exact_and_fallback_is_todays(bound):
    args, x, packed, ref = _dense_case(bound)
    task = Task(DENSE_INT8_TEMPLATE, args)
    assert set(task.config_space.knobs) == {"tile_y", "tile_x"}
    for index in task.config_space.sample(np.random.default_rng(2), 4):
        f = kiln.build(*task.instantiate(index), target="llvm")
        out = np.zeros((7, 24), "int32")
        f(x, packed, out)
        np.testing.assert_array_equal(out, ref)

    s1, t1 = task.instantiate(FallbackConfig())
    with task.target:
        data = te.placeholder(args[0], "uint8", name="data")
        weight = te.placeholder(args[1], args[4], name="packed")
        out = dense_int8(data, weight, 24)
        s2 = schedule_dense_int8([out])
    assert str(kiln.lower(s1, t1)) == str(kiln.lower(s2, [data, weight, out]))
    assert dense_int8_args(out.op) == args


def test_an_integer_model_is_tuned_through_its_int8_kernels():
    """uint8 conv + relu + dense on int8 weights: both integer kernels become tasks, and a
    config that is not the default reaches kiln.compile and keeps the result exact."""
    x = var("x", (1, 16, 8, 8), "uint8")
    w = RNG.integers(-64, 64, (32, 16, 3, 3)).astype("int8")
    wd = RNG.integers(-64, 64, (10, 32 * 64)).astype("int8")
    y = call("nn.conv2d", x, const(w), padding=(1, 1, 1, 1), out_dtype="int32")
    y = call("cast", call("clip", call("right_shift", y, const(np.int32(8))), a_min=0.0,
                          a_max=255.0), dtype="uint8")
    y = call("nn.dense", call("reshape", y, newshape=(1, -1)), const(wd), out_dtype="int32")
    mod = IRModule.from_expr(Function([x], y))
    tasks = extract_tasks(mod)
    assert sorted(t.name for t in tasks) == [CONV2D_NCHWC_INT8_TEMPLATE, DENSE_INT8_TEMPLATE]

    data = RNG.integers(0, 256, (1, 16, 8, 8)).astype("uint8")
    conv = torch.nn.functional.conv2d(torch.from_numpy(data.astype("float64")),
                                      torch.from_numpy(w.astype("float64")), padding=1).numpy()
    hidden = np.clip(conv.astype("int64") >> 8, 0, 255).reshape(1, -1)
    ref = hidden @ wd.T.astype("int64")
    configs = {}
    for task in tasks:
        space = task.config_space
        default = task.default_config().to_json()["knobs"]
        other = next(i for i in space.sample(np.random.default_rng(3), 8)
                     if space.get(i).to_json()["knobs"] != default)
        configs[task.key] = space.get(other)
    with ApplyFixedConfigs(configs) as ctx:
        lib = kiln.compile(mod, target="llvm")
    assert not set(configs) & set(ctx.fallbacks)
    m = GraphExecutor(lib)
    m.run(x=data)
    np.testing.assert_array_equal(m.get_output(0).numpy(), ref)

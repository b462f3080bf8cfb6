"""VDLA as a partitioning target: an int8 ResNet-18 (kiln.testing.int8_resnet, small) with every
convolution VDLA can run offloaded, the rest on the CPU; its output equals the CPU-only int8
model's bit for bit and numpy's reference (float32 pooling and classifier at the end:
atol 1e-5 * max|ref|); the library exports and reloads; the tiling comes from the dispatch
context; convolutions VDLA cannot run stay on the CPU."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
from kiln import autotvm
from kiln.accel.vdla.external import VDLAExternalModule
from kiln.accel.vdla.conv2d import reference
from kiln.accel.vdla.partition import partition_for_vdla, vdla_tasks
from kiln.autotvm.templates.vdla import CONV2D_INT8_VDLA_TEMPLATE
from kiln.graph import Function, IRModule, call, const, var
from kiln.runtime import GraphExecutor, load_module
from kiln.runtime.external import external_modules
from kiln.testing.int8_resnet import int8_resnet18


def run(lib, x):
    m = GraphExecutor(lib)
    m.set_input("data", x)
    m.run()
    return m.get_output(0).numpy()


@pytest.fixture(scope="module")
def resnet():
    mod, x, reference = int8_resnet18(width=16, image_size=32)
    return mod, x, reference, kiln.compile(mod), kiln.compile(partition_for_vdla(mod))


def test_resnet_convolutions_run_on_vdla(resnet, tmp_path):
    mod, x, reference, cpu_lib, vdla_lib = resnet
    want = reference(x)
    cpu = run(cpu_lib, x)
    got = run(vdla_lib, x)
    np.testing.assert_allclose(cpu, want, rtol=0, atol=1e-5 * np.abs(want).max())
    np.testing.assert_array_equal(got, cpu)
    layers = [label for e in external_modules(vdla_lib) for n in e.function_names()
              for label, _ in e.last_stats[n]]
    # 16 3x3 convolutions and 3 1x1 shortcuts; the 7x7 stem (3 input channels) stays on the CPU
    assert len(layers) == 19 and not any(label.startswith("conv 3x") for label in layers)
    assert sum(label.endswith("k1 s2") for label in layers) == 3
    cpu_kernels = [k["func"] for k in vdla_lib.graph["kernels"] if "conv2d" in k["func"]]
    assert len(cpu_kernels) == 1      # the stem

    path = tmp_path / "resnet_vdla.so"
    vdla_lib.export_library(path)
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import numpy as np
        from kiln.runtime import GraphExecutor, load_module
        m = GraphExecutor(load_module({str(path)!r}))
        m.set_input("data", np.load({str(tmp_path / 'x.npy')!r}))
        m.run()
        np.save({str(tmp_path / 'y.npy')!r}, m.get_output(0).numpy())
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), got)


def test_the_tiling_comes_from_the_dispatch_context():
    x = var("x", (1, 32, 8, 8), "int8")
    w = np.random.default_rng(1).integers(-16, 17, (32, 32, 3, 3)).astype(np.int8)
    y = call("nn.conv2d", x, const(w), padding=[1, 1, 1, 1], out_dtype="int32")
    y = call("cast", call("clip", call("right_shift", y, const(np.array(6, np.int32))),
                          a_min=-128.0, a_max=127.0), dtype="int8")
    mod = partition_for_vdla(IRModule.from_expr(Function([x], y)))
    task = autotvm.Task(CONV2D_INT8_VDLA_TEMPLATE, [1, 32, 8, 8, 32, 3, 1, 1, 6, False], "vdla")
    small = task.config_space.get(0)          # one row, one block at a time, no vthreads
    with autotvm.ApplyFixedConfigs({task.key: small}):
        tuned = kiln.compile(mod)
    default = kiln.compile(mod)
    xs = np.random.default_rng(2).integers(-128, 128, (1, 32, 8, 8)).astype(np.int8)
    m_t, m_d = GraphExecutor(tuned), GraphExecutor(default)
    for m in (m_t, m_d):
        m.set_input("x", xs)
        m.run()
    np.testing.assert_array_equal(m_t.get_output(0).numpy(), m_d.get_output(0).numpy())
    (t_mod,), (d_mod,) = external_modules(tuned), external_modules(default)
    assert isinstance(t_mod, VDLAExternalModule)
    (t_prog,), (d_prog,) = t_mod.programs, d_mod.programs
    s, tensors = task.instantiate(small)
    assert t_prog.program == kiln.build(s, tensors, target="vdla").program
    assert t_prog.program != d_prog.program


@pytest.mark.parametrize("why, shape, wshape, attrs, clip", [
    ("grouped", (1, 32, 8, 8), (32, 16, 3, 3), {"groups": 2}, (-128, 127)),
    ("channels not in blocks of 16", (1, 24, 8, 8), (32, 24, 3, 3), {}, (-128, 127)),
    ("dilated", (1, 32, 8, 8), (32, 32, 3, 3), {"dilation": [2, 2]}, (-128, 127)),
    ("uneven padding", (1, 32, 8, 8), (32, 32, 3, 3), {"padding": [1, 0, 1, 0]}, (-128, 127)),
    ("clip is not int8's range", (1, 32, 8, 8), (32, 32, 3, 3), {}, (-100, 100)),
])
def test_what_vdla_cannot_run_stays_on_the_cpu(why, shape, wshape, attrs, clip):
    x = var("x", shape, "int8")
    w = np.ones(wshape, np.int8)
    attrs = {"padding": [1, 1, 1, 1], **attrs}
    y = call("nn.conv2d", x, const(w), out_dtype="int32", **attrs)
    y = call("cast", call("clip", call("right_shift", y, const(np.array(4, np.int32))),
                          a_min=float(clip[0]), a_max=float(clip[1])), dtype="int8")
    mod = partition_for_vdla(IRModule.from_expr(Function([x], y)))
    assert list(mod) == ["main"], why


def test_odd_tiles_compile_and_tasks_are_listed():
    """48 output channels at 7x7: no tile splits between two virtual threads, so the fallback
    takes one; vdla_tasks lists what the codegen asks the dispatch context for."""
    x = var("x", (1, 32, 7, 7), "int8")
    w = np.random.default_rng(3).integers(-16, 17, (48, 32, 3, 3)).astype(np.int8)
    y = call("nn.conv2d", x, const(w), padding=[1, 1, 1, 1], out_dtype="int32")
    y = call("cast", call("clip", call("right_shift", y, const(np.array(6, np.int32))),
                          a_min=0.0, a_max=127.0), dtype="int8")
    mod = partition_for_vdla(IRModule.from_expr(Function([x], y)))
    (task,) = vdla_tasks(mod)
    assert task.args == [1, 32, 7, 7, 48, 3, 1, 1, 6, True]
    assert task.default_config()["vthreads"].val == 1
    xs = np.random.default_rng(4).integers(-128, 128, (1, 32, 7, 7)).astype(np.int8)
    m = GraphExecutor(kiln.compile(mod))
    m.set_input("x", xs)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(),
                                  reference(xs, w, 1, 1, 6, relu=True))


def test_resnet_tasks(resnet):
    mod, x, _, _, vdla_lib = resnet
    run(vdla_lib, x)
    layers = {label for e in external_modules(vdla_lib) for n in e.function_names()
              for label, _ in e.last_stats[n]}
    tasks = vdla_tasks(partition_for_vdla(mod))
    assert all(t.name == CONV2D_INT8_VDLA_TEMPLATE and t.target.kind == "vdla" for t in tasks)
    assert len({t.key for t in tasks}) == len(tasks) <= 19
    # every convolution VDLA runs has its task (same shapes; shifts and ReLUs in the args)
    assert {f"conv {c}x{h}x{w} -> {o} k{k} s{s}" for _, c, h, w, o, k, s, *_ in
            (t.args for t in tasks)} == layers

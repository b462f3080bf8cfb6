"""kiln.compile + GraphExecutor + export/load on small graphs built by hand.

Operators here get their computes from a test-local registration so that the compiler is
tested independently of the operator catalog's hooks.
"""
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.graph import Function, IRModule, OpPattern, call, const, register_op, var
from kiln.graph.ops.relations import broadcast, identity
from kiln.graph.transform.fuse_ops import fuse_ops, is_primitive
from kiln.graph.visitor import post_order
from kiln.runtime import GraphExecutor, load_module


def _sched_injective(attrs, outs):
    s = te.create_schedule([o.op for o in outs])
    for stage in list(s.stages):
        if stage.op not in [o.op for o in outs] and hasattr(stage.op, "axis") \
                and not stage.op.reduce_axis:
            stage.compute_inline()
    return s


def _bcast(fn):
    def compute(attrs, ins, out_type):
        a, b = ins
        shape = out_type.shape

        def idx(t, i):
            off = len(shape) - len(t.shape)
            return tuple(0 if int(t.shape[k]) == 1 else i[k + off] for k in range(len(t.shape)))
        return [te.compute(shape, lambda *i: fn(a[idx(a, i)], b[idx(b, i)]), name="bc", tag="broadcast")]
    return compute


def _dense(attrs, ins, out_type):
    x, w = ins
    k = te.reduce_axis((0, int(x.shape[1])), name="k")
    return [te.compute(out_type.shape, lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), name="dense", tag="dense")]


def _sched_dense(attrs, outs):
    s = _sched_injective(attrs, outs)
    out = outs[0]
    s[out].parallel(s[out].leaf_iter_vars[0])
    return s


def _relu(attrs, ins, out_type):
    x = ins[0]
    return [te.compute(x.shape, lambda *i: te.max(x[i], te.const(0, x.dtype)), name="relu", tag="elemwise")]


if "ctest.add" not in kiln.graph.list_ops():
    register_op("ctest.add", type_rel=broadcast, pattern=OpPattern.BROADCAST, num_inputs=2,
                compute=_bcast(lambda x, y: x + y), schedules={"cpu": _sched_injective})
    register_op("ctest.mul", type_rel=broadcast, pattern=OpPattern.BROADCAST, num_inputs=2,
                compute=_bcast(lambda x, y: x * y), schedules={"cpu": _sched_injective})
    register_op("ctest.relu", type_rel=identity, pattern=OpPattern.ELEMWISE, num_inputs=1,
                compute=_relu, schedules={"cpu": _sched_injective})
    from kiln.graph.ops.nn import _dense_rel
    register_op("ctest.dense", type_rel=_dense_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                num_inputs=2, compute=_dense, schedules={"cpu": _sched_dense})


def mlp():
    x = var("x", (4, 16))
    w1, b1 = var("w1", (32, 16)), var("b1", (32,))
    w2 = var("w2", (8, 32))
    h = call("ctest.relu", call("ctest.add", call("ctest.dense", x, w1), b1))
    y = call("ctest.mul", call("ctest.dense", h, w2), const(np.float32(0.5)))
    mod = IRModule.from_expr(Function([x, w1, b1, w2], y))
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((32, 16)).astype("float32"),
              "b1": rng.standard_normal(32).astype("float32"),
              "w2": rng.standard_normal((8, 32)).astype("float32")}
    return mod, params


def reference(x, p):
    h = np.maximum(x @ p["w1"].T + p["b1"], 0)
    return (h @ p["w2"].T) * 0.5


def test_fusion_groups_dense_with_epilogue():
    mod, _ = mlp()
    fused = fuse_ops(mod)
    prims = [n.op for n in post_order(fused["main"].body) if hasattr(n, "op") and is_primitive(n.op)]
    names = sorted(f.attrs["Name"] for f in prims)
    assert names == ["fused_ctest_dense_ctest_add_ctest_relu", "fused_ctest_dense_ctest_mul"]


def test_compile_and_run_matches_numpy():
    mod, params = mlp()
    lib = kiln.compile(mod, target="llvm", params=params)
    m = GraphExecutor(lib)
    assert m.get_input_names() == ["x"]
    x = np.random.default_rng(1).standard_normal((4, 16)).astype("float32")
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), reference(x, params), rtol=1e-5, atol=1e-5)
    assert len(lib.graph["kernels"]) == 2
    assert m.memory_plan_bytes > 0


def test_wrong_inputs_are_named():
    mod, params = mlp()
    m = GraphExecutor(kiln.compile(mod, params=params))
    with pytest.raises(Exception, match=r"no input named 'y'.*\['x'\]"):
        m.set_input("y", np.zeros((4, 16), "float32"))
    with pytest.raises(Exception, match=r"input 'x': expected shape \(4, 16\), got \(4, 15\)"):
        m.set_input("x", np.zeros((4, 15), "float32"))
    with pytest.raises(Exception, match=r"input 'x': expected dtype float32, got float64"):
        m.run(x=np.zeros((4, 16)))


def test_export_and_load_in_fresh_process(tmp_path):
    mod, params = mlp()
    lib = kiln.compile(mod, params=params)
    path = tmp_path / "mlp.so"
    lib.export_library(str(path))
    x = np.random.default_rng(2).standard_normal((4, 16)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    m = GraphExecutor(lib)
    m.run(x=x)
    expected = m.get_output(0).numpy()
    script = textwrap.dedent(f"""
        import sys, numpy as np
        import kiln.runtime as rt
        lib = rt.load_module({str(path)!r})
        m = rt.GraphExecutor(lib)
        m.run(x=np.load({str(tmp_path / 'x.npy')!r}))
        np.save({str(tmp_path / 'y.npy')!r}, m.get_output(0).numpy())
        compiler = [k for k in sys.modules if k.startswith(("kiln.te", "kiln.tir", "kiln.codegen", "kiln.graph", "llvmlite"))]
        assert not compiler, compiler
    """)
    subprocess.run([sys.executable, "-c", script], check=True, env={**os.environ})
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)


def test_corrupt_library_is_reported(tmp_path):
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"\x7fELF not really")
    with pytest.raises(Exception, match="bad.so: not a shared library"):
        load_module(bad)
    with pytest.raises(FileNotFoundError, match="no model library"):
        load_module(tmp_path / "missing.so")


def test_run_before_inputs_are_set_is_an_error():
    mod, params = mlp()
    m = GraphExecutor(kiln.compile(mod, params=params))
    with pytest.raises(Exception, match=r"input\(s\) \['x'\] were never set"):
        m.run()


def test_unknown_param_name_is_an_error():
    mod, params = mlp()
    with pytest.raises(Exception, match=r"params \['w9'\] are not inputs of main"):
        kiln.compile(mod, params={**params, "w9": np.zeros(3, "float32")})


def test_constant_does_not_change_the_callers_array():
    w = np.ones(4, "float32")
    c = const(w)
    assert w.flags.writeable and not c.data.flags.writeable


def test_a_compiled_model_keeps_its_params_when_the_caller_writes_to_them():
    """kiln.compile binds the params without copying them (most are repacked by the passes);
    what the compiled model keeps of them must still be its own copy."""
    import torch
    mod, params = mlp()
    original = {k: v.copy() for k, v in params.items()}
    given = {"w1": params["w1"], "b1": torch.from_numpy(params["b1"]), "w2": params["w2"]}
    lib = kiln.compile(mod, target="llvm", params=given)
    for v in params.values():           # also the torch tensor's memory
        v[...] = 7.0
    m = GraphExecutor(lib)
    x = np.random.default_rng(1).standard_normal((4, 16)).astype("float32")
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), reference(x, original), rtol=1e-5,
                               atol=1e-5)


def test_a_scalar_param_copied_into_a_kernel_is_the_models_own():
    """Size-1 constants are copied into the fused functions, which a compiled model keeps to
    print its kernels (lowered again): those must not see the caller's later writes."""
    x = var("x", (4, 16))
    s = var("s", (1,))
    mod = IRModule.from_expr(Function([x, s], call("multiply", x, s)))
    scale = np.array([2.0], "float32")
    lib = kiln.compile(mod, target="llvm", params={"s": scale})
    printed = [str(f) for f in lib.prim_funcs]
    scale[0] = 7.0
    assert [str(f) for f in lib.prim_funcs] == printed
    m = GraphExecutor(lib)
    m.run(x=np.ones((4, 16), "float32"))
    np.testing.assert_array_equal(m.get_output(0).numpy(), np.full((4, 16), 2.0, "float32"))


def test_module_at_stage_copies_params_unless_borrowing():
    from kiln.driver.stages import module_at_stage
    from kiln.graph.expr import Constant
    mod, params = mlp()

    def constants(m):
        return [n.data for n in post_order(m["main"].body) if isinstance(n, Constant)]

    copied = constants(module_at_stage(mod, "optimized", params=params))
    borrowed = constants(module_at_stage(mod, "optimized", params=params, borrow_params=True))
    assert not any(np.shares_memory(c, v) for c in copied for v in params.values())
    assert sum(np.shares_memory(c, params["w1"]) for c in borrowed) == 1
    assert not any(c.flags.writeable for c in borrowed)


def test_resnet_export_and_load_in_fresh_process(tmp_path):
    """A real architecture (reduced width) through export → load in a process that imports
    only kiln.runtime → identical outputs."""
    from kiln.frontend import from_pytorch
    from kiln.testing.models import example_input, resnet18
    model = resnet18(width=8)
    (x,) = example_input(model, image_size=32)
    mod, params = from_pytorch(model, (x,))
    lib = kiln.compile(mod, params=params)
    m = GraphExecutor(lib)
    name = m.get_input_names()[0]
    m.run(**{name: x.numpy()})
    expected = m.get_output(0).numpy()
    path = tmp_path / "resnet.so"
    lib.export_library(str(path))
    np.save(tmp_path / "x.npy", x.numpy())
    script = textwrap.dedent(f"""
        import numpy as np, kiln.runtime as rt
        m = rt.GraphExecutor(rt.load_module({str(path)!r}))
        m.run(**{{{name!r}: np.load({str(tmp_path / 'x.npy')!r})}})
        np.save({str(tmp_path / 'y.npy')!r}, m.get_output(0).numpy())
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)


def test_pass_context_controls_compile(capsys):
    from kiln.graph.transform import PassContext, PrintIR
    mod, params = mlp()
    with PassContext(opt_level=0):
        lib0 = kiln.compile(mod, params=params)
    # opt_level 0 fuses nothing: one kernel per operator call.
    assert len(lib0.graph["kernels"]) == 5
    with PassContext(opt_level=3, instruments=[PrintIR(pass_names=["FoldConstant"])]):
        kiln.compile(mod, params=params)
    assert "FoldConstant" in capsys.readouterr().out


def test_graph_format_versions():
    # Version 2 adds entries that view another ("view_of"); a version 1 graph has none and
    # still runs; an unknown version is refused with a clear error.
    import json
    from kiln.driver.compile import GRAPH_FORMAT_VERSION, CompiledModel
    from kiln.runtime.model import ModelError
    mod, params = mlp()
    lib = kiln.compile(mod, params=params)
    assert lib.graph["version"] == GRAPH_FORMAT_VERSION == 2
    x = np.random.default_rng(3).standard_normal((4, 16)).astype("float32")
    for version in (1, 99):
        graph = json.loads(lib.graph_json)
        graph["version"] = version
        if version == 99:
            with pytest.raises(ModelError, match="version 99 is not supported"):
                CompiledModel(json.dumps(graph), lib.module, lib.params, lib.target, lib.prim_funcs)
            continue
        old = CompiledModel(json.dumps(graph), lib.module, lib.params, lib.target, lib.prim_funcs)
        m = GraphExecutor(old)
        m.run(x=x)
        np.testing.assert_allclose(m.get_output(0).numpy(), reference(x, params), rtol=1e-5, atol=1e-5)


def _fused_names(func):
    fused = fuse_ops(IRModule.from_expr(func))
    return sorted(n.op.attrs["Name"] for n in post_order(fused["main"].body)
                  if hasattr(n, "op") and is_primitive(n.op))


def test_gelu_diamond_and_a_rows_reshape_join_the_dense_epilogue():
    """dense (128 x 64 rows) -> reshape (1, 128, 64) -> GELU, whose two branches read one
    value: one kernel, and the same numbers as numpy."""
    x = var("x", (1, 128, 32), "float32")
    w = np.random.default_rng(0).standard_normal((64, 32)).astype("float32")
    y = call("reshape", call("nn.dense", call("reshape", x, newshape=(128, 32)), const(w)),
             newshape=(1, 128, 64))
    gelu = call("multiply", call("multiply", y, const(np.float32(0.5))),
                call("add", const(np.float32(1.0)),
                     call("erf", call("divide", y, const(np.float32(np.sqrt(2.0)))))))
    func = Function([x], gelu)
    names = _fused_names(func)
    assert names == ["fused_nn_dense_reshape_divide_erf_add_multiply_multiply",
                     "fused_reshape"], names     # the input's reshape, then one kernel
    data = np.random.default_rng(1).standard_normal((1, 128, 32)).astype("float32")
    lib = kiln.compile(IRModule.from_expr(func), target="llvm")
    m = GraphExecutor(lib)
    m.run(x=data)
    ref = data.reshape(128, 32) @ w.T
    ref = 0.5 * ref * (1 + np.vectorize(math.erf)(ref / np.sqrt(2.0)))
    np.testing.assert_allclose(m.get_output(0).numpy().reshape(128, 64), ref, rtol=1e-4,
                               atol=1e-4)


def test_a_reshape_of_a_convolution_output_is_not_an_epilogue():
    """(1, C, H, W) -> (C, H, W) keeps the rows but not the 4-d layout conv schedules tile."""
    x = var("x", (1, 8, 6, 6), "float32")
    w = const(np.ones((8, 8, 3, 3), "float32"))
    y = call("reshape", call("nn.conv2d", x, w, padding=(1, 1, 1, 1)), newshape=(8, 6, 6))
    names = _fused_names(Function([x], call("nn.relu", y)))
    assert not any("conv2d_reshape" in n for n in names), names

"""from_onnx(..., fallback="onnxruntime"): ONNX nodes kiln lacks run in ONNX Runtime, as
partitioned regions; the rest is compiled by kiln. Results are compared with ONNX Runtime
running the whole model: float32 within 1e-5 x max|reference|.
"""
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.frontend import FrontendError, UnsupportedOpsError, from_onnx
from kiln.graph.expr import Function
from kiln.runtime import GraphExecutor

ort = pytest.importorskip("onnxruntime")

OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1),
          helper.make_opsetid("ai.onnx.ml", 3)]


def _model(nodes, outputs, initializers):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        initializer=[onnx.numpy_helper.from_array(v, n) for n, v in initializers.items()])
    return helper.make_model(graph, ir_version=8, opset_imports=OPSETS)


def conv_with_foreign_ops():
    """Conv -> Relu -> com.microsoft BiasGelu (with a weight) -> Gelu -> Mul; a second output
    through ai.onnx.ml Binarizer. Neither domain is one kiln imports."""
    rng = np.random.default_rng(0)
    inits = {"W": rng.standard_normal((4, 3, 3, 3)).astype("float32"),
             "B": rng.standard_normal(6).astype("float32"),
             "S": rng.standard_normal((4, 6, 6)).astype("float32")}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("BiasGelu", ["r", "B"], ["bg"], domain="com.microsoft"),
             helper.make_node("Gelu", ["bg"], ["g"], domain="com.microsoft"),
             helper.make_node("Mul", ["g", "S"], ["y"]),
             helper.make_node("Binarizer", ["c"], ["b"], domain="ai.onnx.ml", threshold=0.5),
             helper.make_node("Add", ["b", "r"], ["z"])]
    return _model(nodes, [("y", [1, 4, 6, 6]), ("z", [1, 4, 6, 6])], inits)


def _reference(model, x):
    return ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})


def _run(lib, x):
    m = GraphExecutor(lib)
    m.set_input("x", x)
    m.run()
    return [m.get_output(k).numpy() for k in range(m.get_num_outputs())]


def _close(got, want):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert np.abs(g - w).max() <= 1e-5 * np.abs(w).max()


def test_without_fallback_the_foreign_ops_are_refused():
    with pytest.raises(UnsupportedOpsError, match="com.microsoft.BiasGelu"):
        from_onnx(conv_with_foreign_ops())


def test_foreign_ops_run_in_onnxruntime_and_the_log_names_them(caplog):
    caplog.set_level(logging.WARNING, logger="kiln.frontend.onnx")
    model = conv_with_foreign_ops()
    mod, params = from_onnx(model, fallback="onnxruntime")
    regions = {name: f for name, f in mod.items()
               if isinstance(f, Function) and f.attrs.get("Compiler") == "onnxruntime"}
    # BiasGelu and Gelu are neighbours: one region holds both; Binarizer has its own
    assert len(regions) == 2
    ops = sorted(sorted(n.attrs.op_type for n in kiln.graph.visitor.post_order(f.body)
                        if hasattr(n, "attrs") and "op_type" in n.attrs)
                 for f in regions.values())
    assert ops == [["BiasGelu", "Gelu"], ["Binarizer"]]
    assert "@onnxruntime_main_0" in str(mod)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "3 ONNX node(s) kiln lacks run in onnxruntime" in line
    assert "BiasGelu" in line and "Gelu" in line and "Binarizer" in line
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype("float32")
    lib = kiln.compile(mod, params=params)
    _close(_run(lib, x), _reference(model, x))


def test_a_fallback_library_reloads_in_a_fresh_process(tmp_path):
    model = conv_with_foreign_ops()
    mod, params = from_onnx(model, fallback="onnxruntime")
    lib = kiln.compile(mod, params=params)
    path = tmp_path / "m.so"
    lib.export_library(str(path))
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import sys, numpy as np
        import kiln.runtime as rt
        m = rt.GraphExecutor(rt.load_module({str(path)!r}))
        m.set_input("x", np.load({str(tmp_path / 'x.npy')!r}))
        m.run()
        np.save({str(tmp_path / 'y.npy')!r}, m.get_output(0).numpy())
        np.save({str(tmp_path / 'z.npy')!r}, m.get_output(1).numpy())
        compiler = [k for k in sys.modules if k.startswith(("kiln.te", "kiln.tir", "kiln.graph"))]
        assert not compiler, compiler
    """)
    subprocess.run([sys.executable, "-c", script], check=True, env={**os.environ})
    got = [np.load(tmp_path / "y.npy"), np.load(tmp_path / "z.npy")]
    np.testing.assert_array_equal(got[0], _run(lib, x)[0])
    _close(got, _reference(model, x))


def test_a_fallback_library_without_onnxruntime_fails_to_load_naming_it(tmp_path):
    mod, params = from_onnx(conv_with_foreign_ops(), fallback="onnxruntime")
    path = tmp_path / "m.so"
    kiln.compile(mod, params=params).export_library(str(path))
    script = textwrap.dedent(f"""
        import sys
        sys.modules["onnxruntime"] = None          # as if it were not installed
        import kiln.runtime as rt
        try:
            rt.load_module({str(path)!r})
        except rt.ModelError as err:
            print(err)
        else:
            raise SystemExit("loaded without ONNX Runtime")
    """)
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True, env={**os.environ}).stdout
    assert "needs ONNX Runtime" in out and "pip install onnxruntime" in out


def test_a_region_returning_its_input_and_an_unknown_fallback():
    """An op that returns its input unchanged inside a region still gives a graph output of
    its own (ONNX needs a node to produce each output)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Binarizer", ["r"], ["b"], domain="ai.onnx.ml", threshold=0.0),
             helper.make_node("Add", ["b", "r"], ["y"])]
    model = _model(nodes, [("y", [1, 3, 8, 8])], {})
    mod, params = from_onnx(model, fallback="onnxruntime")
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype("float32")
    _close(_run(kiln.compile(mod, params=params), x), _reference(model, x))
    with pytest.raises(ValueError, match="unknown fallback 'tvm'"):
        from_onnx(model, fallback="tvm")


def test_a_node_with_a_value_dependent_shape_does_not_fall_back():
    """NonZero's output length depends on the values; kiln compiles static shapes, so the
    import fails naming it rather than giving the node the shape of one run."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("NonZero", ["r"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [4, "n"])])
    model = helper.make_model(graph, ir_version=8, opset_imports=OPSETS)
    with pytest.raises((UnsupportedOpsError, FrontendError), match="NonZero"):
        from_onnx(model, fallback="onnxruntime")


def test_cli_compile_with_fallback(tmp_path, capsys):
    from kiln.cli.main import main
    path = tmp_path / "m.onnx"
    onnx.save(conv_with_foreign_ops(), str(path))
    assert main(["compile", str(path), "-o", str(tmp_path / "m.so"),
                 "--fallback", "onnxruntime"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert main(["compile", str(path), "-o", str(tmp_path / "m2.so")]) != 0

"""kiln.compile_timings / `kiln compile --timings` (issue 33, item 1): where a compile's time
goes, by phase and by kernel. Time is exclusive, so the phases add up to the time measured."""
import subprocess
import sys
import time

import numpy as np
import pytest

import kiln
from kiln.graph import Function, IRModule, call, var
from kiln.timings import CompileTimings, kernel, phase


def _model():
    x, w = var("x", (8, 32)), var("w", (16, 32))
    body = call("nn.relu", call("nn.dense", x, w))
    return IRModule.from_expr(Function([x, w], body)), {"w": np.ones((16, 32), "float32")}


def test_a_compile_reports_every_stage_and_its_kernels():
    mod, params = _model()
    with kiln.compile_timings() as t:
        lib = kiln.compile(mod, params=params)
    phases = t.phases()
    for expected in ("graph.FuseOps", "schedule", "tir.simplify", "tir.schedule_to_stmt",
                     "codegen.emit_ir", "llvm.optimize", "llvm.machine_code"):
        assert expected in phases, sorted(phases)
    assert set(t.kernels()) == {f.name for f in lib.prim_funcs}
    # exclusive times: the phases and the unclaimed rest add up to the block's time
    assert sum(phases.values()) == pytest.approx(t.total, rel=1e-6, abs=1e-6)
    assert t.groups()["llvm"] > 0 and "llvm.optimize" in t.report()
    assert t.to_json()["total"] == t.total


def test_nested_phases_are_charged_once():
    with CompileTimings() as t:
        with phase("graph.Outer"):
            time.sleep(0.02)
            with kernel("k0"), phase("tir.inner"):
                time.sleep(0.05)
    phases = t.phases()
    assert 0.015 < phases["graph.Outer"] < 0.045        # its own 20 ms, not the inner 50
    assert phases["tir.inner"] >= 0.045
    assert t.kernels() == {"k0": phases["tir.inner"]}


def test_nothing_is_recorded_outside_a_block():
    with phase("graph.Alone"):
        pass
    with CompileTimings() as t:
        pass
    assert "graph.Alone" not in t.phases()


def test_cli_compile_prints_the_report(tmp_path):
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 8))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 8))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(tmp_path / "m.onnx"))
    done = subprocess.run([sys.executable, "-m", "kiln.cli", "compile", "m.onnx", "-o", "m.so",
                           "--timings"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("compile timings: ")
    for part in ("frontend.onnx", "llvm.optimize", "export.link", "slowest kernels to lower"):
        assert part in done.stderr, done.stderr

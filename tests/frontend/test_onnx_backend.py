"""kiln's ONNX backend (kiln.frontend.onnx_backend) and the ONNX backend node test suite.

The suite (onnx.backend.test, 1,884 single-op models with inputs and expected outputs, written by
the ONNX project) runs case by case in isolated workers with a time limit
(kiln.testing.onnx_suite); each case's status must equal the checked-in one
(tests/frontend/onnx_node_status.json), so a regression fails, and so does a case that passes
now but is not recorded as passing (run `python -m kiln.testing.onnx_suite --update`). No claimed
case may give wrong values. Tolerance: the suite's own, per case (rtol 1e-3 / atol 1e-7 for most).
"""
import io
import unittest

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from kiln.frontend import StaticValueError, from_onnx  # noqa: E402
from kiln.frontend import onnx_backend  # noqa: E402
from kiln.testing import onnx_coverage, onnx_suite  # noqa: E402


def _reshape_model():
    """y = Reshape(x, shape) with `shape` a graph input, as the node suite writes it."""
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 4)),
         helper.make_tensor_value_info("shape", TensorProto.INT64, (2,))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_operand_needed_at_compile_time_names_itself():
    with pytest.raises(StaticValueError) as info:
        from_onnx(_reshape_model())
    assert info.value.value == "shape" and info.value.node == "reshape"
    assert "input 1 (shape, value 'shape') must be known" in str(info.value)
    assert "depends on run-time data" in str(info.value)


def test_the_backend_binds_compile_time_inputs_per_value():
    rep = onnx_backend.prepare(_reshape_model())
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for shape in ([6, 4], [4, 6], [6, 4]):
        (y,) = rep.run([x, np.array(shape, np.int64)])
        np.testing.assert_array_equal(y, x.reshape(shape))
    assert rep.specialized == ["shape"]
    assert len(rep._compiled) == 2          # one specialization per distinct shape value


def test_run_node_and_input_errors():
    x = np.array([[-1.0, 2.0]], np.float32)
    (y,) = onnx_backend.run_node(helper.make_node("Relu", ["x"], ["y"]), [x])
    np.testing.assert_array_equal(y, [[0.0, 2.0]])
    rep = onnx_backend.prepare(_reshape_model())
    with pytest.raises(ValueError, match=r"takes 2 inputs \['x', 'shape'\], got 1"):
        rep.run([x])
    assert not onnx_backend.supports_device("CUDA")
    with pytest.raises(ValueError, match="runs on CPU, not 'CUDA'"):
        onnx_backend.prepare(_reshape_model(), device="CUDA")


def test_usable_with_onnx_backend_test():
    """onnx's own BackendTest drives the backend (a few cases; the full suite runs below)."""
    from onnx.backend.test import BackendTest
    backend_test = BackendTest(onnx_backend.KilnBackend, __name__)
    backend_test.include(r"^test_(abs|relu|reshape_reordered_all_dims|add_bcast)_cpu$")
    cases = unittest.defaultTestLoader.loadTestsFromTestCase(backend_test.tests)
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(cases)
    ran = result.testsRun - len(result.skipped)          # the others are skipped, unmatched
    assert ran == 4 and result.wasSuccessful(), result.failures + result.errors


@pytest.fixture(scope="module")
def suite_results():
    return onnx_suite.run_suite(jobs=2)


# Both tests read the one run of the suite (minutes): under pytest-xdist they share a worker.
@pytest.mark.xdist_group("onnx_node_suite")
def test_node_suite_matches_the_status_file(suite_results):
    expected = onnx_suite.load_status()
    assert set(suite_results) == set(expected), "the suite's cases changed: run --update"
    regressions, fixed = onnx_suite.compare(expected, suite_results)
    lines = [f"REGRESSED {n}: was pass, now {s}: {r}" for n, _, s, r in regressions]
    lines += [f"NEWLY PASSING {n} (was {w}): run python -m kiln.testing.onnx_suite --update"
              for n, w, _, _ in fixed]
    assert not lines, "\n".join(lines)


# Cases whose expected data, not kiln, is off, and why. The inverse DFT's imaginary part at
# t = n/2 is exactly 0 (float64 numpy: -7e-16); the suite expects 1.9e-7, the rounding error of
# numpy's float32 FFT, and its atol is 1e-7. kiln computes 0.0: matching would mean copying
# pocketfft's order of operations.
_REFERENCE_OFF = {"test_dft_inverse", "test_dft_inverse_opset19"}


@pytest.mark.xdist_group("onnx_node_suite")
def test_no_claimed_case_gives_wrong_values(suite_results):
    wrong = {n: r["reason"] for n, r in suite_results.items()
             if r["status"] == "wrong" and n not in _REFERENCE_OFF}
    assert not wrong, "\n".join(f"{n}: {r}" for n, r in wrong.items())


def test_the_coverage_doc_is_generated_from_the_status_file():
    import json
    with open(onnx_suite.STATUS_FILE, encoding="utf-8") as f:
        recorded = json.load(f)
    assert recorded["summary"] == onnx_suite.summarize(recorded["cases"])
    text = onnx_coverage.render(recorded["cases"], recorded["onnx_version"])
    assert onnx_suite.COVERAGE_DOC.read_text(encoding="utf-8") == text, \
        "docs/onnx_coverage.md is stale: run python -m kiln.testing.onnx_suite --update"

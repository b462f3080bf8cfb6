"""ONNX Runtime's quantized contrib ops (com.microsoft: QLinearAdd, QLinearMul, the quantized
pools and activations, QLinearConcat, QGemm) against ONNX Runtime itself.

Each kiln result is its op between a dequantize and a quantize, computed in float32 or in
integers; ONNX Runtime computes some through lookup tables or fixed-point code, so a value
within rounding of a quantization tie may land one step apart: the bar is one step, on at most
2% of the elements (exact for the integer sums of QGemm)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend import from_onnx  # noqa: E402
from kiln.frontend.common import UnsupportedOpsError  # noqa: E402

MS = "com.microsoft"


def _q(name, value, dtype):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _model(node, inputs, initializers, out_type=TensorProto.UINT8):
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info("y", out_type, None)], initializer=initializers)
    return helper.make_model(graph, ir_version=9, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _both(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)[0]
    mod, params = from_onnx(model)
    ex = kiln.runtime.GraphExecutor(kiln.compile(mod, params=params))
    ex.run(**feeds)
    return ex.get_output(0).numpy(), expected


def _close(got, expected, exact=False):
    assert got.shape == expected.shape and got.dtype == expected.dtype
    diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
    if exact:
        assert diff.max() == 0
    else:
        assert diff.max() <= 1 and (diff != 0).mean() <= 0.02, (diff.max(), (diff != 0).mean())


RNG = np.random.default_rng(0)
X = RNG.integers(0, 256, (2, 8, 6, 6)).astype("uint8")
XP = [_q("xs", 0.05, "float32"), _q("xz", 120, "uint8"), _q("ys", 0.03, "float32"),
      _q("yz", 10, "uint8")]


@pytest.mark.parametrize("op,attrs", [
    ("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1}),
    ("QLinearGlobalAveragePool", {}),
    ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
])
def test_quantized_unary_ops_match_onnxruntime(op, attrs):
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attrs)
    _close(*_both(_model(node, [("x", TensorProto.UINT8, X.shape)], XP), {"x": X}))


def test_quantized_softmax_matches_onnxruntime():
    rng = np.random.default_rng(102)
    x = rng.integers(0, 256, (4, 10)).astype("uint8")
    params = [_q("xs", 0.1, "float32"), _q("xz", 128, "uint8"), _q("ys", 1 / 256, "float32"),
              _q("yz", 0, "uint8")]
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS,
                            axis=-1, opset=13)
    _close(*_both(_model(node, [("x", TensorProto.UINT8, x.shape)], params), {"x": x}))


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_quantized_binary_ops_match_onnxruntime(op):
    """ONNX Runtime folds the three scales into one multiplier, kiln computes the definition
    (dequantize, op, quantize): they may differ by one step, and only where the exact value
    lies within float rounding of a tie."""
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, X.shape).astype("uint8")
    b = rng.integers(0, 256, (8, 1, 1)).astype("uint8")       # broadcasts
    params = [_q("as", 0.05, "float32"), _q("az", 120, "uint8"), _q("bs", 0.02, "float32"),
              _q("bz", 3, "uint8"), _q("cs", 0.08, "float32"), _q("cz", 100, "uint8")]
    node = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"],
                            domain=MS)
    model = _model(node, [("a", TensorProto.UINT8, a.shape), ("b", TensorProto.UINT8, b.shape)],
                   params)
    got, expected = _both(model, {"a": a, "b": b})
    fa, fb = (a.astype("float64") - 120) * 0.05, (b.astype("float64") - 3) * 0.02
    exact = (fa + fb if op == "QLinearAdd" else fa * fb) / 0.08
    near_tie = np.abs(exact - np.floor(exact) - 0.5) < 1e-4
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1
    assert np.all(near_tie[got != expected])
    # away from ties, both are the definition exactly
    clear = ~near_tie & (exact > -100.5) & (exact < 155.5)
    assert clear.mean() > 0.5
    np.testing.assert_array_equal(got[clear], np.round(exact[clear]) + 100)


def test_quantized_concat_matches_onnxruntime():
    rng = np.random.default_rng(104)
    b = rng.integers(0, 256, (2, 3, 6, 6)).astype("uint8")
    params = [_q("ys", 0.04, "float32"), _q("yz", 128, "uint8"), _q("as", 0.05, "float32"),
              _q("az", 120, "uint8"), _q("bs", 0.02, "float32"), _q("bz", 3, "uint8")]
    node = helper.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz"],
                            ["y"], domain=MS, axis=1)
    model = _model(node, [("a", TensorProto.UINT8, X.shape), ("b", TensorProto.UINT8, b.shape)],
                   params)
    _close(*_both(model, {"a": X, "b": b}))


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("quantized_out", [True, False])
def test_qgemm_matches_onnxruntime(trans_b, quantized_out):
    rng = np.random.default_rng(105)
    a = rng.integers(0, 256, (5, 24)).astype("uint8")
    # 7-bit weights: without VNNI ONNX Runtime sums pairs of products in int16, saturating
    w = rng.integers(-64, 64, (24, 16)).astype("int8")
    bias = rng.integers(-500, 500, (16,)).astype("int32")
    inits = [_q("as", 0.05, "float32"), _q("az", 120, "uint8"),
             numpy_helper.from_array(w.T.copy() if trans_b else w, "b"),
             _q("bs", np.linspace(0.01, 0.02, 16), "float32"), _q("bz", np.zeros(16), "int8"),
             numpy_helper.from_array(bias, "c")]
    names = ["a", "as", "az", "b", "bs", "bz", "c"]
    if quantized_out:
        inits += [_q("ys", 0.5, "float32"), _q("yz", 7, "uint8")]
        names += ["ys", "yz"]
    node = helper.make_node("QGemm", names, ["y"], domain=MS, transB=trans_b, alpha=1.0)
    model = _model(node, [("a", TensorProto.UINT8, a.shape)], inits,
                   TensorProto.UINT8 if quantized_out else TensorProto.FLOAT)
    got, expected = _both(model, {"a": a})
    if quantized_out:
        _close(got, expected, exact=True)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


def test_unsupported_contrib_variant_is_named():
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain=MS, channels_last=1)
    with pytest.raises(UnsupportedOpsError, match="channels_last=1"):
        from_onnx(_model(node, [("x", TensorProto.UINT8, (1, 6, 6, 8))], XP))


def test_an_absent_output_zero_point_keeps_the_inputs_int8_type():
    rng = np.random.default_rng(107)
    a = rng.integers(-128, 128, (2, 8)).astype("int8")
    params = [_q("as", 0.05, "float32"), _q("az", -3, "int8"), _q("bs", 0.02, "float32"),
              _q("bz", 3, "int8"), _q("cs", 0.08, "float32")]
    node = helper.make_node("QLinearAdd", ["a", "as", "az", "a", "bs", "bz", "cs"], ["y"],
                            domain=MS)
    model = _model(node, [("a", TensorProto.INT8, a.shape)], params, TensorProto.INT8)
    _close(*_both(model, {"a": a}))

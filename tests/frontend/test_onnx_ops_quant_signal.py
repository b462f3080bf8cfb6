"""Quantization, signal-processing and Det converters: what the ONNX node suite does not cover
(per-axis, blocked and per-row/per-column layouts, every integer type, rounding ties and
saturation, odd DFT lengths, padding and truncation, complex STFT, singular matrices), and the
error paths. Several nodes share one model where they can, to keep compilations few.

Oracle: onnx.reference.ReferenceEvaluator, or numpy where the ONNX reference departs from the
spec (MatMulInteger's per-row zero point). Tolerances: integer outputs exactly; float32
1e-5 (absolute and relative), 2e-5 for DFT/STFT sums and 1e-4 relative for determinants
(products of n pivots); float64 1e-10.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend import FrontendError, UnsupportedOpsError, from_onnx  # noqa: E402

R = np.random.default_rng(7)


def model(nodes, feeds, inits=None, outputs=("y",), opset=21):
    """A model of `nodes`: graph inputs `feeds` (name -> test value), initializers `inits`."""
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            a.shape) for n, a in feeds.items()]
    outs = [helper.make_value_info(n, onnx.TypeProto()) for n in outputs]
    tensors = [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    graph = helper.make_graph(nodes, "test", inputs, outs, tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=f"{outputs[0]}_node", **attrs)


def check(m, feeds, rtol=1e-5, atol=1e-5, refs=None):
    """Compile and run m with kiln; each output equals the reference in dtype and shape, and
    in value exactly (integers) or within the tolerance (floats)."""
    mod, params = from_onnx(m)
    ex = kiln.runtime.GraphExecutor(kiln.compile(mod, target="llvm", params=params))
    ex.run(**feeds)
    outs = [ex.get_output(k).numpy() for k in range(ex.get_num_outputs())]
    refs = ReferenceEvaluator(m).run(None, feeds) if refs is None else refs
    names = [o.name for o in m.graph.output]
    for name, out, ref in zip(names, outs, refs):
        ref = np.asarray(ref)
        assert (out.dtype, out.shape) == (ref.dtype, ref.shape), name
        if ref.dtype.kind in "biu":
            np.testing.assert_array_equal(out, ref, err_msg=name)
        else:
            tol = 1e-10 if ref.dtype == np.float64 else rtol
            np.testing.assert_allclose(out, ref, rtol=tol, atol=tol if tol < rtol else atol,
                                       err_msg=name)


def import_error(m, kind=FrontendError):
    with pytest.raises(kind) as info:
        from_onnx(m)
    return str(info.value)


# -- QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear ------------------------------

def test_quantize_layouts_types_ties_and_saturation():
    x = (R.standard_normal((3, 4, 7)) * 300).astype("float32")
    # Ties round to even; +-3e4 saturate the 8-bit types and uint16 (scale 0.25), and stay
    # finite divided in float16 (where the ONNX reference casts inf to int32).
    x.flat[:8] = [2.5, 3.5, -2.5, -3.5, 0.5, -0.5, 3e4, -3e4]
    inits = {"s": np.float32(2.0), "z8": np.uint8(128),
             "s4": np.array([0.5, 1.5, 3.0, 7.0], "float32"),
             "zi8": np.array([1, -3, 0, 9], "int8"),
             "s7": np.linspace(0.3, 2.0, 7).astype("float32"),
             "z16": R.integers(-900, 900, 7).astype("int16"),
             "s3": np.array([0.25, 1.0, 9.0], "float32"),
             "zu3": np.array([0, 30000, 65535], "uint16"),
             "sb": R.uniform(0.5, 4.0, (3, 2, 7)).astype("float32"),   # blocks of 3: 4 = 3 + 1
             "zb": R.integers(-20, 20, (3, 2, 7)).astype("int8")}
    nodes = [node("QuantizeLinear", ["x", "s", "z8"], ["per_tensor_uint8"]),
             node("QuantizeLinear", ["x", "s4", "zi8"], ["per_axis_int8"], axis=-2),
             node("QuantizeLinear", ["x", "s7", "z16"], ["last_axis_int16"], axis=2),
             node("QuantizeLinear", ["x", "s3", "zu3"], ["first_axis_uint16"], axis=0),
             node("QuantizeLinear", ["x", "s"], ["no_zero_point"]),
             node("QuantizeLinear", ["x", "s"], ["output_dtype"], output_dtype=TensorProto.INT8),
             node("QuantizeLinear", ["x", "sb", "zb"], ["blocked"], axis=1, block_size=3),
             node("QuantizeLinear", ["x", "s4", "zi8"], ["precision_f16"], axis=1,
                  precision=TensorProto.FLOAT16),
             node("QuantizeLinear", ["xh", "sh", "zh"], ["half_runtime_scale"], axis=0)]
    feeds = {"x": x, "xh": (R.standard_normal((3, 5)) * 40).astype("float16"),
             "sh": np.array([0.3, 0.7, 1.1], "float16"), "zh": np.array([3, -4, 7], "int8")}
    check(model(nodes, feeds, inits, outputs=[n.output[0] for n in nodes], opset=23), feeds)


def test_dequantize_types_and_layouts():
    q8 = R.integers(-128, 128, (2, 3, 4)).astype("int8")
    qu = R.integers(0, 256, (2, 3, 4)).astype("uint8")
    q32 = R.integers(-2 ** 23, 2 ** 23, (2, 3, 4)).astype("int32")     # exact in float32
    q16 = R.integers(0, 65536, (2, 3, 4)).astype("uint16")
    inits = {"s": np.float32(0.05), "z8": np.int8(-7), "s3": np.array([0.5, 2.0, 0.01], "float32"),
             "zu3": np.array([0, 128, 255], "uint8"), "z32": np.array([5, -9, 1 << 20], "int32"),
             "sh": np.array([0.1, 0.2, 0.3, 0.4], "float16"), "zu16": np.uint16(40000),
             "sb": np.array([[[0.5], [2.0]]] * 2, "float32").repeat(4, axis=2),
             "zb": np.array([[[3], [250]]] * 2, "uint8").repeat(4, axis=2)}
    nodes = [node("DequantizeLinear", ["q8", "s", "z8"], ["int8"]),
             node("DequantizeLinear", ["qu", "s3", "zu3"], ["per_axis_uint8"]),
             node("DequantizeLinear", ["q32", "s3", "z32"], ["int32"]),
             node("DequantizeLinear", ["q16", "s", "zu16"], ["uint16"]),
             node("DequantizeLinear", ["qu", "sh"], ["half_scale"], axis=-1),
             node("DequantizeLinear", ["qu", "sb", "zb"], ["blocked"], axis=1, block_size=2)]
    feeds = {"q8": q8, "qu": qu, "q32": q32, "q16": q16}
    check(model(nodes, feeds, inits, outputs=[n.output[0] for n in nodes]), feeds, rtol=1e-6,
          atol=0)


def test_dynamic_quantize_linear_edge_ranges():
    feeds = {"mixed": R.standard_normal((3, 5)).astype("float32"),
             "zeros": np.zeros(4, "float32"),                      # max == min: scale 1/255
             "positive": R.uniform(1.0, 3.0, 6).astype("float32")}   # range widened to 0
    nodes = [node("DynamicQuantizeLinear", [k], [f"{k}_y", f"{k}_s", f"{k}_z"]) for k in feeds]
    names = [o for n in nodes for o in n.output]
    check(model(nodes, feeds, outputs=names, opset=11), feeds)


# -- integer products ------------------------------------------------------------------------

def test_matmul_integer_per_row_and_per_column_zero_points():
    a = R.integers(0, 256, (4, 5)).astype("uint8")
    b = R.integers(-128, 128, (5, 3)).astype("int8")
    az, bz = np.array([3, 7, 250, 0], "uint8"), np.array([1, -2, 5], "int8")
    a3 = R.integers(-128, 128, (2, 4, 5)).astype("int8")
    b3 = R.integers(0, 256, (2, 5, 3)).astype("uint8")
    nodes = [node("MatMulInteger", ["a", "b", "az", "bz"], ["rows_cols"]),
             node("MatMulInteger", ["a3", "b3"], ["batched"])]
    feeds = {"a": a, "a3": a3, "b3": b3}
    m = model(nodes, feeds, {"b": b, "az": az, "bz": bz}, outputs=["rows_cols", "batched"],
              opset=10)
    # The spec: a's zero point is one per row of A (the ONNX reference subtracts it per column).
    rows_cols = (a.astype(np.int32) - az.astype(np.int32)[:, None]) @ (b.astype(np.int32) - bz)
    check(m, feeds, refs=[rows_cols, a3.astype(np.int32) @ b3.astype(np.int32)])


def test_conv_integer_groups_per_channel_zero_point_and_1d():
    x = R.integers(0, 256, (1, 4, 6, 6)).astype("uint8")
    w = R.integers(0, 256, (6, 2, 3, 3)).astype("uint8")
    x1 = R.integers(-128, 128, (2, 3, 9)).astype("int8")
    w1 = R.integers(-128, 128, (4, 3, 3)).astype("int8")
    nodes = [node("ConvInteger", ["x", "w", "xz", "wz"], ["grouped"], group=2,
                  pads=[1, 0, 1, 2], strides=[2, 1]),
             node("ConvInteger", ["x1", "w1"], ["same_1d"], auto_pad="SAME_UPPER")]
    feeds = {"x": x, "x1": x1, "w1": w1}
    inits = {"w": w, "xz": np.uint8(100), "wz": (np.arange(6) * 40).astype("uint8")}
    check(model(nodes, feeds, inits, outputs=["grouped", "same_1d"], opset=10), feeds)


def test_qlinear_conv_and_matmul_per_channel_scales():
    x = R.integers(-128, 128, (1, 3, 5, 5)).astype("int8")
    a = R.integers(0, 256, (4, 6)).astype("uint8")
    inits = {"xs": np.float32(0.02), "xz": np.int8(-3),
             "w": R.integers(-128, 128, (4, 3, 3, 3)).astype("int8"),
             "ws": np.array([0.01, 0.02, 0.005, 0.03], "float32"), "wz": np.int8(0),
             "ys": np.float32(0.5), "yz": np.int8(5),
             "bias": R.integers(-500, 500, 4).astype("int32"),
             "b": R.integers(0, 256, (6, 3)).astype("uint8"), "bs": np.float32(0.05),
             "bz": np.uint8(120), "as": np.float32(0.03), "az": np.uint8(110),
             "ms": np.float32(0.8), "mz": np.uint8(128)}
    nodes = [node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"],
                  ["conv"], pads=[1, 1, 1, 1]),
             node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ms", "mz"], ["matmul"])]
    feeds = {"x": x, "a": a}
    check(model(nodes, feeds, inits, outputs=["conv", "matmul"], opset=10), feeds)


# -- windows, mel filters, DFT, STFT ---------------------------------------------------------

def test_windows_and_mel_weight_matrix():
    nodes, inits = [], {"n": np.array(33, "int64"), "n1": np.array(1, "int64")}
    for op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        for periodic in (0, 1):
            for dtype in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32):
                nodes.append(node(op, ["n"], [f"{op}_{periodic}_{dtype}"], periodic=periodic,
                                  output_datatype=dtype))
    nodes.append(node("HannWindow", ["n1"], ["length_one"]))
    mel = {"bins": np.array(40, "int64"), "length": np.array(512, "int64"),
           "rate": np.array(16000, "int64"), "low": np.float32(20.0),
           "high": np.float32(7600.0)}
    inits.update(mel)
    nodes.append(node("MelWeightMatrix", list(mel), ["mel"],
                      output_datatype=TensorProto.DOUBLE))
    check(model(nodes, {}, inits, outputs=[n.output[0] for n in nodes], opset=17), {},
          rtol=1e-6, atol=1e-6)


DFT_CASES = [  # shape, axis, dft_length, inverse, onesided
    ((2, 12, 1), 1, None, 0, 0), ((2, 12, 1), 1, 16, 0, 1), ((2, 12, 1), -2, 7, 0, 1),
    ((3, 9, 2), 1, None, 1, 0), ((3, 9, 2), 1, 5, 0, 0), ((2, 7, 2), 1, 12, 1, 1),
    ((2, 7, 2), 1, 11, 1, 1), ((2, 5, 6, 2), 0, None, 0, 0), ((2, 5, 6, 2), -3, 4, 1, 0)]


def test_dft_lengths_axes_and_directions():
    nodes, feeds, inits = [], {}, {}
    for k, (shape, axis, length, inverse, onesided) in enumerate(DFT_CASES):
        feeds[f"x{k}"] = R.standard_normal(shape).astype("float32")
        inits[f"axis{k}"] = np.array(axis, "int64")
        if length:
            inits[f"n{k}"] = np.array(length, "int64")
        nodes.append(node("DFT", [f"x{k}", f"n{k}" if length else "", f"axis{k}"], [f"y{k}"],
                          inverse=inverse, onesided=onesided))
    check(model(nodes, feeds, inits, outputs=[f"y{k}" for k in range(len(nodes))], opset=20),
          feeds, rtol=2e-5, atol=2e-5)


def test_dft_dtypes_and_exact_zero_imaginary_parts():
    x64 = R.standard_normal((2, 8, 1))
    x16 = R.standard_normal((2, 8, 2)).astype("float16")
    nodes = [node("DFT", ["x64"], ["double"], axis=1),
             node("DFT", ["x16"], ["half"], axis=1, inverse=1)]
    feeds = {"x64": x64, "x16": x16}
    m = model(nodes, feeds, outputs=["double", "half"], opset=17)
    check(m, feeds, rtol=2e-3, atol=2e-3)
    # A real signal's DC and Nyquist bins have an imaginary part of exactly 0.
    mod, params = from_onnx(model([node("DFT", ["x"], axis=1, onesided=1)],
                                  {"x": x64.astype("float32")}, opset=17))
    ex = kiln.runtime.GraphExecutor(kiln.compile(mod, params=params))
    ex.run(x=x64.astype("float32"))
    y = ex.get_output(0).numpy()
    assert np.all(y[:, [0, 4], 1] == 0.0)


def test_stft_complex_window_and_two_sided():
    x = R.standard_normal((1, 33, 2)).astype("float32")
    xr = R.standard_normal((2, 40, 1)).astype("float32")
    w = R.uniform(0.0, 1.0, 10).astype("float32")
    nodes = [node("STFT", ["x", "step5", "w", "len10"], ["complex"], onesided=0),
             node("STFT", ["xr", "step4", "", "len8"], ["real"])]
    feeds = {"x": x, "xr": xr, "w": w}
    inits = {"step5": np.array(5, "int64"), "step4": np.array(4, "int64"),
             "len10": np.array(10, "int64"), "len8": np.array(8, "int64")}
    check(model(nodes, feeds, inits, outputs=["complex", "real"], opset=17), feeds,
          rtol=2e-5, atol=2e-5)


# -- Det --------------------------------------------------------------------------------------

def test_det_pivoting_singular_and_batches():
    feeds = {"batch": R.standard_normal((2, 3, 4, 4)).astype("float32"),
             "singular": np.array([[1, 2, 3], [2, 4, 6], [0, 1, 1]], "float32"),
             "permutation": np.array([[0, 0, 3], [0, 2, 0], [1, 0, 0]], "float32"),
             "one": np.array([[-2.5]], "float32"),
             "double": R.standard_normal((5, 5))}
    nodes = [node("Det", [k], [f"det_{k}"]) for k in feeds]
    check(model(nodes, feeds, outputs=[n.output[0] for n in nodes], opset=22), feeds,
          rtol=1e-4, atol=1e-6)


# -- errors and unsupported variants ---------------------------------------------------------

def test_quantize_errors_name_the_node_and_the_problem():
    x = np.zeros((2, 3), "float32")
    text = import_error(model([node("QuantizeLinear", ["x", "s"], output_dtype=17)], {"x": x},
                              {"s": np.float32(1.0)}), UnsupportedOpsError)
    assert "QuantizeLinear(output_dtype FLOAT8E4M3FN" in text and "y_node" in text
    text = import_error(model([node("QuantizeLinear", ["x", "s"])], {"x": x},
                              {"s": np.ones(2, "float32")}))
    assert "'y_node' (QuantizeLinear): input 1 ('s') of shape (2,) is neither" in text
    text = import_error(model([node("DequantizeLinear", ["q", "s"], axis=1, block_size=2)],
                              {"q": np.zeros((2, 5), "uint8")}, {"s": np.ones((2, 2), "float32")}))
    assert "has 2 blocks along axis 1" in text and "needs 3" in text
    text = import_error(model([node("MatMulInteger", ["a", "b"])],
                              {"a": x, "b": np.zeros((3, 2), "uint8")}, opset=10))
    assert "A (input 0) must be int8 or uint8, got float32" in text
    text = import_error(model([node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys",
                                                    "yz"])],
                              {"x": np.zeros((1, 2, 4, 4), "uint8")},
                              {"xs": np.float32(1), "xz": np.uint8(0),
                               "w": np.zeros((3, 2, 1, 1), "uint8"),
                               "ws": np.ones(2, "float32"), "wz": np.uint8(0),
                               "ys": np.float32(1), "yz": np.uint8(0)}, opset=10))
    assert "w_scale of shape (2,) is neither a scalar nor one per output channel (3)" in text


def test_signal_errors_name_the_node_and_the_problem():
    x = np.zeros((1, 8, 1), "float32")
    text = import_error(model([node("DFT", ["x"], axis=2)], {"x": x}, opset=17))
    assert "'y_node' (DFT): axis 2 is not a signal axis" in text
    text = import_error(model([node("DFT", ["x"], axis=1)], {"x": np.zeros((1, 8, 3),
                                                                            "float32")}, opset=17))
    assert "must end in 1 (real) or 2 (complex)" in text
    text = import_error(model([node("DFT", ["x"], axis=1)],
                              {"x": np.zeros((1, 4096, 2), "float32")}, opset=17),
                        UnsupportedOpsError)
    assert "DFT(a DFT of length 4096 (kiln multiplies by a 8192x8192 matrix" in text
    text = import_error(model([node("STFT", ["x", "step", "w", "len"])], {"x": x},
                              {"step": np.array(2, "int64"), "w": np.ones(4, "float32"),
                               "len": np.array(5, "int64")}, opset=17))
    assert "window length 4 differs from frame_length 5" in text
    text = import_error(model([node("HannWindow", ["n"])], {}, {"n": np.array(-3, "int64")},
                              opset=17))
    assert "'y_node' (HannWindow): size must not be negative, got -3" in text
    text = import_error(model([node("MelWeightMatrix", ["b", "n", "r", "lo", "hi"])], {},
                              {"b": np.array(8), "n": np.array(16), "r": np.array(8000),
                               "lo": np.float32(500), "hi": np.float32(100)}, opset=17))
    assert "need 0 <= lower_edge_hertz < upper_edge_hertz, got 500.0 and 100.0" in text
    text = import_error(model([node("Det", ["x"])], {"x": np.zeros((2, 3), "float32")},
                              opset=22))
    assert "'y_node' (Det): input shape (2, 3) is not a (batch of) square matrices" in text
    text = import_error(model([node("Det", ["x"])], {"x": np.zeros((65, 65), "float32")},
                              opset=22), UnsupportedOpsError)
    assert "Det(65x65 matrices" in text

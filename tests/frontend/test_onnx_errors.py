"""from_onnx's contract beyond single ops: what becomes an input or a weight, and the errors for
unsupported ops, corrupt files, dynamic shapes and ill-formed graphs."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from kiln.frontend import FrontendError, UnsupportedOpsError, from_onnx  # noqa: E402
from kiln.frontend.onnx import supported_ops  # noqa: E402
from kiln.graph import TensorType  # noqa: E402


def make(nodes, inputs, inits=None, outputs=("y",), opset=17):
    """inputs: name -> (shape, elem type) (shape entries may be dim_param strings)."""
    infos = [helper.make_tensor_value_info(n, t, s) for n, (s, t) in inputs.items()]
    tensors = [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    outs = [helper.make_value_info(n, onnx.TypeProto()) for n in outputs]
    graph = helper.make_graph(nodes, "g", infos, outs, tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


F32 = TensorProto.FLOAT


def test_inputs_weights_and_literals():
    """Graph inputs become main's first parameters in model order; float initializers become
    weights (params); integer and one-element initializers stay literals."""
    w = np.ones((4, 3), "float32")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["h"]),
             helper.make_node("Reshape", ["h", "shape"], ["r"]),
             helper.make_node("Add", ["r", "z"], ["y"])]
    m = make(nodes, {"x": ((2, 4), F32), "z": ((6,), F32)},
             {"w": w, "half": np.array(0.5, "float32"), "shape": np.array([-1], "int64"),
              "unused": np.ones(5, "float32")})
    mod, params = from_onnx(m)
    main = mod["main"]
    assert [p.name_hint for p in main.params] == ["x", "z", "w"]
    assert list(params) == ["w"] and params["w"].shape == (4, 3)
    assert main.ret_type == TensorType((6,), "float32")


def test_model_from_path_and_bytes(tmp_path):
    m = make([helper.make_node("Relu", ["x"], ["y"])], {"x": ((2, 3), F32)})
    path = tmp_path / "relu.onnx"
    onnx.save(m, str(path))
    for source in (str(path), path, m.SerializeToString(), m):
        mod, params = from_onnx(source)
        assert mod["main"].ret_type == TensorType((2, 3), "float32") and params == {}


def test_unsupported_ops_are_reported_together():
    """One error lists every unsupported op type with its nodes, including other domains and
    unsupported variants of known ops (refused by a converter's check before conversion, or by
    the converter itself), and says nothing about the converted nodes after them; a
    converter-less node after them is reported (it cannot be folded on unknown inputs)."""
    nodes = [helper.make_node("GlobalLpPool", ["x4"], ["lp1"], name="lp_a"),
             helper.make_node("MaxRoiPool", ["x4", "rois"], ["mr"], name="roi_pool",
                              pooled_shape=[1, 1]),
             helper.make_node("GlobalLpPool", ["x4"], ["lp2"], name="lp_b"),
             helper.make_node("FusedMatMul", ["x", "x"], ["f"], name="fused",
                              domain="com.microsoft"),
             helper.make_node("LSTM", ["seq", "w_lstm", "r_lstm"], ["h_all"], name="lstm_coupled",
                              hidden_size=2, input_forget=1),
             helper.make_node("Conv", ["x6", "w6"], ["c6"], name="conv4d"),
             helper.make_node("Relu", ["lp1"], ["r"], name="after_unsupported"),
             helper.make_node("BitCast", ["r"], ["bc"], name="bitcast_of_unsupported",
                              to=TensorProto.INT32),
             helper.make_node("Relu", ["x"], ["y"], name="fine")]
    m = make(nodes, {"x": ((2, 3), F32), "x4": ((1, 1, 2, 2), F32), "seq": ((2, 1, 3), F32),
                     "x6": ((1, 1, 3, 3, 3, 3), F32)},
             {"rois": np.array([[0, 0, 0, 1, 1]], "float32"),
              "w_lstm": np.ones((1, 8, 3), "float32"), "r_lstm": np.ones((1, 8, 2), "float32"),
              "w6": np.ones((1, 1, 2, 2, 2, 2), "float32")})
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedOpsError) as info:
        from_onnx(m)
    err = info.value
    assert err.op_types == ["BitCast", "Conv(4-d)", "GlobalLpPool", "LSTM(input_forget=1)",
                            "MaxRoiPool", "com.microsoft.FusedMatMul"]
    assert err.nodes_of("GlobalLpPool") == ["lp_a", "lp_b"]
    assert err.nodes_of("Conv(4-d)") == ["conv4d"]
    assert err.nodes_of("BitCast") == ["bitcast_of_unsupported"]
    text = str(err)
    assert "6 unsupported op types in ONNX model (7 nodes)" in text
    assert "GlobalLpPool: lp_a, lp_b" in text and "after_unsupported" not in text


def test_supported_ops_cover_the_common_models():
    need = {"Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "LayerNormalization",
            "Resize", "Reshape", "Slice", "Gather", "Split", "LSTM", "Einsum", "Gelu", "Pad",
            "ReduceMean", "ArgMax", "Where", "Expand", "Range", "ConstantOfShape"}
    assert need <= set(supported_ops())


@pytest.mark.parametrize("content", [b"\x08\x07\x12\xff\xff\xff\xff\x0fjunk" * 3,
                                     b"", b"hello, I am not a model"])
def test_corrupt_file_names_the_file(tmp_path, content):
    path = tmp_path / "broken.onnx"
    path.write_bytes(content)
    with pytest.raises(FrontendError, match=r"ONNX file '.*broken\.onnx'.*(corrupt|not an ONNX)"):
        from_onnx(str(path))


def test_truncated_file(tmp_path):
    w = np.arange(4000, dtype="float32").reshape(40, 100)
    m = make([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": ((2, 40), F32)}, {"w": w})
    data = m.SerializeToString()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FrontendError, match=r"truncated\.onnx"):
        from_onnx(path)


def test_missing_file_and_wrong_argument(tmp_path):
    with pytest.raises(FrontendError, match=r"ONNX file '.*nowhere\.onnx' does not exist"):
        from_onnx(str(tmp_path / "nowhere.onnx"))
    with pytest.raises(TypeError, match="from_onnx takes an onnx.ModelProto, a path or bytes"):
        from_onnx(42)


def test_dynamic_dimension_needs_shape_dict():
    m = make([helper.make_node("Relu", ["x"], ["y"])], {"x": (("batch", 3), F32)})
    with pytest.raises(FrontendError, match=r"input 'x' has dynamic dimension 0 \('batch'\).*"
                                            r"shape_dict"):
        from_onnx(m)
    mod, _ = from_onnx(m, shape_dict={"x": (5, 3)})
    assert mod["main"].ret_type == TensorType((5, 3), "float32")
    with pytest.raises(FrontendError, match=r"shape_dict names \['y'\].*inputs are \['x'\]"):
        from_onnx(m, shape_dict={"y": (1, 3)})


def test_dtype_override():
    m = make([helper.make_node("Relu", ["x"], ["y"])], {"x": ((2,), F32)})
    mod, _ = from_onnx(m, dtype={"x": "float64"})
    assert mod["main"].ret_type == TensorType((2,), "float64")


def test_unsupported_element_type_names_the_input():
    m = make([helper.make_node("Relu", ["x"], ["y"])], {"x": ((2,), TensorProto.BFLOAT16)})
    with pytest.raises(FrontendError, match=r"input 'x' has element type BFLOAT16"):
        from_onnx(m)


def test_shape_error_names_the_node():
    m = make([helper.make_node("Add", ["a", "b"], ["y"], name="bad_add")],
             {"a": ((2, 3), F32), "b": ((4,), F32)})
    with pytest.raises(FrontendError, match=r"ONNX node 'bad_add' \(Add\).*do not broadcast"):
        from_onnx(m)


def test_runtime_reshape_shape_is_an_error():
    m = make([helper.make_node("Reshape", ["x", "s"], ["y"], name="dyn_reshape")],
             {"x": ((2, 3), F32), "s": ((2,), TensorProto.INT64)})
    with pytest.raises(FrontendError, match=r"'dyn_reshape' \(Reshape\): input 1 \(shape, "
                                            r"value 's'\) must be known when importing"):
        from_onnx(m)


def test_undefined_value_and_cycle():
    m = make([helper.make_node("Relu", ["ghost"], ["y"], name="reader")], {"x": ((2,), F32)})
    with pytest.raises(FrontendError, match=r"node 'reader' \(Relu\) reads 'ghost', which no "
                                            r"node, input or initializer provides"):
        from_onnx(m)
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
             helper.make_node("Relu", ["a"], ["b"], name="n2"),
             helper.make_node("Relu", ["a"], ["y"], name="n3")]
    with pytest.raises(FrontendError, match=r"cycle through nodes \['n1', 'n2', 'n3'\]"):
        from_onnx(make(nodes, {"x": ((2,), F32)}))


def test_converterless_ops_on_constants_fold():
    """Ops without a converter evaluate at import when their inputs are all known (term counts
    from TfIdfVectorizer on int64 token ids, a float table from BitCast of int32 bit patterns);
    the graph keeps only what depends on inputs. BitCast is an opset-26 op, hence the opset."""
    from onnx.reference import ReferenceEvaluator

    from kiln.graph import Call, post_order
    import kiln
    nodes = [helper.make_node("TfIdfVectorizer", ["tokens"], ["counts"], mode="TF",
                              min_gram_length=1, max_gram_length=1, max_skip_count=0,
                              ngram_counts=[0], ngram_indexes=[0, 1, 2, 3],
                              pool_int64s=[1, 2, 3, 4]),
             helper.make_node("BitCast", ["bits"], ["table"], to=F32),
             helper.make_node("Mul", ["x", "counts"], ["m"]),
             helper.make_node("Add", ["m", "table"], ["y"])]
    tokens = np.array([[1, 1, 2, 5], [3, 3, 3, 4], [4, 2, 4, 1], [0, 0, 0, 0]], "int64")
    bits = np.array([0x3F800000, 0x40000000, 0x3F000000, 0], "int32")    # 1.0, 2.0, 0.5, 0.0
    m = make(nodes, {"x": ((4, 4), F32)}, {"tokens": tokens, "bits": bits}, opset=26)
    mod, params = from_onnx(m)
    assert [n.op.name for n in post_order(mod["main"]) if isinstance(n, Call)] == \
        ["multiply", "add"]
    x = np.arange(16, dtype="float32").reshape(4, 4)
    ex = kiln.runtime.GraphExecutor(kiln.compile(mod, target="llvm", params=params))
    ex.run(x=x)
    # Row r counts the tokens 1..4 of tokens[r] (5 and 0 are not in the pool).
    counts = np.array([[2, 1, 0, 0], [0, 0, 3, 1], [1, 1, 0, 2], [0, 0, 0, 0]], "float32")
    table = np.array([1.0, 2.0, 0.5, 0.0], "float32")
    np.testing.assert_array_equal(ex.get_output(0).numpy(), x * counts + table)
    ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(ex.get_output(0).numpy(), ref, rtol=1e-6)

"""ONNX op converters, one small model per case, compiled with kiln and compared with
onnx.reference.ReferenceEvaluator (the ONNX reference interpreter) as the oracle.

Tolerance: float32 outputs agree to rtol 1e-5 / atol 1e-5 (1e-4 for products over long sums
and transcendental chains, stated per case); integer and boolean outputs exactly; float64 to
rtol 1e-12.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend import from_onnx  # noqa: E402
from kiln.graph import post_order  # noqa: E402

R = np.random.default_rng(42)


def rand(*shape, dtype="float32", lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, size=shape).astype(dtype)


def model(nodes, feeds, inits=None, outputs=("y",), opset=17):
    """An ONNX model of `nodes` with graph inputs `feeds` (name -> array, their values are the
    test inputs) and initializers `inits` (name -> array)."""
    inits = inits or {}
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            a.shape) for n, a in feeds.items()]
    outs = [helper.make_value_info(n, onnx.TypeProto()) for n in outputs]
    tensors = [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()]
    graph = helper.make_graph(nodes, "test", inputs, outs, tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=f"{op.lower()}_node", **attrs)


def run_kiln(m, feeds, **kw):
    mod, params = from_onnx(m, **kw)
    lib = kiln.compile(mod, target="llvm", params=params)
    ex = kiln.runtime.GraphExecutor(lib)
    ex.run(**feeds)
    return mod, [ex.get_output(k).numpy() for k in range(ex.get_num_outputs())]


def check(m, feeds, rtol=1e-5, atol=1e-5, refs=None):
    """Import, compile and run m; every output matches the reference (ReferenceEvaluator unless
    `refs` are given) in dtype, shape and value."""
    mod, outs = run_kiln(m, feeds)
    if refs is None:
        refs = ReferenceEvaluator(m).run(None, feeds)
    assert len(outs) == len(refs)
    for k, (out, ref) in enumerate(zip(outs, refs)):
        ref = np.asarray(ref)
        assert out.dtype == ref.dtype, f"output {k}: dtype {out.dtype} vs {ref.dtype}"
        assert out.shape == ref.shape, f"output {k}: shape {out.shape} vs {ref.shape}"
        if ref.dtype.kind in "biu":
            np.testing.assert_array_equal(out, ref, err_msg=f"output {k}")
        else:
            tol = (1e-12, 1e-12) if ref.dtype == np.float64 else (rtol, atol)
            np.testing.assert_allclose(out, ref, rtol=tol[0], atol=tol[1],
                                       err_msg=f"output {k}")
    return mod


def op_names(mod):
    return [n.op.name for n in post_order(mod["main"]) if hasattr(n, "op")
            and hasattr(n.op, "name")]


# -- elementwise -----------------------------------------------------------------------------

UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Floor", "Ceil", "Erf", "HardSwish",
         "Reciprocal", "Sign", "Softplus", "Softsign", "Mish", "Elu", "Selu", "Celu",
         "ThresholdedRelu", "LeakyRelu", "HardSigmoid"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    x = rand(2, 3, 5)
    check(model([node(op, ["x"])], {"x": x}, opset=18), {"x": x})


@pytest.mark.parametrize("op", ["Log", "Sqrt"])
def test_unary_positive(op):
    x = rand(3, 4, lo=0.1, hi=4.0)
    check(model([node(op, ["x"])], {"x": x}), {"x": x})


def test_round_half_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, 1.6], "float32")
    check(model([node("Round", ["x"])], {"x": x}), {"x": x})


@pytest.mark.parametrize("attrs", [{"alpha": 0.3}, {"alpha": 0.5, "beta": 0.2},
                                   {"alpha": 1.0 / 6, "beta": 0.5}])
def test_activation_attributes(attrs):
    x = rand(4, 6, lo=-6, hi=6)
    op = "LeakyRelu" if "beta" not in attrs else "HardSigmoid"
    attrs = {"alpha": attrs["alpha"]} if op == "LeakyRelu" else attrs
    check(model([node(op, ["x"], **attrs)], {"x": x}), {"x": x})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset20(approximate):
    x = rand(2, 8, lo=-4, hi=4)
    mod = check(model([node("Gelu", ["x"], approximate=approximate)], {"x": x}, opset=20),
                {"x": x})
    assert op_names(mod) == ["nn.gelu"]


def test_isnan():
    x = np.array([1.0, np.nan, -np.inf, 0.0], "float32")
    check(model([node("IsNaN", ["x"])], {"x": x}), {"x": x})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less",
                                "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_binary_broadcast(op):
    a, b = rand(2, 1, 4), rand(3, 1)
    b[0, 0] = a[0, 0, 0]          # so Equal has a True somewhere
    check(model([node(op, ["a", "b"])], {"a": a, "b": b}), {"a": a, "b": b})


def test_integer_division_truncates():
    a = np.array([7, -7, 7, -7, 0], "int64")
    b = np.array([2, 2, -2, -2, 3], "int64")
    check(model([node("Div", ["a", "b"])], {"a": a, "b": b}), {"a": a, "b": b})


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic(op):
    a, b, c = rand(3, 4), rand(4), rand(1, 4)
    feeds = {"a": a, "b": b, "c": c}
    check(model([node(op, ["a", "b", "c"])], feeds), feeds)


@pytest.mark.parametrize("exponent", [2.0, 0.5, 3.0, 1.0])
def test_pow_constant_exponent(exponent):
    x = rand(3, 5, lo=0.1, hi=3.0)
    m = model([node("Pow", ["x", "e"])], {"x": x}, {"e": np.array(exponent, "float32")})
    mod = check(m, {"x": x})
    if exponent == 2.0:
        assert "power" not in op_names(mod)


def test_pow_tensor_exponent():
    x, e = rand(3, 5, lo=0.5, hi=2.0), rand(5, lo=-2, hi=2)
    check(model([node("Pow", ["x", "e"])], {"x": x, "e": e}), {"x": x, "e": e})


def test_mod():
    a = np.array([5, -5, 5, -5, 7], "int32")
    b = np.array([3, 3, -3, -3, 7], "int32")
    check(model([node("Mod", ["a", "b"])], {"a": a, "b": b}), {"a": a, "b": b})
    fa, fb = rand(6, lo=-5, hi=5), np.array([1.5, -2.0, 2.5, 3.0, -1.0, 0.7], "float32")
    check(model([node("Mod", ["a", "b"], fmod=1)], {"a": fa, "b": fb}), {"a": fa, "b": fb})


def test_logic():
    a = R.integers(0, 2, (3, 4)).astype(bool)
    b = R.integers(0, 2, (4,)).astype(bool)
    feeds = {"a": a, "b": b}
    nodes = [node("And", ["a", "b"], ["y1"]), node("Or", ["a", "b"], ["y2"]),
             node("Xor", ["a", "b"], ["y3"]), node("Not", ["a"], ["y4"])]
    check(model(nodes, feeds, outputs=["y1", "y2", "y3", "y4"]), feeds)


def test_where_and_cast():
    c = R.integers(0, 2, (3, 1)).astype(bool)
    x, y = rand(3, 4), rand(4)
    nodes = [node("Where", ["c", "x", "yy"], ["w"]),
             node("Cast", ["w"], ["y"], to=TensorProto.INT32),
             node("Cast", ["y"], ["z"], to=TensorProto.DOUBLE),
             node("CastLike", ["z", "x"], ["v"])]
    feeds = {"c": c, "x": x, "yy": y}
    check(model(nodes, feeds, outputs=["w", "y", "z", "v"]), feeds)


def test_clip_forms():
    x = rand(4, 5, lo=-3, hi=3)
    feeds = {"x": x}
    check(model([node("Clip", ["x", "lo", "hi"])], feeds,
                {"lo": np.array(-1.0, "float32"), "hi": np.array(0.5, "float32")}), feeds)
    check(model([node("Clip", ["x", "", "hi"])], feeds, {"hi": np.array(0.5, "float32")}),
          feeds)
    check(model([node("Clip", ["x"], min=-0.5, max=2.0)], feeds, opset=6), feeds)
    lo = rand(5, lo=-1, hi=0)
    check(model([node("Clip", ["x", "lo"])], {"x": x, "lo": lo}), {"x": x, "lo": lo})


@pytest.mark.parametrize("slope_shape", [(3, 1, 1), (1,), (1, 3, 1, 1), (4,)])
def test_prelu(slope_shape):
    x = rand(2, 3, 4, 4)
    m = model([node("PRelu", ["x", "s"])], {"x": x}, {"s": rand(*slope_shape, lo=0, hi=1)})
    mod = check(m, {"x": x})
    assert ("nn.prelu" in op_names(mod)) == (slope_shape in ((3, 1, 1), (1, 3, 1, 1)))


def test_float64_stays_float64():
    x = rand(2, 3, 6, 6, dtype="float64")
    w = rand(4, 3, 3, 3, dtype="float64")
    nodes = [node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), node("Sigmoid", ["c"], ["s"]),
             node("Mul", ["s", "k"], ["y"])]
    m = model(nodes, {"x": x}, {"w": w, "k": np.array(0.5)})
    mod, params = from_onnx(m)
    assert mod["main"].ret_type.dtype == "float64" and params["w"].dtype == np.float64
    check(m, {"x": x})


# -- convolution and pooling -----------------------------------------------------------------

CONV_CASES = [
    dict(x=(1, 3, 9, 9), w=(4, 3, 3, 3), attrs=dict(pads=[1, 1, 1, 1])),
    dict(x=(2, 4, 10, 8), w=(6, 2, 3, 2), attrs=dict(strides=[2, 1], pads=[1, 0, 2, 1], group=2)),
    dict(x=(1, 4, 9, 9), w=(4, 1, 3, 3), attrs=dict(group=4, dilations=[2, 2], pads=[2, 2, 2, 2])),
    dict(x=(1, 3, 7, 8), w=(5, 3, 3, 3), attrs=dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    dict(x=(1, 3, 7, 8), w=(5, 3, 2, 2), attrs=dict(auto_pad="SAME_LOWER")),
    dict(x=(1, 3, 7, 8), w=(5, 3, 3, 3), attrs=dict(auto_pad="VALID")),
    dict(x=(2, 3, 12), w=(4, 3, 3), attrs=dict(pads=[1, 2], strides=[2])),
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv(case):
    c = CONV_CASES[case]
    x = rand(*c["x"])
    inits = {"w": rand(*c["w"]), "b": rand(c["w"][0])}
    check(model([node("Conv", ["x", "w", "b"], **c["attrs"])], {"x": x}, inits), {"x": x},
          rtol=1e-4, atol=1e-4)


CONV_T_CASES = [
    dict(x=(1, 4, 5, 5), w=(4, 3, 3, 3), attrs=dict(strides=[2, 2], pads=[1, 1, 1, 1],
                                                    output_padding=[1, 1])),
    dict(x=(1, 4, 4, 6), w=(4, 2, 2, 3), attrs=dict(strides=[2, 1], group=2)),
    dict(x=(1, 2, 4, 4), w=(2, 3, 3, 3), attrs=dict(strides=[2, 2], output_shape=[9, 9])),
    dict(x=(1, 2, 4, 4), w=(2, 3, 3, 3), attrs=dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    dict(x=(1, 2, 4, 4), w=(2, 3, 3, 3), attrs=dict(dilations=[2, 2], pads=[1, 0, 1, 2])),
]


@pytest.mark.parametrize("case", range(len(CONV_T_CASES)))
def test_conv_transpose(case):
    c = CONV_T_CASES[case]
    x = rand(*c["x"])
    group = c["attrs"].get("group", 1)
    inits = {"w": rand(*c["w"]), "b": rand(c["w"][1] * group)}
    refs = None
    if group > 1:
        # onnx 1.23's reference ConvTranspose mis-assembles groups of several channels: use
        # PyTorch (same definition) as the oracle there.
        torch = pytest.importorskip("torch")
        a = c["attrs"]
        refs = [torch.nn.functional.conv_transpose2d(
            torch.from_numpy(x), torch.from_numpy(inits["w"]), torch.from_numpy(inits["b"]),
            stride=a.get("strides", 1), groups=group).numpy()]
    check(model([node("ConvTranspose", ["x", "w", "b"], **c["attrs"])], {"x": x}, inits),
          {"x": x}, rtol=1e-4, atol=1e-4, refs=refs)


POOL_CASES = [
    ("MaxPool", (1, 2, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", (1, 2, 8, 8), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", (1, 2, 8, 8), dict(kernel_shape=[2, 2], dilations=[2, 2])),
    ("MaxPool", (1, 2, 7, 7), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2])),
    ("AveragePool", (1, 2, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", (1, 2, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                       count_include_pad=1)),
    ("AveragePool", (2, 3, 10), dict(kernel_shape=[4], strides=[2], pads=[1, 1])),
]


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_pool(case):
    op, shape, attrs = POOL_CASES[case]
    x = rand(*shape)
    check(model([node(op, ["x"], **attrs)], {"x": x}), {"x": x})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (2, 3, 7)])
def test_global_pool(op, shape):
    x = rand(*shape)
    # (onnx 1.23's reference GlobalMaxPool drops the channel axis of 3-d inputs: numpy here.)
    fn = np.mean if op == "GlobalAveragePool" else np.max
    ref = fn(x, axis=tuple(range(2, x.ndim)), keepdims=True)
    check(model([node(op, ["x"])], {"x": x}), {"x": x}, refs=[ref])


# -- normalization, softmax ------------------------------------------------------------------

def test_batch_norm():
    x = rand(2, 3, 4, 4)
    inits = {"g": rand(3), "b": rand(3), "m": rand(3), "v": rand(3, lo=0.5, hi=2)}
    mod = check(model([node("BatchNormalization", ["x", "g", "b", "m", "v"], epsilon=1e-3)],
                      {"x": x}, inits), {"x": x})
    assert op_names(mod) == ["nn.batch_norm"]


@pytest.mark.parametrize("axis,bias", [(-1, True), (-2, True), (-1, False)])
def test_layer_norm(axis, bias):
    x = rand(2, 5, 6)
    norm = x.shape[axis:]
    inits = {"g": rand(*norm)}
    names = ["x", "g"]
    if bias:
        inits["b"] = rand(*norm)
        names.append("b")
    check(model([node("LayerNormalization", names, axis=axis, epsilon=1e-5)], {"x": x}, inits),
          {"x": x}, rtol=1e-4, atol=1e-5)


def test_instance_and_lp_norm():
    x = rand(2, 3, 4, 5)
    check(model([node("InstanceNormalization", ["x", "g", "b"], epsilon=1e-4)], {"x": x},
                {"g": rand(3), "b": rand(3)}), {"x": x}, rtol=1e-4, atol=1e-4)
    check(model([node("LpNormalization", ["x"], axis=1, p=2)], {"x": x}), {"x": x})
    # The L1 norm sums |x| (onnx 1.23's reference sums x itself): numpy here.
    ref = x / np.abs(x).sum(axis=-1, keepdims=True)
    check(model([node("LpNormalization", ["x"], axis=-1, p=1)], {"x": x}), {"x": x},
          refs=[ref])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(13, 1), (13, -1), (11, 1), (11, 2)])
def test_softmax(op, opset, axis):
    x = rand(2, 3, 4, lo=-4, hi=4)
    refs = None
    if opset < 13:
        # Before opset 13 the input is flattened to 2-d at `axis` (the reference evaluator
        # applies the opset-13 meaning to every version): numpy here.
        flat = x.reshape(int(np.prod(x.shape[:axis])), -1).astype("float64")
        e = np.exp(flat - flat.max(axis=1, keepdims=True))
        sm = e / e.sum(axis=1, keepdims=True)
        refs = [(sm if op == "Softmax" else np.log(sm)).reshape(x.shape).astype("float32")]
    check(model([node(op, ["x"], axis=axis)], {"x": x}, opset=opset), {"x": x}, refs=refs)


# -- resize ----------------------------------------------------------------------------------

RESIZE_CASES = [
    dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    dict(mode="nearest"),
    dict(mode="nearest", coordinate_transformation_mode="half_pixel",
         nearest_mode="round_prefer_ceil"),
    dict(mode="linear"),
    dict(mode="linear", coordinate_transformation_mode="align_corners"),
    dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    dict(mode="linear", coordinate_transformation_mode="asymmetric"),
]


@pytest.mark.parametrize("case", range(len(RESIZE_CASES)))
@pytest.mark.parametrize("by", ["scales", "sizes"])
def test_resize(case, by):
    x = rand(1, 2, 4, 5)
    if by == "scales":
        inits = {"scales": np.array([1, 1, 2, 3], "float32")}
        names = ["x", "", "scales"]
    else:
        # 4 -> 8 and 5 -> 3 meet no rounding ties (x.5 source coordinates).
        inits = {"sizes": np.array([1, 2, 8, 3], "int64")}
        names = ["x", "", "", "sizes"]
    mod = check(model([node("Resize", names, **RESIZE_CASES[case])], {"x": x}, inits),
                {"x": x})
    assert op_names(mod) == ["image.resize2d"]


def test_upsample_opset9():
    x = rand(1, 2, 3, 4)
    check(model([node("Upsample", ["x", "s"], mode="nearest")], {"x": x},
                {"s": np.array([1, 1, 2, 2], "float32")}, opset=9), {"x": x})


# -- shape ops -------------------------------------------------------------------------------

def test_reshape_zero_and_minus_one():
    x = rand(2, 3, 4)
    mod = check(model([node("Reshape", ["x", "s"])], {"x": x},
                      {"s": np.array([0, -1, 2], "int64")}), {"x": x})
    assert mod["main"].ret_type.shape == (2, 6, 2)


def test_shape_subgraph_folds_to_static_reshape():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape (what exporters emit for flatten):
    the shape arithmetic folds while importing, leaving one reshape with a static shape."""
    x = rand(2, 3, 4, 5)
    nodes = [node("Shape", ["x"], ["s"]),
             node("Gather", ["s", "zero"], ["n"], axis=0),
             node("Unsqueeze", ["n", "axes"], ["n1"]),
             node("Shape", ["x"], ["s2"], start=2),
             node("ReduceProd", ["s2"], ["hw"], keepdims=1),
             node("Mul", ["hw", "three"], ["chw"]),
             node("Concat", ["n1", "chw"], ["shape"], axis=0),
             node("Reshape", ["x", "shape"], ["y"])]
    inits = {"zero": np.array(0, "int64"), "axes": np.array([0], "int64"),
             "three": np.array([3], "int64")}
    mod = check(model(nodes, {"x": x}, inits, opset=17), {"x": x})
    assert op_names(mod) == ["reshape"]
    assert mod["main"].ret_type.shape == (2, 60)


def test_shape_sources_fold():
    x = rand(3, 4)
    nodes = [node("Shape", ["x"], ["s"]),
             node("ConstantOfShape", ["s"], ["ones"],
                  value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5])),
             node("Size", ["x"], ["n"]),
             node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             node("Range", ["start", "limit", "delta"], ["r"]),
             node("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0, 4.0]),
             node("Add", ["ones", "r"], ["t"]),
             node("Mul", ["t", "c"], ["u"]),
             node("Add", ["u", "nf"], ["v"]),
             node("Add", ["x", "v"], ["y"])]
    inits = {"start": np.array(0.0, "float32"), "limit": np.array(2.0, "float32"),
             "delta": np.array(0.5, "float32")}
    mod = check(model(nodes, {"x": x}, inits), {"x": x})
    assert op_names(mod) == ["add"]


def test_flatten_transpose_concat():
    x, z = rand(2, 3, 4), rand(2, 3, 2)
    nodes = [node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
             node("Transpose", ["z"], ["z2"], perm=[0, 2, 1]),
             node("Concat", ["t", "z2"], ["c"], axis=1),
             node("Flatten", ["c"], ["f"], axis=-1),
             node("Flatten", ["x"], ["y"], axis=0)]
    feeds = {"x": x, "z": z}
    check(model(nodes, feeds, outputs=["f", "y"]), feeds)
    # Nodes out of topological order import the same (some exporters write them so).
    mod, outs = run_kiln(model(nodes[::-1], feeds, outputs=["f", "y"]), feeds)
    refs = ReferenceEvaluator(model(nodes, feeds, outputs=["f", "y"])).run(None, feeds)
    for out, ref in zip(outs, refs):
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("opset,form", [(11, "attr"), (13, "input"), (13, "equal"),
                                        (18, "num_outputs")])
def test_split(opset, form):
    x = rand(3, 7)
    inits, attrs, names, outs = {}, {"axis": 1}, ["x"], ["y1", "y2", "y3"]
    if form == "attr":
        attrs["split"] = [2, 4, 1]
    elif form == "input":
        inits["sp"] = np.array([3, 0, 4], "int64")
        names.append("sp")
    elif form == "equal":
        x = rand(3, 9)
    else:
        attrs["num_outputs"] = 3       # 7 = 3 + 3 + 1
    check(model([node("Split", names, outs, **attrs)], {"x": x}, inits, outputs=outs,
                opset=opset), {"x": x})


SLICE_CASES = [
    ([1, 0], [3, 100], None, None),
    ([-3], [-1], [1], None),
    ([5, 8], [0, -100], [0, 1], [-2, -3]),
    ([0], [10], [-1], [3]),
    ([-1, 1], [-100, 5], [0, 2], [-1, 2]),
]


@pytest.mark.parametrize("case", range(len(SLICE_CASES)))
def test_slice(case):
    starts, ends, axes, steps = SLICE_CASES[case]
    x = rand(6, 7, 8)
    inits = {"s": np.array(starts, "int64"), "e": np.array(ends, "int64")}
    names = ["x", "s", "e"]
    if axes is not None:
        inits["a"] = np.array(axes, "int64")
        names.append("a")
    if steps is not None:
        if axes is None:
            names.append("")
        inits["st"] = np.array(steps, "int64")
        names.append("st")
    check(model([node("Slice", names)], {"x": x}, inits), {"x": x})


def test_slice_opset9_attributes():
    x = rand(4, 5)
    check(model([node("Slice", ["x"], starts=[1, -4], ends=[3, 1000], axes=[0, 1])], {"x": x},
                opset=9), {"x": x})


def test_gather_forms():
    x = rand(5, 6)
    feeds = {"x": x}
    check(model([node("Gather", ["x", "i"], axis=1)], feeds,
                {"i": np.array([[0, -1], [3, 2]], "int64")}), feeds)
    check(model([node("Gather", ["x", "i"], axis=0)], feeds, {"i": np.array(-2, "int64")}),
          feeds)
    ids = np.array([[4, 0, 2], [1, 1, 3]], "int64")
    check(model([node("Gather", ["x", "ids"])], {"x": x, "ids": ids}), {"x": x, "ids": ids})
    # An embedding lookup: the table is a weight, the ids an input (negative ids count back).
    ids = np.array([[4, -1, 2]], "int64")
    check(model([node("Gather", ["w", "ids"])], {"ids": ids}, {"w": rand(5, 6)}), {"ids": ids})


def test_gather_elements():
    x = rand(3, 4)
    idx = np.array([[0, 1, -1, 2], [2, 2, 0, 0]], "int64")
    check(model([node("GatherElements", ["x", "i"], axis=0)], {"x": x}, {"i": idx}), {"x": x})
    feeds = {"x": x, "i": np.array([[3, -4], [1, 0], [-1, 2]], "int64")}
    check(model([node("GatherElements", ["x", "i"], axis=1)], feeds), feeds)


@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze_squeeze(opset):
    x = rand(3, 4)
    if opset >= 13:
        nodes = [node("Unsqueeze", ["x", "ua"], ["u"]), node("Squeeze", ["u", "sa"], ["y"]),
                 node("Squeeze", ["u"], ["z"])]
        inits = {"ua": np.array([0, 3, -1], "int64"), "sa": np.array([0, 3], "int64")}
    else:
        nodes = [node("Unsqueeze", ["x"], ["u"], axes=[0, 3, -1]),
                 node("Squeeze", ["u"], ["y"], axes=[0, 3]), node("Squeeze", ["u"], ["z"])]
        inits = {}
    check(model(nodes, {"x": x}, inits, outputs=["u", "y", "z"], opset=opset), {"x": x})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode):
    x = rand(2, 3, 5, 6)
    inits = {"p": np.array([0, 0, 1, 2, 0, 1, 2, 1], "int64")}
    names = ["x", "p"]
    if mode == "constant":
        inits["v"] = np.array(1.5, "float32")
        names.append("v")
    check(model([node("Pad", names, mode=mode)], {"x": x}, inits), {"x": x})


def test_pad_negative_and_axes():
    x = rand(4, 6)
    # Negative pads crop (the reference evaluator rejects them): numpy here.
    ref = np.pad(x, ((1, 0), (0, 3)))[:-1, 2:]
    check(model([node("Pad", ["x", "p"])], {"x": x}, {"p": np.array([1, -2, -1, 3], "int64")}),
          {"x": x}, refs=[ref])
    check(model([node("Pad", ["x", "p", "", "a"])], {"x": x},
                {"p": np.array([2, 1], "int64"), "a": np.array([-1], "int64")}, opset=18),
          {"x": x})


def test_expand_tile():
    x = rand(3, 1)
    nodes = [node("Expand", ["x", "s"], ["e"]), node("Tile", ["x", "r"], ["t"])]
    inits = {"s": np.array([2, 1, 4], "int64"), "r": np.array([2, 3], "int64")}
    check(model(nodes, {"x": x}, inits, outputs=["e", "t"]), {"x": x})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space(mode):
    x = rand(1, 8, 2, 3)
    nodes = [node("DepthToSpace", ["x"], ["d"], blocksize=2, mode=mode),
             node("SpaceToDepth", ["d"], ["s"], blocksize=2)]
    check(model(nodes, {"x": x}, outputs=["d", "s"]), {"x": x})


def test_identity_dropout():
    x = rand(3, 4)
    nodes = [node("Identity", ["x"], ["i"]), node("Dropout", ["i"], ["y", "mask"])]
    check(model(nodes, {"x": x}, outputs=["y", "mask"], opset=13), {"x": x})


# -- reductions ------------------------------------------------------------------------------

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("opset", [13, 18])
def test_reduce(op, opset):
    x = rand(3, 4, 5, lo=0.5, hi=1.5)
    axes_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
    if axes_input:
        m = model([node(op, ["x", "a"], keepdims=0)], {"x": x},
                  {"a": np.array([0, -1], "int64")}, opset=opset)
    else:
        m = model([node(op, ["x"], axes=[0, -1], keepdims=0)], {"x": x}, opset=opset)
    check(m, {"x": x})
    check(model([node(op, ["x"])], {"x": x}, opset=opset), {"x": x})   # all axes, keepdims


def test_reduce_log_sum_and_noop():
    x = rand(3, 4, lo=0.5, hi=2)
    check(model([node("ReduceLogSum", ["x"], axes=[1])], {"x": x}, opset=13), {"x": x})
    check(model([node("ReduceSum", ["x"], noop_with_empty_axes=1)], {"x": x}, opset=13),
          {"x": x})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reduce(op, last):
    x = np.round(rand(3, 6), 0)        # ties, so select_last_index matters
    check(model([node(op, ["x"], axis=1, keepdims=1, select_last_index=last)], {"x": x}),
          {"x": x})
    check(model([node(op, ["x"], axis=0, keepdims=0)], {"x": x}), {"x": x})


# -- matrix products -------------------------------------------------------------------------

GEMM_CASES = [
    dict(a=(4, 5), b=(6, 5), c=(6,), attrs=dict(transB=1)),
    dict(a=(4, 5), b=(5, 6), c=(1, 6), attrs=dict(alpha=0.5, beta=2.0)),
    dict(a=(5, 4), b=(5, 6), c=(4, 6), attrs=dict(transA=1)),
    dict(a=(4, 5), b=(6, 5), c=None, attrs=dict(transB=1, alpha=3.0)),
    dict(a=(4, 5), b=(5, 6), c=(4, 1), attrs=dict()),
]


@pytest.mark.parametrize("case", range(len(GEMM_CASES)))
def test_gemm(case):
    c = GEMM_CASES[case]
    a = rand(*c["a"])
    inits = {"b": rand(*c["b"])}
    names = ["a", "b"]
    if c["c"]:
        inits["c"] = rand(*c["c"])
        names.append("c")
    mod = check(model([node("Gemm", names, **c["attrs"])], {"a": a}, inits), {"a": a})
    if case == 0:
        assert op_names(mod) == ["nn.dense", "nn.bias_add"]


MATMUL_CASES = [
    ((4, 5), (5, 3), True),
    ((2, 4, 5), (5, 3), True),
    ((2, 4, 5), (5, 3), False),
    ((2, 3, 4, 5), (2, 3, 5, 6), False),
    ((2, 1, 4, 5), (3, 5, 6), False),
    ((4, 5), (2, 5, 6), False),
    ((5,), (2, 5, 6), False),
    ((3, 4, 5), (5,), False),
    ((5,), (5,), False),
]


@pytest.mark.parametrize("case", range(len(MATMUL_CASES)))
def test_matmul(case):
    sa, sb, b_weight = MATMUL_CASES[case]
    a, b = rand(*sa), rand(*sb)
    if b_weight:
        mod = check(model([node("MatMul", ["a", "b"])], {"a": a}, {"b": b}), {"a": a})
        assert "nn.dense" in op_names(mod)
    else:
        check(model([node("MatMul", ["a", "b"])], {"a": a, "b": b}), {"a": a, "b": b})


def test_matmul_with_transposed_key_uses_transpose_b():
    """scores = Q @ K^T as exported from attention: the transpose folds into batch_matmul."""
    q, k = rand(1, 2, 6, 4), rand(1, 2, 6, 4)
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"])]
    mod = check(model(nodes, {"q": q, "k": k}), {"q": q, "k": k})
    names = op_names(mod)
    assert "transpose" not in names and "nn.batch_matmul" in names


EINSUM_CASES = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i->", [(6,), (6,)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ijk->j", [(2, 3, 4)]),
    ("ab,cb", [(2, 3), (4, 3)]),
]


@pytest.mark.parametrize("case", range(len(EINSUM_CASES)))
def test_einsum(case):
    eq, shapes = EINSUM_CASES[case]
    feeds = {f"x{k}": rand(*s) for k, s in enumerate(shapes)}
    check(model([node("Einsum", list(feeds), equation=eq)], feeds, opset=12), feeds)


# -- recurrent -------------------------------------------------------------------------------

RNN_CASES = [
    ("LSTM", dict(direction="forward"), False),
    ("LSTM", dict(direction="bidirectional"), True),
    ("LSTM", dict(direction="reverse"), True),
    ("GRU", dict(direction="forward"), True),
    ("GRU", dict(direction="bidirectional", linear_before_reset=1), True),
    ("RNN", dict(direction="forward"), True),
]


@pytest.mark.parametrize("case", range(len(RNN_CASES)))
def test_recurrent(case):
    op, attrs, full = RNN_CASES[case]
    seq, batch, inp, hid = 4, 2, 3, 5
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    x = rand(seq, batch, inp, lo=-1, hi=1)
    inits = {"W": rand(dirs, gates * hid, inp, lo=-0.5, hi=0.5),
             "R": rand(dirs, gates * hid, hid, lo=-0.5, hi=0.5)}
    names = ["x", "W", "R"]
    if full:
        inits.update(B=rand(dirs, 2 * gates * hid, lo=-0.5, hi=0.5),
                     h0=rand(dirs, batch, hid, lo=-0.5, hi=0.5))
        names += ["B", "", "h0"]
        if op == "LSTM":
            inits.update(c0=rand(dirs, batch, hid, lo=-0.5, hi=0.5),
                         P=rand(dirs, 3 * hid, lo=-0.5, hi=0.5))
            names += ["c0", "P"]
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    m = model([node(op, names, outs, hidden_size=hid, **attrs)], {"x": x}, inits,
              outputs=outs, opset=14)
    check(m, {"x": x}, rtol=1e-4, atol=1e-5)


def test_lstm_clip():
    """clip bounds every gate pre-activation (onnx 1.23's reference ignores clip: numpy)."""
    seq, batch, inp, hid, clip = 3, 2, 3, 4, 0.3
    x = rand(seq, batch, inp, lo=-1, hi=1)
    w, r = rand(1, 4 * hid, inp), rand(1, 4 * hid, hid)
    m = model([node("LSTM", ["x", "W", "R"], ["y"], hidden_size=hid, clip=clip)], {"x": x},
              {"W": w, "R": r}, opset=14)
    sig = lambda v: 1 / (1 + np.exp(-v))   # noqa: E731
    h = c = np.zeros((batch, hid))
    ys = []
    for t in range(seq):
        g = np.clip(x[t] @ w[0].T + h @ r[0].T, -clip, clip)
        i, o, f, cc = np.split(g, 4, axis=1)
        c = sig(f) * c + sig(i) * np.tanh(cc)
        h = sig(o) * np.tanh(np.clip(c, -clip, clip))
        ys.append(h)
    ref = np.stack(ys)[:, None].astype("float32")
    check(m, {"x": x}, rtol=1e-4, atol=1e-5, refs=[ref])

"""ONNX converters of TopK, OneHot, Compress, GatherND, the scatters, ReverseSequence, NonZero,
Unique, MaxUnpool, CenterCropPad and Resize, for what the ONNX node suite does not cover:
other dtypes and attribute combinations, the path through FoldConstant, Resize modes on larger
images, and the error messages (they name the node and what is wrong).

Oracle: onnx.reference.ReferenceEvaluator. Tolerance: integer, boolean and index outputs
exactly; float32 rtol 1e-5 / atol 1e-6, except Resize with cubic or antialiased taps, rtol
1e-4 / atol 1e-5 (kiln sums up to 8 x 8 float32 products in another order than the
reference's float64 passes).
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend import (FrontendError, StaticValueError, UnsupportedOpsError,  # noqa: E402
                           from_onnx)

R = np.random.default_rng(3)


def model(nodes, feeds, inits=None, outputs=("y",), opset=19):
    inits = inits or {}
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            a.shape) for n, a in feeds.items()]
    outs = [helper.make_value_info(n, onnx.TypeProto()) for n in outputs]
    tensors = [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()]
    graph = helper.make_graph(nodes, "test", inputs, outs, tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=f"my_{op.lower()}", **attrs)


def check(m, feeds, rtol=1e-5, atol=1e-6):
    """Import, compile and run m; each output equals the reference's in dtype and shape and
    matches in value."""
    mod, params = from_onnx(m)
    ex = kiln.runtime.GraphExecutor(kiln.compile(mod, target="llvm", params=params))
    ex.run(**feeds)
    refs = ReferenceEvaluator(m).run(None, feeds)
    for k, ref in enumerate(refs):
        out, ref = ex.get_output(k).numpy(), np.asarray(ref)
        assert (out.dtype, out.shape) == (ref.dtype, ref.shape), f"output {k}"
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, err_msg=f"output {k}")


# -- data-dependent indexing -----------------------------------------------------------------

def test_topk_int32_smallest_on_axis_0():
    x = R.integers(0, 3, (6, 4)).astype("int32")
    check(model([node("TopK", ["x", "k"], ["v", "i"], axis=0, largest=0)], {"x": x},
                {"k": np.array([4], "int64")}, outputs=("v", "i")), {"x": x})


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_one_hot_values_stay_run_time_data(dtype):
    """Indices of another dtype (a float index that is not whole matches nothing), axis 0,
    and values as a graph input: only depth is needed when compiling."""
    idx = np.array([[0, -1, 3], [7, 2, -8]], dtype)
    if dtype == "float32":
        idx[0, 0] = 2.5
    values = np.array([-1.0, 4.0], "float32")
    check(model([node("OneHot", ["idx", "depth", "values"], axis=0)],
                {"idx": idx, "values": values}, {"depth": np.array(5, "int64")}),
          {"idx": idx, "values": values})


def test_gather_nd_two_batch_dims_negative_indices():
    data = R.integers(-9, 9, (2, 3, 4, 2)).astype("int64")
    idx = R.integers(-4, 4, (2, 3, 5, 1)).astype("int64")
    check(model([node("GatherND", ["data", "idx"], batch_dims=2)], {"data": data, "idx": idx}),
          {"data": data, "idx": idx})


def test_scatter_elements_narrow_updates_and_scatter_nd_elements():
    data = R.standard_normal((4, 5)).astype("float32")
    idx = np.array([[4, -1, 0], [2, 2, 1]], "int64")       # updates cover 2 of 4 rows
    upd = R.standard_normal((2, 3)).astype("float32")
    nd_idx = np.array([[0, 1], [3, -1], [0, 1]], "int64")
    nd_upd = R.standard_normal(3).astype("float32")
    nodes = [node("ScatterElements", ["data", "idx", "upd"], ["a"], axis=-1, reduction="max"),
             node("ScatterND", ["a", "nd_idx", "nd_upd"], ["y"], reduction="add")]
    feeds = {"data": data, "idx": idx, "upd": upd, "nd_idx": nd_idx, "nd_upd": nd_upd}
    check(model(nodes, feeds), feeds)


def test_reverse_sequence_3d():
    x = R.standard_normal((3, 4, 2)).astype("float32")
    lens = np.array([4, 1, 3], "int64")
    check(model([node("ReverseSequence", ["x", "lens"], batch_axis=0, time_axis=1)],
                {"x": x, "lens": lens}), {"x": x, "lens": lens})


def test_value_shaped_ops_on_initializers_fold():
    """NonZero, Unique and Compress on initializers: their shapes come from the values, kiln
    computes them (folded into constants when compiling)."""
    # three distinct rows (row 3 repeats row 1), as the Add with Compress's three rows needs:
    # spelled out, since R's draws depend on which tests ran before in this process
    table = np.float32([[0, 1, 2], [2, 0, 1], [1, 1, 0], [2, 0, 1]])
    x = R.standard_normal((4, 3)).astype("float32")
    nodes = [node("NonZero", ["table"], ["nz"]),
             node("Unique", ["table"], ["u", "first", "inverse", "counts"], axis=0, sorted=0),
             node("Compress", ["x", "keep"], ["c"], axis=0),
             node("Add", ["c", "u"], ["y"])]
    inits = {"table": table, "keep": np.array([1, 0, 1, 1], bool)}
    check(model(nodes, {"x": x}, inits, outputs=("y", "nz", "first", "inverse", "counts")),
          {"x": x})


def test_max_unpool_inverts_max_pool_with_pads():
    pool = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = R.standard_normal((1, 2, 7, 7)).astype("float32")
    pooled, idx = ReferenceEvaluator(model([node("MaxPool", ["x"], ["p", "i"], **pool)],
                                           {"x": x}, outputs=("p", "i"))).run(None, {"x": x})
    feeds = {"p": pooled, "i": idx}
    check(model([node("MaxUnpool", ["p", "i", "shape"], **pool)], feeds,
                {"shape": np.array([1, 2, 8, 7], "int64")}), feeds)


def test_center_crop_pad_mixed_axes():
    x = R.standard_normal((2, 7, 4, 5)).astype("float32")
    check(model([node("CenterCropPad", ["x", "shape"], axes=[-3, 2, 3])], {"x": x},
                {"shape": np.array([9, 3, 2], "int64")}, opset=18), {"x": x})


# -- resize ----------------------------------------------------------------------------------

def resize_model(x, **attrs):
    roi = attrs.pop("roi", None)
    sizes, scales = attrs.pop("sizes", None), attrs.pop("scales", None)
    inits = {"roi": np.array(roi or [], "float32")}
    names = ["x", "roi"]
    if scales is not None:
        inits["scales"] = np.array(scales, "float32")
        names.append("scales")
    else:
        inits["sizes"] = np.array(sizes, "int64")
        names += ["", "sizes"]
    return model([node("Resize", names, **attrs)], {"x": x}, inits)


@pytest.mark.parametrize("attrs", [
    # two taps per output element in each axis ... antialiased 8 x 6: two one-axis passes
    dict(mode="cubic", antialias=1, sizes=[1, 2, 5, 4]),
    dict(mode="linear", antialias=1, scales=[1, 1, 0.4, 0.7],
         coordinate_transformation_mode="half_pixel_symmetric"),
    dict(mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5, scales=[1, 1, 1.7, 0.9],
         coordinate_transformation_mode="pytorch_half_pixel"),
    # start 0.1 * 10 is 1.0 in float32 (the roi's type), 1.0000000149 in float64: ceil differs
    dict(mode="nearest", roi=[0, 0, 0.2, 0.1, 1, 1, 1.3, 0.8], sizes=[1, 2, 9, 4],
         nearest_mode="ceil", coordinate_transformation_mode="tf_crop_and_resize",
         extrapolation_value=-3.0),
    # one kept ratio (3 / 13) for both axes, not the per-axis size ratios
    dict(mode="linear", axes=[2, 3], sizes=[3, 5], keep_aspect_ratio_policy="not_larger"),
])
def test_resize_modes(attrs):
    x = R.standard_normal((1, 2, 13, 11)).astype("float32")
    check(resize_model(x, **attrs), {"x": x}, rtol=1e-4, atol=1e-5)


def test_resize_nearest_ties_and_float64():
    """2 -> 7 with half_pixel puts output 3 at input coordinate 0.5 exactly: the tie rounds
    down (round_prefer_floor) only when the coordinate is divided by 3.5, not multiplied by
    its float32 reciprocal."""
    x = R.standard_normal((1, 1, 2, 2)).astype("float64")
    check(resize_model(x, mode="nearest", sizes=[1, 1, 7, 8]), {"x": x})


# -- errors ----------------------------------------------------------------------------------

def test_value_shaped_inputs_must_be_known():
    x = np.ones((2, 3), "float32")
    with pytest.raises(StaticValueError, match=r"'my_nonzero' \(NonZero\): input 0 \(the "
                                               r"tensor whose nonzero count"):
        from_onnx(model([node("NonZero", ["x"])], {"x": x}))
    cond = np.ones(2, bool)
    with pytest.raises(StaticValueError, match=r"'my_compress' \(Compress\): input 1 "
                                               r"\(condition, which sets the output's shape"):
        from_onnx(model([node("Compress", ["x", "c"], axis=0)], {"x": x, "c": cond}))


@pytest.mark.parametrize("nodes,inits,message", [
    ([node("TopK", ["x", "k"], ["v", "i"], axis=1)], {"k": np.array([4], "int64")},
     r"'my_topk' \(TopK\): k = 4 is out of range \[0, 3\] for axis 1"),
    ([node("Compress", ["x", "c"], axis=1)], {"c": np.array([0, 1, 0, 1], bool)},
     r"'my_compress' \(Compress\): condition selects index 3, beyond the 3 entries"),
    ([node("OneHot", ["x", "d", "v"])], {"d": np.array(2.5, "float32"),
                                         "v": np.array([0, 1], "float32")},
     r"'my_onehot' \(OneHot\): input 1 \(depth\) must be one positive integer"),
    ([node("ScatterND", ["x", "i", "x"], reduction="sum")], {"i": np.zeros((2, 1), "int64")},
     r"'my_scatternd' \(ScatterND\): reduction 'sum' is not one of"),
    ([node("MaxUnpool", ["x4", "i4", "s"], kernel_shape=[2, 2], strides=[2, 2])],
     {"i4": np.zeros((1, 1, 2, 2), "int64"), "s": np.array([1, 1, 3, 3], "int64")},
     r"'my_maxunpool' \(MaxUnpool\): output_shape \[1, 1, 3, 3\] must keep N, C"),
    ([node("CenterCropPad", ["x", "s"], axes=[0, 1])], {"s": np.array([2], "int64")},
     r"'my_centercroppad' \(CenterCropPad\): shape \[2\] needs one size per axis"),
])
def test_errors_name_the_node(nodes, inits, message):
    feeds = {"x": np.ones((2, 3), "float32"), "x4": np.ones((1, 1, 2, 2), "float32")}
    with pytest.raises(FrontendError, match=message):
        from_onnx(model(nodes, feeds, inits))


def test_unsupported_resize_variants():
    x = np.ones((1, 2, 4, 4), "float32")
    crop_channels = resize_model(x, mode="linear", roi=[0, 0.5, 0, 0, 1, 1, 1, 1],
                                 sizes=[1, 2, 3, 3],
                                 coordinate_transformation_mode="tf_crop_and_resize")
    with pytest.raises(UnsupportedOpsError, match=r"Resize\(cropping the batch or channel"):
        from_onnx(crop_channels)
    volume = np.ones((1, 1, 2, 2, 2), "float32")
    with pytest.raises(UnsupportedOpsError, match=r"Resize\(3-d\)"):
        from_onnx(resize_model(volume, mode="nearest", scales=[1, 1, 2, 2, 2]))

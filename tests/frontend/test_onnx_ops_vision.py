"""The vision ONNX converters (GridSample, AffineGrid, RoiAlign, Col2Im, DeformConv,
NonMaxSuppression) beyond the ONNX node suite: float64 variants, mode combinations the suite
does not make (cubic with border and reflection padding, positions far outside the image),
adaptive RoiAlign sampling, grouped and strided deformable convolution, and the errors.

Oracle: onnx.reference.ReferenceEvaluator. Tolerance: float32 rtol 1e-5 / atol 1e-5; float64
rtol 1e-12 where the reference computes in float64 (Col2Im), else that of the float32 steps it
takes (GridSample rounds its sampling positions to float32: 1e-5; AffineGrid returns float32:
1e-6); integer outputs exactly.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend import FrontendError, UnsupportedOpsError, from_onnx  # noqa: E402

R = np.random.default_rng(11)


def model(op, feeds, inits=None, opset=22, **attrs):
    """A one-node model of `op` on graph inputs `feeds` and initializers `inits` (name ->
    array, in the op's input order: feeds first)."""
    inits = inits or {}
    node = helper.make_node(op, list(feeds) + list(inits), ["y"], name=f"{op.lower()}_node",
                            **attrs)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            a.shape) for n, a in feeds.items()]
    tensors = [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()]
    graph = helper.make_graph([node], "test", inputs,
                              [helper.make_value_info("y", onnx.TypeProto())], tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(m, feeds, rtol=1e-5, atol=1e-5, ref_model=None):
    """kiln's output of m against the reference's (of `ref_model` when the reference does not
    take m itself); dtypes must agree unless the reference's is known to differ."""
    mod, params = from_onnx(m)
    ex = kiln.runtime.GraphExecutor(kiln.compile(mod, target="llvm", params=params))
    ex.run(**feeds)
    out = ex.get_output(0).numpy()
    ref = np.asarray(ReferenceEvaluator(ref_model or m).run(None, feeds)[0])
    assert out.shape == ref.shape
    assert out.dtype == ref.dtype or m.graph.node[0].op_type == "AffineGrid"
    if ref.dtype.kind in "iu":
        np.testing.assert_array_equal(out, ref)
    else:
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)
    return out


# -- GridSample, AffineGrid ------------------------------------------------------------------

@pytest.mark.parametrize("mode,padding", [("cubic", "border"), ("cubic", "reflection"),
                                          ("nearest", "reflection"), ("linear", "zeros")])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_float64_far_outside_the_image(mode, padding, align):
    # Positions up to 3x the image's extent reflect several times or clamp; grid values are
    # float32-representable so that the reference's float32 coordinates are exact.
    x = R.standard_normal((2, 3, 5, 4))
    grid = R.uniform(-3, 3, size=(2, 6, 7, 2)).astype("float32").astype("float64")
    m = model("GridSample", {"x": x, "grid": grid}, mode=mode, padding_mode=padding,
              align_corners=align)
    check(m, {"x": x, "grid": grid}, rtol=1e-5, atol=1e-5)


def test_grid_sample_opset16_mode_names_and_a_float64_grid_for_float32_data():
    x = R.standard_normal((1, 2, 4, 4)).astype("float32")
    grid = R.uniform(-1.2, 1.2, size=(1, 3, 3, 2)).astype("float32").astype("float64")
    m = model("GridSample", {"x": x, "grid": grid}, opset=16, mode="bicubic")
    # The reference knows the opset 20 names only.
    check(m, {"x": x, "grid": grid},
          ref_model=model("GridSample", {"x": x, "grid": grid}, opset=20, mode="cubic"))


def test_grid_sample_unknown_mode_is_reported_unsupported():
    x, grid = np.zeros((1, 1, 2, 2), "float32"), np.zeros((1, 2, 2, 2), "float32")
    with pytest.raises(UnsupportedOpsError) as err:
        from_onnx(model("GridSample", {"x": x, "grid": grid}, mode="lanczos"))
    assert err.value.op_types == ["GridSample(mode=lanczos)"]


@pytest.mark.parametrize("size", [(2, 1, 3, 5), (2, 1, 2, 3, 4)])
def test_affine_grid_float64(size):
    rank = len(size) - 2
    theta = R.standard_normal((2, rank, rank + 1))
    m = model("AffineGrid", {"theta": theta}, {"size": np.array(size, "int64")},
              align_corners=1)
    out = check(m, {"theta": theta}, rtol=1e-6, atol=1e-6)
    assert out.dtype == np.float64          # ONNX's T1; the reference returns float32


# -- RoiAlign --------------------------------------------------------------------------------

def _rois():
    return np.array([[0.5, 1.0, 6.3, 7.2], [2.0, 0.0, 3.0, 9.5], [-2.0, -1.0, 12.0, 11.0]],
                    "float32")


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_adaptive_sampling_with_known_rois(mode):
    # sampling_ratio 0: each roi samples ceil(size / bins) points per bin and axis.
    x = R.standard_normal((2, 3, 10, 10)).astype("float32")
    m = model("RoiAlign", {"x": x}, {"rois": _rois(), "idx": np.array([1, 0, 1], "int64")},
              output_height=3, output_width=2, spatial_scale=0.8, mode=mode,
              coordinate_transformation_mode="half_pixel")
    check(m, {"x": x})


def test_roi_align_adaptive_sampling_needs_known_rois():
    x = np.zeros((1, 1, 8, 8), "float32")
    m = model("RoiAlign", {"x": x, "rois": _rois()}, {"idx": np.zeros(3, "int64")})
    with pytest.raises(UnsupportedOpsError, match=r"sampling_ratio=0 with rois known only at "
                                                  r"run time"):
        from_onnx(m)


# -- Col2Im, DeformConv ----------------------------------------------------------------------

def test_col2im_float64_strides_dilations_pads_batch():
    # image 7 x 8, block 2 x 3, strides (2, 1), dilations (2, 2), pads (1, 0, 2, 1):
    # 4 x 5 block positions.
    x = R.standard_normal((2, 3 * 6, 20))
    m = model("Col2Im", {"x": x}, {"image": np.array([7, 8], "int64"),
                                   "block": np.array([2, 3], "int64")},
              strides=[2, 1], dilations=[2, 2], pads=[1, 0, 2, 1])
    check(m, {"x": x}, rtol=1e-12, atol=1e-12)


def test_col2im_wrong_number_of_blocks_names_the_node():
    x = np.zeros((1, 4, 7), "float32")
    m = model("Col2Im", {"x": x}, {"image": np.array([3, 3], "int64"),
                                   "block": np.array([2, 2], "int64")})
    with pytest.raises(FrontendError, match=r"'col2im_node' \(Col2Im\).*input axis 2 \(7\) "
                                            r"must be the number of block positions 2 x 2"):
        from_onnx(m)


def test_deform_conv_groups_strides_dilations_bias_mask():
    # groups 2, offset_group 2, stride 2, dilation 2, asymmetric pads; offsets of up to 3
    # pixels push samples outside the image (zeros).
    x = R.standard_normal((2, 4, 9, 8)).astype("float32")
    w = R.standard_normal((6, 2, 3, 2)).astype("float32")
    oh, ow = (9 + 1 + 2 - 5) // 2 + 1, (8 + 0 + 1 - 3) // 2 + 1
    offset = R.uniform(-3, 3, size=(2, 2 * 2 * 6, oh, ow)).astype("float32")
    bias = R.standard_normal(6).astype("float32")
    mask = R.uniform(0, 1, size=(2, 2 * 6, oh, ow)).astype("float32")
    feeds = {"x": x, "w": w, "offset": offset, "b": bias, "mask": mask}
    m = model("DeformConv", feeds, group=2, offset_group=2, strides=[2, 2],
              dilations=[2, 2], pads=[1, 0, 2, 1])
    check(m, feeds, rtol=1e-4, atol=1e-4)      # sums of 12 bilinear samples


# -- NonMaxSuppression -----------------------------------------------------------------------

def _nms_inputs(batches, classes, n):
    corner = R.uniform(0, 10, size=(batches, n, 2)).astype("float32")
    size = R.uniform(1, 4, size=(batches, n, 2)).astype("float32")
    boxes = np.concatenate([corner, corner + size], axis=2)
    scores = R.uniform(0, 1, size=(batches, classes, n)).astype("float32")
    return boxes, scores


def test_nms_with_known_boxes_two_batches_three_classes_and_a_score_threshold():
    boxes, scores = _nms_inputs(2, 3, 12)
    m = model("NonMaxSuppression", {}, {"boxes": boxes, "scores": scores,
                                        "limit": np.array([4], "int64"),
                                        "iou": np.array([0.2], "float32"),
                                        "score": np.array([0.3], "float32")})
    out = check(m, {})
    assert out.shape[0] > 0


def test_nms_with_run_time_boxes_is_an_error_naming_them():
    boxes, scores = _nms_inputs(1, 1, 5)
    m = model("NonMaxSuppression", {"boxes": boxes, "scores": scores},
              {"limit": np.array([2], "int64")})
    with pytest.raises(FrontendError, match=r"'nonmaxsuppression_node' \(NonMaxSuppression\): "
                                            r"input 0 \(boxes: the number of selected boxes"):
        from_onnx(m)


def test_nms_with_too_many_boxes_is_unsupported():
    boxes, scores = _nms_inputs(1, 1, 65)
    m = model("NonMaxSuppression", {}, {"boxes": boxes, "scores": scores,
                                        "limit": np.array([2], "int64")})
    with pytest.raises(UnsupportedOpsError) as err:
        from_onnx(m)
    assert err.value.op_types == ["NonMaxSuppression(65 boxes per class (at most 64))"]


# -- 3-d pooling and transposed convolution (composed of 2-d ones in ops/nn.py) --------------

@pytest.mark.parametrize("op,attrs", [
    ("AveragePool", dict(kernel_shape=[3, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 1, 1, 0],
                         ceil_mode=1, count_include_pad=0)),
    ("AveragePool", dict(kernel_shape=[2, 3, 2], auto_pad="SAME_UPPER", strides=[2, 2, 1],
                         count_include_pad=1)),
    ("MaxPool", dict(kernel_shape=[2, 2, 3], strides=[1, 2, 2], dilations=[2, 1, 2],
                     pads=[1, 1, 0, 0, 1, 2], ceil_mode=1))])
def test_pool_3d_float64(op, attrs):
    x = R.standard_normal((2, 3, 6, 5, 7))
    check(model(op, {"x": x}, **attrs), {"x": x}, rtol=1e-12, atol=1e-12)


def test_conv_transpose_3d_strides_dilations_pads_output_padding_groups():
    x = R.standard_normal((1, 4, 3, 4, 3)).astype("float32")
    w = R.standard_normal((4, 3, 2, 3, 2)).astype("float32")
    b = R.standard_normal(6).astype("float32")
    m = model("ConvTranspose", {"x": x}, {"w": w, "b": b}, group=2, strides=[2, 1, 2],
              dilations=[2, 1, 1], pads=[1, 0, 1, 0, 1, 0], output_padding=[1, 0, 1])
    # The reference lacks groups: PyTorch without padding, then ONNX's (begin, end) crop.
    torch = pytest.importorskip("torch")
    full = torch.nn.functional.conv_transpose3d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=(2, 1, 2),
        output_padding=(1, 0, 1), groups=2, dilation=(2, 1, 1)).numpy()
    want = full[:, :, 1:, :-1, 1:]      # pads: begins (1, 0, 1), ends (0, 1, 0)
    mod, params = from_onnx(m)
    ex = kiln.runtime.GraphExecutor(kiln.compile(mod, target="llvm", params=params))
    ex.run(x=x)
    np.testing.assert_allclose(ex.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)

"""resize2d with the x86 schedule: PyTorch's modes against torch.nn.functional.interpolate,
ONNX's coordinate and nearest modes against onnx.reference (the ONNX reference interpreter).

Tolerances: nearest is exact; bilinear float32 rtol 1e-5, atol 1e-5 (coordinates computed in
float32); float64 rtol 1e-12.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kiln import te
from kiln.topi import tags
from kiln.topi.nn.resize import resize2d
from kiln.topi.utils import TopiError
from kiln.topi.x86.resize import schedule_resize


def run(build_run, xa, **kwargs):
    x = te.placeholder(xa.shape, str(xa.dtype), name="x")
    y = resize2d(x, **kwargs)
    assert y.op.tag == tags.RESIZE
    return build_run(schedule_resize, y, [x], [xa])


@pytest.mark.parametrize("shape,size,scale", [
    ((1, 2, 5, 7), (9, 12), None),
    ((1, 2, 9, 13), (4, 5), None),
    ((2, 3, 5, 7), None, (2, 3)),
    ((1, 1, 6, 35), None, 0.5),
])
def test_nearest_pytorch(shape, size, scale, build_run, rand):
    xa = rand(shape)
    got = run(build_run, xa, size=size, scale=scale)
    ref = F.interpolate(torch.from_numpy(xa), size=size, scale_factor=scale, mode="nearest")
    np.testing.assert_array_equal(got, ref.numpy())


def test_nearest_exact_pytorch(build_run, rand):
    xa = rand((1, 2, 9, 13))
    got = run(build_run, xa, size=(4, 17), coordinate_transformation_mode="tf_half_pixel_for_nn")
    ref = F.interpolate(torch.from_numpy(xa), size=(4, 17), mode="nearest-exact")
    np.testing.assert_array_equal(got, ref.numpy())


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(9, 12), (4, 3), (1, 1), (5, 40)])
def test_bilinear_pytorch(align_corners, size, build_run, rand):
    xa = rand((2, 3, 5, 7))
    mode = "align_corners" if align_corners else "half_pixel"
    got = run(build_run, xa, size=size, method="bilinear", coordinate_transformation_mode=mode)
    ref = F.interpolate(torch.from_numpy(xa), size=size, mode="bilinear",
                        align_corners=align_corners)
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-5, atol=1e-5)


def test_bilinear_float64_scale(build_run, rand):
    xa = rand((1, 2, 4, 6), "float64")
    got = run(build_run, xa, scale=2.0, method="bilinear",
              coordinate_transformation_mode="half_pixel")
    ref = F.interpolate(torch.from_numpy(xa), scale_factor=2.0, mode="bilinear")
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-12, atol=1e-12)


def onnx_resize(xa, sizes, mode, ctm, nearest_mode):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode,
                            coordinate_transformation_mode=ctm, nearest_mode=nearest_mode)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xa.shape),
                      helper.make_tensor_value_info("sizes", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    sizes = np.array(list(xa.shape[:2]) + list(sizes), dtype="int64")
    return ReferenceEvaluator(model).run(None, {"x": xa, "sizes": sizes})[0]


@pytest.mark.parametrize("ctm", ["half_pixel", "pytorch_half_pixel", "align_corners",
                                 "asymmetric"])
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
def test_nearest_onnx_modes(ctm, nearest_mode, build_run, rand):
    xa = rand((1, 2, 6, 5))
    size = (12, 3) if ctm != "pytorch_half_pixel" else (12, 1)
    got = run(build_run, xa, size=size, coordinate_transformation_mode=ctm,
              nearest_mode=nearest_mode)
    np.testing.assert_array_equal(got, onnx_resize(xa, size, "nearest", ctm, nearest_mode))


@pytest.mark.parametrize("ctm", ["half_pixel", "pytorch_half_pixel", "align_corners",
                                 "asymmetric"])
def test_linear_onnx_modes(ctm, build_run, rand):
    xa = rand((1, 2, 6, 5))
    got = run(build_run, xa, size=(9, 1), method="bilinear", coordinate_transformation_mode=ctm)
    np.testing.assert_allclose(got, onnx_resize(xa, (9, 1), "linear", ctm, "floor"),
                               rtol=1e-5, atol=1e-5)


def test_resize_fused_epilogue(build_run, rand):
    x = te.placeholder((1, 3, 5, 7), name="x")
    y = resize2d(x, size=(10, 21), method="bilinear", coordinate_transformation_mode="half_pixel")
    out = te.compute(y.shape, lambda *i: te.max(y[i], 0.0), name="relu", tag=tags.ELEMWISE)
    xa = rand((1, 3, 5, 7))
    got = build_run(schedule_resize, out, [x], [xa])
    ref = F.interpolate(torch.from_numpy(xa), size=(10, 21), mode="bilinear").numpy()
    np.testing.assert_allclose(got, np.maximum(ref, 0), rtol=1e-5, atol=1e-5)


def test_resize_errors():
    x = te.placeholder((1, 2, 4, 4), name="x")
    with pytest.raises(TopiError, match="give size=.*, scale=.* or both"):
        resize2d(x)
    with pytest.raises(TopiError, match="method must be"):
        resize2d(x, size=(2, 2), method="cubic")
    with pytest.raises(TopiError, match="coordinate_transformation_mode"):
        resize2d(x, size=(2, 2), coordinate_transformation_mode="corner")
    with pytest.raises(TopiError, match="nearest_mode"):
        resize2d(x, size=(2, 2), nearest_mode="nearest")
    with pytest.raises(TopiError, match="empty"):
        resize2d(x, scale=0.1)

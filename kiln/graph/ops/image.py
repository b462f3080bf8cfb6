"""Image operators: resizing NCHW data."""
from __future__ import annotations

from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType
from .define import cpu, topi_compute
from .relations import one_of, pair, tensor

RESIZE_METHODS = ("nearest", "linear")
COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel")
ROUNDING_METHODS = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


_TOPI_METHOD = {"nearest": "nearest", "linear": "bilinear"}


def _resize_rel(types, attrs):
    data = tensor(types[0], "data")
    if data.ndim != 4:
        raise GraphTypeError(f"data must be 4-d (NCHW), got rank {data.ndim}")
    oh, ow = pair(attrs.size, "size", minimum=1)
    one_of(attrs.method, RESIZE_METHODS, "method")
    one_of(attrs.coordinate_transformation_mode, COORDINATE_MODES,
           "coordinate_transformation_mode")
    one_of(attrs.rounding_method, ROUNDING_METHODS, "rounding_method")
    return TensorType(data.shape[:2] + (oh, ow), data.dtype)


register_op("image.resize2d", type_rel=_resize_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=1,
            attrs={"size": REQUIRED, "method": "nearest",
                   "coordinate_transformation_mode": "half_pixel",
                   "rounding_method": "round_prefer_floor"},
            compute=topi_compute("nn.resize:resize2d",
                                 lambda a, t: {"size": tuple(t.shape[2:]),
                                               "method": _TOPI_METHOD[a.method],
                                               "coordinate_transformation_mode":
                                                   a.coordinate_transformation_mode,
                                               "nearest_mode": a.rounding_method}),
            schedules=cpu("x86.resize:schedule_resize"),
            doc="resize H and W of NCHW data to size (ONNX Resize semantics; rounding_method "
                "applies to nearest)")

"""Image operators: resizing NCHW data."""
from __future__ import annotations

from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType
from .define import cpu, topi_compute
from .relations import one_of, pair, tensor

RESIZE_METHODS = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                    "half_pixel_symmetric", "tf_crop_and_resize")
ROUNDING_METHODS = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


_TOPI_METHOD = {"nearest": "nearest", "linear": "bilinear", "cubic": "bicubic"}


def _floats(value, count, what):
    if not isinstance(value, tuple) or len(value) != count or \
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise GraphTypeError(f"{what} must be a tuple of {count} numbers, got {value!r}")
    return value


def _resize_rel(types, attrs):
    data = tensor(types[0], "data")
    if data.ndim != 4:
        raise GraphTypeError(f"data must be 4-d (NCHW), got rank {data.ndim}")
    oh, ow = pair(attrs.size, "size", minimum=1)
    one_of(attrs.method, RESIZE_METHODS, "method")
    mode = one_of(attrs.coordinate_transformation_mode, COORDINATE_MODES,
                  "coordinate_transformation_mode")
    one_of(attrs.rounding_method, ROUNDING_METHODS, "rounding_method")
    if attrs.scale is not None and min(_floats(attrs.scale, 2, "scale")) <= 0:
        raise GraphTypeError(f"scale must be positive, got {attrs.scale}")
    if (attrs.roi is None) == (mode == "tf_crop_and_resize"):
        raise GraphTypeError(f"roi (start_h, start_w, end_h, end_w) goes with "
                             f"coordinate_transformation_mode 'tf_crop_and_resize', got roi "
                             f"{attrs.roi!r} with {mode!r}")
    if attrs.roi is not None:
        _floats(attrs.roi, 4, "roi")
    one_of(attrs.roi_dtype, ("float16", "float32", "float64"), "roi_dtype")
    return TensorType(data.shape[:2] + (oh, ow), data.dtype)


def _resize_kwargs(a, t):
    return {"size": tuple(t.shape[2:]), "scale": a.scale, "method": _TOPI_METHOD[a.method],
            "coordinate_transformation_mode": a.coordinate_transformation_mode,
            "nearest_mode": a.rounding_method, "cubic_coeff_a": float(a.cubic_coeff_a),
            "exclude_outside": bool(a.exclude_outside), "antialias": bool(a.antialias),
            "roi": a.roi, "roi_dtype": a.roi_dtype,
            "extrapolation_value": float(a.extrapolation_value)}


register_op("image.resize2d", type_rel=_resize_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=1,
            attrs={"size": REQUIRED, "method": "nearest",
                   "coordinate_transformation_mode": "half_pixel",
                   "rounding_method": "round_prefer_floor", "scale": None,
                   "cubic_coeff_a": -0.75, "exclude_outside": False, "antialias": False,
                   "roi": None, "roi_dtype": "float32", "extrapolation_value": 0.0},
            compute=topi_compute("nn.resize:resize2d", _resize_kwargs),
            schedules=cpu("x86.resize:schedule_resize"),
            doc="resize H and W of NCHW data to size (ONNX Resize semantics): scale (sh, sw) "
                "maps coordinates when it is not size / input size; rounding_method applies "
                "to nearest, cubic_coeff_a / exclude_outside to cubic, antialias to linear and "
                "cubic, roi / roi_dtype (its precision) / extrapolation_value to "
                "tf_crop_and_resize")

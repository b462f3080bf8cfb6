"""2-D resize (NCHW): nearest and bilinear, with ONNX's coordinate transformation modes.

An output coordinate x maps to the input coordinate
    half_pixel           (x + 0.5) / scale - 0.5
    pytorch_half_pixel   (x + 0.5) / scale - 0.5 if the output length > 1, else 0
    align_corners        x * (in - 1) / (out - 1)      (0 when out == 1)
    asymmetric           x / scale
    tf_half_pixel_for_nn (x + 0.5) / scale
where scale = out / in unless a scale is given (then that scale, as ONNX and PyTorch's
scale_factor do). Nearest rounds it (round_prefer_floor / round_prefer_ceil / floor / ceil)
and clamps it to [0, in - 1]; bilinear interpolates between floor and floor + 1, both clamped
(equivalent to PyTorch's clamping of negative coordinates to 0).

PyTorch's F.interpolate: mode="nearest" = asymmetric + floor; "nearest-exact" =
tf_half_pixel_for_nn + floor; "bilinear" with align_corners=False = half_pixel, with
align_corners=True = align_corners.
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..utils import TopiError, get_const_tuple, is_const_int

COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
METHODS = ("nearest", "bilinear")


def _pair(value, what):
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise TopiError(f"resize2d: {what} must be a number or a pair, got {value!r}")
        return tuple(value)
    return (value, value)


def _in_coord(x, in_size, out_size, scale, mode, dtype):
    """The input coordinate (float expression) of output index x along one axis."""
    xf = te.cast(x, dtype)
    if mode == "align_corners":
        if out_size == 1:
            return te.const(0.0, dtype)
        return xf * ((in_size - 1) / (out_size - 1))
    if mode == "asymmetric":
        return xf * (1.0 / scale)
    if mode == "tf_half_pixel_for_nn":
        return (xf + 0.5) * (1.0 / scale)
    if mode == "pytorch_half_pixel" and out_size == 1:
        return te.const(0.0, dtype)
    return (xf + 0.5) * (1.0 / scale) - 0.5


def _nearest_index(coord, mode, in_size):
    if mode == "floor":
        r = te.floor(coord)
    elif mode == "ceil":
        r = te.ceil(coord)
    elif mode == "round_prefer_ceil":
        r = te.floor(coord + 0.5)
    else:   # round_prefer_floor: halves go down
        r = te.ceil(coord - 0.5)
    return te.max(te.min(te.cast(r, "int32"), in_size - 1), 0)


def resize2d(data, size=None, scale=None, method="nearest",
             coordinate_transformation_mode="asymmetric", nearest_mode="floor", out_dtype=None):
    """Resize H and W of an NCHW tensor to `size` (oh, ow), or by `scale` (sh, sw) with
    output floor(in * scale). Defaults are PyTorch's "nearest"; tagged "resize".

    Example:
        >>> y = resize2d(x, scale=2, method="bilinear",
        ...              coordinate_transformation_mode="half_pixel")  # doctest: +SKIP
    """
    op = "resize2d"
    if data.ndim != 4:
        raise TopiError(f"{op}: data must be 4-D NCHW, got shape {tuple(data.shape)}")
    if method not in METHODS:
        raise TopiError(f"{op}: method must be one of {METHODS}, got {method!r}")
    mode = coordinate_transformation_mode
    if mode not in COORDINATE_MODES:
        raise TopiError(f"{op}: coordinate_transformation_mode must be one of "
                        f"{COORDINATE_MODES}, got {mode!r}")
    if nearest_mode not in NEAREST_MODES:
        raise TopiError(f"{op}: nearest_mode must be one of {NEAREST_MODES}, got {nearest_mode!r}")
    n, c, h, w = get_const_tuple(data.shape)
    if not (is_const_int(h) and is_const_int(w)):
        raise TopiError(f"{op}: needs constant H and W, got {h} x {w}")
    if (size is None) == (scale is None):
        raise TopiError(f"{op}: give exactly one of size= and scale=")
    if size is not None:
        oh, ow = (int(v) for v in _pair(size, "size"))
        sh, sw = oh / h, ow / w
    else:
        sh, sw = (float(v) for v in _pair(scale, "scale"))
        if sh <= 0 or sw <= 0:
            raise TopiError(f"{op}: scale must be positive, got {(sh, sw)}")
        oh, ow = int(h * sh), int(w * sw)
    if oh < 1 or ow < 1:
        raise TopiError(f"{op}: the output would be empty ({oh}x{ow})")
    dtype = data.dtype if data.dtype in ("float32", "float64") else "float32"
    out_dtype = out_dtype or data.dtype
    attrs = {"method": method, "coordinate_transformation_mode": mode,
             "nearest_mode": nearest_mode, "size": (oh, ow)}

    if method == "nearest":
        def fcompute(b, ch, y, x):
            iy = _nearest_index(_in_coord(y, h, oh, sh, mode, dtype), nearest_mode, h)
            ix = _nearest_index(_in_coord(x, w, ow, sw, mode, dtype), nearest_mode, w)
            return te.cast(data[b, ch, iy, ix], out_dtype)
    else:
        def fcompute(b, ch, y, x):
            fy, fx = _in_coord(y, h, oh, sh, mode, dtype), _in_coord(x, w, ow, sw, mode, dtype)
            y0f, x0f = te.floor(fy), te.floor(fx)
            wy, wx = fy - y0f, fx - x0f
            y0, x0 = te.cast(y0f, "int32"), te.cast(x0f, "int32")
            ya, yb = te.max(te.min(y0, h - 1), 0), te.max(te.min(y0 + 1, h - 1), 0)
            xa, xb = te.max(te.min(x0, w - 1), 0), te.max(te.min(x0 + 1, w - 1), 0)

            def px(yy, xx):
                return te.cast(data[b, ch, yy, xx], dtype)

            top = px(ya, xa) * (1.0 - wx) + px(ya, xb) * wx
            bottom = px(yb, xa) * (1.0 - wx) + px(yb, xb) * wx
            return te.cast(top * (1.0 - wy) + bottom * wy, out_dtype)

    return te.compute((n, c, oh, ow), fcompute, name="resize", tag=tags.RESIZE, attrs=attrs)

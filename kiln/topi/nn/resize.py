"""2-D resize (NCHW): nearest, bilinear and bicubic, with ONNX Resize's coordinate modes,
antialiasing, exclude_outside and tf_crop_and_resize.

An output index x along an axis of input length `in` maps to an input coordinate, with
`length` = scale * in (the real-valued output length; `scale` is the given scale, or out / in):
    half_pixel           (x + 0.5) / scale - 0.5
    half_pixel_symmetric in / 2 * (1 - out / length) + (x + 0.5) / scale - 0.5
    pytorch_half_pixel   (x + 0.5) / scale - 0.5 if length > 1, else -0.5
    align_corners        x * (in - 1) / (length - 1)      (0 when length == 1)
    asymmetric           x / scale
    tf_half_pixel_for_nn (x + 0.5) / scale
    tf_crop_and_resize   start * (in - 1) + x * (end - start) * (in - 1) / (length - 1) for a
                         region of interest [start, end] (relative); a coordinate outside
                         [0, in - 1] gives extrapolation_value
Coordinates are computed in float64 and divided by the scale, exactly as ONNX's reference, so
that ties of nearest rounding (a coordinate of exactly k + 0.5) go the same way.

Nearest rounds the coordinate (round_prefer_floor / round_prefer_ceil / floor / ceil) and
clamps it into [0, in - 1]. Bilinear and bicubic weigh the n taps nearest to the coordinate c
with a kernel K(tap - c) (the tent, or Keys' cubic with coefficient a), taps clamped into the
input (edge padding). With antialias and scale < 1 the kernel is stretched by 1 / scale (more
taps) and the weights are normalized; exclude_outside drops the taps outside the input and
renormalizes.

The tap indices and weights of each axis are tables (one small stage per axis, computed once
per call), so each output element only loads and multiplies. With few taps (n_h * n_w <= 16)
the output is one stage; with more (antialiased downsampling) it is two passes, along W and
then along H.

PyTorch's F.interpolate: mode="nearest" = asymmetric + floor; "nearest-exact" =
tf_half_pixel_for_nn + floor; "bilinear" with align_corners=False = half_pixel, with
align_corners=True = align_corners.
"""
from __future__ import annotations

import math

import numpy as np

from ... import te
from .. import tags
from ..utils import TopiError, get_const_tuple, is_const_int

COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_half_pixel_for_nn", "half_pixel_symmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
METHODS = ("nearest", "bilinear", "bicubic")
# Above this many taps per output element, resize runs as two one-axis passes.
DIRECT_TAPS = 16


def _pair(value, what):
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise TopiError(f"resize2d: {what} must be a number or a pair, got {value!r}")
        return tuple(value)
    return (value, value)


class _Axis:
    """The static facts of one resized axis: sizes, scale, coordinate mode and taps."""

    def __init__(self, in_size, out_size, scale, mode, crop, method, antialias, cubic_a):
        self.in_size, self.out_size, self.scale = in_size, out_size, float(scale)
        self.mode, self.crop = mode, crop
        self.length = self.scale * in_size
        self.cubic_a = cubic_a
        self.bicubic = method == "bicubic"
        support = 2.0 if self.bicubic else 1.0
        # Antialiasing stretches the kernel when downsampling (ONNX: scale = min(scale, 1)).
        self.stretch = min(self.scale, 1.0) if antialias else 1.0
        self.taps = 2 - 2 * int(math.floor(-support / self.stretch) + 1)

    def coordinate(self, x):
        """The input coordinate (float64 expression) of output index x."""
        xf = te.cast(x, "float64")
        n, length = self.in_size, self.length
        if self.mode == "align_corners":
            return te.const(0.0, "float64") if length == 1 else xf * (n - 1) / (length - 1)
        if self.mode == "asymmetric":
            return xf / self.scale
        if self.mode == "tf_half_pixel_for_nn":
            return (xf + 0.5) / self.scale
        if self.mode == "tf_crop_and_resize":
            offset, span, middle = self.crop
            if length == 1:
                return te.const(middle, "float64") + offset
            return xf * span * (n - 1) / (length - 1) + offset
        if self.mode == "pytorch_half_pixel" and length == 1:
            return te.const(-0.5, "float64")
        if self.mode == "half_pixel_symmetric":
            offset = n / 2 * (1 - self.out_size / length)
            return offset + (xf + 0.5) / self.scale - 0.5
        return (xf + 0.5) / self.scale - 0.5

    def outside(self, x):
        """tf_crop_and_resize: whether output index x samples outside the input."""
        c = self.coordinate(x)
        return (c < 0.0) | (c > float(self.in_size - 1))

    def clamp(self, i):
        return te.max(te.min(i, self.in_size - 1), 0)

    def nearest(self, x, rounding):
        c = self.coordinate(x)
        base = te.floor(c)
        if rounding == "ceil":
            r = te.ceil(c)
        elif rounding == "floor":
            r = base
        elif rounding == "round_prefer_ceil":
            r = base + te.select(c - base >= 0.5, te.const(1.0, "float64"), 0.0)
        else:   # round_prefer_floor: exact halves go down
            r = base + te.select(c - base > 0.5, te.const(1.0, "float64"), 0.0)
        return self.clamp(te.cast(r, "int32"))

    def _kernel(self, d):
        """The interpolation kernel at distance d (float64, d >= 0)."""
        if not self.bicubic:
            return te.max(1.0 - d, 0.0)
        a = self.cubic_a
        near = ((a + 2) * d - (a + 3)) * d * d + 1
        far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        return te.select(d <= 1.0, near, te.select(d < 2.0, far, 0.0))

    def tap(self, x, j):
        """The unclamped input index of tap j of output index x (int32)."""
        return te.cast(te.floor(self.coordinate(x)), "int32") + (j + 1 - self.taps // 2)

    def weight(self, x, j, exclude_outside: bool, normalize: bool):
        """The weight of tap j (0 <= j < taps, a Python int or an expression) of output x."""
        c = self.coordinate(x)

        def raw(k):
            t = self.tap(x, k)
            w = self._kernel(te.abs((te.cast(t, "float64") - c) * self.stretch))
            if exclude_outside:
                w = te.select((t >= 0) & (t < self.in_size), w, 0.0)
            return w

        w = raw(j)
        if normalize:
            total = raw(0)
            for k in range(1, self.taps):
                total = total + raw(k)
            w = w / total
        return w

    def tables(self, exclude_outside, normalize, dtype, name):
        """(index, weight) tables of shape (out, taps): clamped tap indices and weights."""
        def fcompute(x, j):
            return [self.clamp(self.tap(x, j)),
                    te.cast(self.weight(x, j, exclude_outside, normalize), dtype)]

        return te.compute((self.out_size, self.taps), fcompute, name=name,
                          tag=tags.RESIZE_TABLE)


def _crop_terms(start, end, n, roi_dtype):
    """(offset, span, middle) of tf_crop_and_resize along an axis of n entries: start * (n - 1),
    end - start and span * (n - 1) / 2, rounded to the roi's precision as ONNX's reference (and
    ONNX Runtime) compute them; a coordinate near an integer depends on it."""
    rnd = np.dtype(roi_dtype).type
    start, end = float(rnd(start)), float(rnd(end))
    span = float(rnd(end - start))
    return float(rnd(start * (n - 1))), span, float(rnd(rnd(span * (n - 1)) / 2))


def _check_args(data, method, mode, nearest_mode, roi):
    op = "resize2d"
    if data.ndim != 4:
        raise TopiError(f"{op}: data must be 4-D NCHW, got shape {tuple(data.shape)}")
    if method not in METHODS:
        raise TopiError(f"{op}: method must be one of {METHODS}, got {method!r}")
    if mode not in COORDINATE_MODES:
        raise TopiError(f"{op}: coordinate_transformation_mode must be one of "
                        f"{COORDINATE_MODES}, got {mode!r}")
    if nearest_mode not in NEAREST_MODES:
        raise TopiError(f"{op}: nearest_mode must be one of {NEAREST_MODES}, got {nearest_mode!r}")
    if (mode == "tf_crop_and_resize") != (roi is not None):
        raise TopiError(f"{op}: roi= (start_h, start_w, end_h, end_w) goes with "
                        f"coordinate_transformation_mode='tf_crop_and_resize', got roi={roi!r} "
                        f"and mode {mode!r}")
    if roi is not None and len(roi) != 4:
        raise TopiError(f"{op}: roi must hold (start_h, start_w, end_h, end_w), got {roi!r}")


def _sizes(h, w, size, scale):
    """((oh, ow), (sh, sw)): output size and the scales that map coordinates."""
    op = "resize2d"
    if size is None and scale is None:
        raise TopiError(f"{op}: give size= (the output size), scale= (the sampling scale; the "
                        f"output is then floor(in * scale)) or both")
    if scale is not None:
        sh, sw = (float(v) for v in _pair(scale, "scale"))
        if sh <= 0 or sw <= 0:
            raise TopiError(f"{op}: scale must be positive, got {(sh, sw)}")
    if size is not None:
        oh, ow = (int(v) for v in _pair(size, "size"))
        if scale is None:
            sh, sw = oh / h, ow / w
    else:
        oh, ow = int(math.floor(h * sh)), int(math.floor(w * sw))
    if oh < 1 or ow < 1:
        raise TopiError(f"{op}: the output would be empty ({oh}x{ow})")
    return (oh, ow), (sh, sw)


def resize2d(data, size=None, scale=None, method="nearest",
             coordinate_transformation_mode="asymmetric", nearest_mode="floor", out_dtype=None,
             cubic_coeff_a=-0.75, exclude_outside=False, antialias=False, roi=None,
             extrapolation_value=0.0, roi_dtype="float32"):
    """Resize H and W of an NCHW tensor to `size` (oh, ow), sampling with `scale` (sh, sw):
    either one alone sets the other (scale = out / in; out = floor(in * scale)); both give
    ONNX's scales that are not the size ratio. Defaults are PyTorch's "nearest"; tagged
    "resize". roi = (start_h, start_w, end_h, end_w) goes with tf_crop_and_resize; its
    arithmetic is rounded to roi_dtype, the type of ONNX's roi tensor.

    Example:
        >>> y = resize2d(x, scale=2, method="bicubic",
        ...              coordinate_transformation_mode="half_pixel")  # doctest: +SKIP
    """
    mode = coordinate_transformation_mode
    _check_args(data, method, mode, nearest_mode, roi)
    n, c, h, w = get_const_tuple(data.shape)
    if not (is_const_int(h) and is_const_int(w)):
        raise TopiError(f"resize2d: needs constant H and W, got {h} x {w}")
    (oh, ow), (sh, sw) = _sizes(h, w, size, scale)
    dtype = data.dtype if data.dtype in ("float32", "float64") else "float32"
    out_dtype = out_dtype or data.dtype
    crops = (None, None)
    if roi is not None:
        crops = (_crop_terms(roi[0], roi[2], h, roi_dtype),
                 _crop_terms(roi[1], roi[3], w, roi_dtype))
    ay = _Axis(h, oh, sh, mode, crops[0], method, antialias, cubic_coeff_a)
    ax = _Axis(w, ow, sw, mode, crops[1], method, antialias, cubic_coeff_a)
    attrs = {"method": method, "coordinate_transformation_mode": mode,
             "nearest_mode": nearest_mode, "size": (oh, ow)}

    if method == "nearest":
        iy = te.compute((oh,), lambda y: ay.nearest(y, nearest_mode), name="resize_rows",
                        tag=tags.RESIZE_TABLE)
        ix = te.compute((ow,), lambda x: ax.nearest(x, nearest_mode), name="resize_cols",
                        tag=tags.RESIZE_TABLE)

        def sample(b, ch, y, x):
            return te.cast(data[b, ch, iy[y], ix[x]], dtype)
    else:
        sample = _interpolation(data, ay, ax, dtype, bool(exclude_outside),
                                bool(antialias or exclude_outside))

    def fcompute(b, ch, y, x):
        value = sample(b, ch, y, x)
        if mode == "tf_crop_and_resize":
            value = te.select(ay.outside(y) | ax.outside(x),
                              te.const(extrapolation_value, dtype), value)
        return te.cast(value, out_dtype)

    return te.compute((n, c, oh, ow), fcompute, name="resize", tag=tags.RESIZE, attrs=attrs)


def _interpolation(data, ay, ax, dtype, exclude_outside, normalize):
    """sample(b, ch, y, x): the weighted taps around output (y, x) (dtype expression)."""
    iy, wy = ay.tables(exclude_outside, normalize, dtype, "resize_rows")
    ix, wx = ax.tables(exclude_outside, normalize, dtype, "resize_cols")

    def px(b, ch, yy, xx):
        return te.cast(data[b, ch, yy, xx], dtype)

    if ay.taps * ax.taps <= DIRECT_TAPS:
        def sample(b, ch, y, x):
            total = None
            for i in range(ay.taps):
                row = None
                for j in range(ax.taps):
                    term = wx[x, j] * px(b, ch, iy[y, i], ix[x, j])
                    row = term if row is None else row + term
                total = wy[y, i] * row if total is None else total + wy[y, i] * row
            return total
        return sample
    # Many taps: a pass along W into (n, c, h, ow), then one along H.
    n, c, h, _ = get_const_tuple(data.shape)
    j = te.reduce_axis((0, ax.taps), "j")
    cols = te.compute((n, c, h, ax.out_size),
                      lambda b, ch, yy, x: te.sum(wx[x, j] * px(b, ch, yy, ix[x, j]), axis=j),
                      name="resize_pass_w", tag=tags.RESIZE_TABLE)
    i = te.reduce_axis((0, ay.taps), "i")
    rows = te.compute((n, c, ay.out_size, ax.out_size),
                      lambda b, ch, y, x: te.sum(wy[y, i] * cols[b, ch, iy[y, i], x], axis=i),
                      name="resize_pass_h", tag=tags.RESIZE_TABLE)
    return lambda b, ch, y, x: rows[b, ch, y, x]

"""Vision operators: grid_sample, affine_grid, roi_align, col2im, deform_conv2d and
non_max_suppression (computes in kiln/topi/vision.py).

grid_sample and affine_grid remap indices (INJECTIVE); the others reduce per output element and
are OPAQUE kernels scheduled by topi.x86.utils.schedule_stages_at_root.

Example:
    >>> y = call("vision.grid_sample", x, grid, mode="linear")     # doctest: +SKIP
"""
from __future__ import annotations

import math

from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType
from .define import TopiRef, cpu, injective, topi_compute
from .relations import float_tensor, int_tuple, integer_tensor, one_of, tensor

GRID_SAMPLE_MODES = ("nearest", "linear", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
ROI_ALIGN_MODES = ("avg", "max")
_VISION_SCHEDULE = cpu("x86.utils:schedule_stages_at_root")


def _static(t, what):
    if not t.is_static():
        raise GraphTypeError(f"{what} needs a static shape, got {t.shape}")
    return t.shape


# ----------------------------------------------------------------------------- grid_sample
def _grid_sample_rel(types, attrs):
    data = float_tensor(types[0], "data")
    grid = float_tensor(types[1], "grid")
    shape, gshape = _static(data, "data"), _static(grid, "grid")
    rank = len(shape) - 2
    if rank < 1 or len(gshape) != rank + 2 or gshape[0] != shape[0] or gshape[-1] != rank:
        raise GraphTypeError(f"grid {gshape} does not fit data {shape}: want (N, out..., "
                             f"{rank}) for data (N, C, {rank} spatial axes)")
    one_of(attrs.mode, GRID_SAMPLE_MODES, "mode")
    one_of(attrs.padding_mode, PADDING_MODES, "padding_mode")
    return TensorType(shape[:2] + gshape[1:-1], data.dtype)


injective("vision.grid_sample", _grid_sample_rel, "vision:grid_sample", num_inputs=2,
          attrs={"mode": "linear", "padding_mode": "zeros", "align_corners": False},
          kwargs=lambda a, t: {"mode": a.mode, "padding_mode": a.padding_mode,
                               "align_corners": bool(a.align_corners)},
          doc="sample data (N, C, d...) at the normalized positions of grid (N, o..., r) "
              "(ONNX GridSample, torch grid_sample)")


# ----------------------------------------------------------------------------- affine_grid
def _affine_grid_rel(types, attrs):
    theta = float_tensor(types[0], "theta")
    n, rows, cols = _static(theta, "theta") if theta.ndim == 3 else (None, None, None)
    size = int_tuple(attrs.size, "size", minimum=1)
    rank = len(size) - 2
    if rank not in (2, 3) or rows != rank or cols != rank + 1 or size[0] != n:
        raise GraphTypeError(f"theta {theta.shape} does not fit size {size}: want (N, r, r + 1) "
                             f"for a size (N, C, r spatial sizes), r = 2 or 3")
    return TensorType((n,) + size[2:] + (rank,), theta.dtype)


injective("vision.affine_grid", _affine_grid_rel, "vision:affine_grid",
          attrs={"size": REQUIRED, "align_corners": False},
          kwargs=lambda a, t: {"size": tuple(a.size), "align_corners": bool(a.align_corners)},
          doc="the sampling grid of affine matrices theta over an image of size (ONNX "
              "AffineGrid, torch affine_grid)")


# ----------------------------------------------------------------------------- roi_align
def _roi_align_rel(types, attrs):
    data = float_tensor(types[0], "data")
    rois = float_tensor(types[1], "rois")
    index = integer_tensor(types[2], "batch_indices")
    if data.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or index.shape != rois.shape[:1]:
        raise GraphTypeError(f"want data (N, C, H, W), rois (R, 4) and batch_indices (R,), got "
                             f"{data.shape}, {rois.shape} and {index.shape}")
    oh, ow = int_tuple(attrs.output_size, "output_size", 2, minimum=1)
    one_of(attrs.mode, ROI_ALIGN_MODES, "mode")
    if attrs.sampling_ratio < 0:
        raise GraphTypeError(f"sampling_ratio must be >= 0, got {attrs.sampling_ratio}")
    if attrs.sampling_ratio == 0:
        if attrs.max_samples is None:
            raise GraphTypeError("sampling_ratio 0 (adaptive) needs max_samples, the largest "
                                 "sampling grid")
        int_tuple(attrs.max_samples, "max_samples", 2, minimum=0)
    return TensorType((rois.shape[0], data.shape[1], oh, ow), data.dtype)


register_op("vision.roi_align", type_rel=_roi_align_rel, pattern=OpPattern.OPAQUE,
            num_inputs=3,
            attrs={"output_size": REQUIRED, "spatial_scale": 1.0, "sampling_ratio": 0,
                   "max_samples": None, "mode": "avg", "half_pixel": True},
            compute=topi_compute("vision:roi_align", lambda a, t: {
                "output_size": tuple(a.output_size), "spatial_scale": float(a.spatial_scale),
                "sampling_ratio": int(a.sampling_ratio), "max_samples": a.max_samples,
                "mode": a.mode, "half_pixel": bool(a.half_pixel)}),
            schedules=_VISION_SCHEDULE,
            doc="average (or max) of bilinear samples per bin of each region of interest "
                "(ONNX RoiAlign)")


# ----------------------------------------------------------------------------- col2im
def _col2im_geometry(attrs):
    image = int_tuple(attrs.image_shape, "image_shape", minimum=1)
    rank = len(image)
    block = int_tuple(attrs.block_shape, "block_shape", rank, minimum=1)
    strides = int_tuple(attrs.strides or (1,) * rank, "strides", rank, minimum=1)
    dilations = int_tuple(attrs.dilations or (1,) * rank, "dilations", rank, minimum=1)
    pads = int_tuple(attrs.pads or (0,) * 2 * rank, "pads", 2 * rank, minimum=0)
    blocks = [(image[k] + pads[k] + pads[rank + k] - dilations[k] * (block[k] - 1) - 1)
              // strides[k] + 1 for k in range(rank)]
    return image, block, blocks


def _col2im_rel(types, attrs):
    x = tensor(types[0])
    image, block, blocks = _col2im_geometry(attrs)
    if x.ndim != 3 or not x.is_static():
        raise GraphTypeError(f"input must be (N, C * prod(block_shape), L) with a static shape, "
                             f"got {x.shape}")
    n, cb, length = x.shape
    size = math.prod(block)
    if cb % size:
        raise GraphTypeError(f"input axis 1 ({cb}) is not a multiple of the block size {size}")
    if min(blocks) < 1 or math.prod(blocks) != length:
        raise GraphTypeError(f"input axis 2 ({length}) must be the number of block positions "
                             f"{' x '.join(map(str, blocks))} of image {image}")
    return TensorType((n, cb // size) + image, x.dtype)


register_op("vision.col2im", type_rel=_col2im_rel, pattern=OpPattern.OPAQUE, num_inputs=1,
            attrs={"image_shape": REQUIRED, "block_shape": REQUIRED, "strides": None,
                   "pads": None, "dilations": None},
            compute=topi_compute("vision:col2im", lambda a, t: {
                "image_shape": tuple(a.image_shape), "block_shape": tuple(a.block_shape),
                "strides": a.strides, "pads": a.pads, "dilations": a.dilations}),
            schedules=_VISION_SCHEDULE,
            doc="sum blocks (N, C * prod(block), L) back into an image (ONNX Col2Im, "
                "torch.nn.Fold); pads are (begin..., end...)")


# ----------------------------------------------------------------------------- deform_conv2d
def _deform_conv2d_rel(types, attrs):
    expected = 3 + bool(attrs.with_bias) + bool(attrs.with_mask)
    if len(types) != expected:
        raise GraphTypeError(f"takes {expected} inputs (data, weight, offset"
                             f"{', bias' if attrs.with_bias else ''}"
                             f"{', mask' if attrs.with_mask else ''}), got {len(types)}")
    data = float_tensor(types[0], "data")
    weight, offset = tensor(types[1], "weight"), tensor(types[2], "offset")
    if data.ndim != 4 or weight.ndim != 4 or offset.ndim != 4:
        raise GraphTypeError(f"data, weight and offset must be 4-d, got {data.shape}, "
                             f"{weight.shape} and {offset.shape}")
    n, c, h, w = data.shape
    oc, cg, kh, kw = weight.shape
    groups, offset_groups = attrs.groups, attrs.offset_groups
    if c != cg * groups or oc % groups or c % offset_groups:
        raise GraphTypeError(f"data channels {c}, weight {weight.shape}, groups {groups} and "
                             f"offset_groups {offset_groups} do not fit")
    _, _, oh, ow = offset.shape
    (sh, sw), (dh, dw) = (int_tuple(attrs.strides, "strides", 2, minimum=1),
                          int_tuple(attrs.dilations, "dilations", 2, minimum=1))
    pt, pl, pb, pr = int_tuple(attrs.pads, "pads", 4, minimum=0)
    want = ((h + pt + pb - dh * (kh - 1) - 1) // sh + 1,
            (w + pl + pr - dw * (kw - 1) - 1) // sw + 1)
    if (oh, ow) != want:
        raise GraphTypeError(f"offset's spatial size {(oh, ow)} is not the convolution's output "
                             f"size {want}")
    if offset.shape[:2] != (n, offset_groups * 2 * kh * kw):
        raise GraphTypeError(f"offset must be (N, offset_groups * 2 * KH * KW, OH, OW) = "
                             f"({n}, {offset_groups * 2 * kh * kw}, OH, OW), got {offset.shape}")
    rest = types[3:]
    if attrs.with_bias and tensor(rest[0], "bias").shape != (oc,):
        raise GraphTypeError(f"bias must be ({oc},), got {rest[0].shape}")
    if attrs.with_mask and tensor(rest[-1], "mask").shape != (n, offset_groups * kh * kw, oh, ow):
        raise GraphTypeError(f"mask must be {(n, offset_groups * kh * kw, oh, ow)}, got "
                             f"{rest[-1].shape}")
    return TensorType((n, oc, oh, ow), data.dtype)


_deform_conv2d = TopiRef("vision:deform_conv2d")


def _deform_conv2d_compute(attrs, inputs, out_type):
    data, weight, offset, *rest = inputs
    bias = rest.pop(0) if attrs.with_bias else None
    mask = rest.pop(0) if attrs.with_mask else None
    return [_deform_conv2d(data, weight, offset, bias, mask,
                           strides=tuple(attrs.strides), pads=tuple(attrs.pads),
                           dilations=tuple(attrs.dilations), groups=attrs.groups,
                           offset_groups=attrs.offset_groups)]


register_op("vision.deform_conv2d", type_rel=_deform_conv2d_rel, pattern=OpPattern.OPAQUE,
            attrs={"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "groups": 1,
                   "offset_groups": 1, "with_bias": False, "with_mask": False},
            compute=_deform_conv2d_compute, schedules=_VISION_SCHEDULE,
            doc="deformable 2-D convolution: inputs data, weight, offset[, bias][, mask] (ONNX "
                "DeformConv, torchvision deform_conv2d); pads (top, left, bottom, right)")


# ----------------------------------------------------------------------------- nms
def _nms_rel(types, attrs):
    boxes, scores = float_tensor(types[0], "boxes"), float_tensor(types[1], "scores")
    if boxes.ndim != 3 or scores.ndim != 3 or boxes.shape[2] != 4 or \
            (scores.shape[0], scores.shape[2]) != boxes.shape[:2]:
        raise GraphTypeError(f"want boxes (B, N, 4) and scores (B, C, N), got {boxes.shape} "
                             f"and {scores.shape}")
    limit = attrs.max_output_size
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise GraphTypeError(f"max_output_size must be a positive int, got {limit!r}")
    nb, n = boxes.shape[:2]
    return TensorType((nb * scores.shape[1] * min(limit, n), 3), "int64")


register_op("vision.non_max_suppression", type_rel=_nms_rel, pattern=OpPattern.OPAQUE,
            num_inputs=2,
            attrs={"max_output_size": REQUIRED, "iou_threshold": 0.0, "score_threshold": None,
                   "center_point_box": False},
            compute=topi_compute("vision:non_max_suppression", lambda a, t: {
                "max_output_size": a.max_output_size, "iou_threshold": float(a.iou_threshold),
                "score_threshold": None if a.score_threshold is None else
                float(a.score_threshold), "center_point_box": bool(a.center_point_box)}),
            schedules=_VISION_SCHEDULE,
            doc="greedy non-maximum suppression per batch and class: (B * C * K, 3) rows "
                "(batch, class, box) of the kept boxes, then rows of -1 (ONNX "
                "NonMaxSuppression before its final slice)")

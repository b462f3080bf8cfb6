"""Vision ONNX ops: GridSample, AffineGrid, RoiAlign, Col2Im, DeformConv, NonMaxSuppression
(graph ops in kiln/graph/ops/vision.py, computes in kiln/topi/vision.py)."""
from __future__ import annotations

import numpy as np

from ....graph import evaluate
from ..registry import converter
from .nn import _spatial_attrs

# GridSample's modes were renamed in opset 20 (bilinear -> linear, bicubic -> cubic).
_GRID_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest",
               "bicubic": "cubic", "cubic": "cubic"}
_PADDING_MODES = ("zeros", "border", "reflection")


def _grid_sample_check(attrs, opset):
    mode = attrs.get("mode", "bilinear" if opset < 20 else "linear")
    if mode not in _GRID_MODES:
        return f"mode={mode}"
    padding = attrs.get("padding_mode", "zeros")
    return None if padding in _PADDING_MODES else f"padding_mode={padding}"


@converter("GridSample", check=_grid_sample_check)
def _grid_sample(ctx):
    """vision.grid_sample; a grid of another float type is cast to the data's.

    Example:
        >>> y = _grid_sample(ctx)    # X (1, 1, 4, 4), Grid (1, 6, 6, 2) -> (1, 1, 6, 6)
        ... # doctest: +SKIP
    """
    mode = _GRID_MODES[ctx.attr("mode", "bilinear" if ctx.opset < 20 else "linear")]
    if ctx.opset < 20 and ctx.ndim(0) != 4:
        ctx.error(f"GridSample before opset 20 takes 4-d input, got rank {ctx.ndim(0)}")
    grid = ctx.input(1)
    if ctx.dtype(1) != ctx.dtype(0):
        grid = ctx.op("cast", grid, dtype=ctx.dtype(0))
    return ctx.op("vision.grid_sample", ctx.input(0), grid, mode=mode,
                  padding_mode=ctx.attr("padding_mode", "zeros"),
                  align_corners=bool(ctx.attr("align_corners", 0)))


@converter("AffineGrid")
def _affine_grid(ctx):
    """vision.affine_grid; `size` fixes the output shape, so it is a compile-time input.

    Example:
        >>> g = _affine_grid(ctx)    # theta (2, 2, 3), size [2, 3, 5, 6] -> (2, 5, 6, 2)
        ... # doctest: +SKIP
    """
    size = ctx.static_ints(1, "size")
    if len(size) not in (4, 5):
        ctx.error(f"size must be (N, C, H, W) or (N, C, D, H, W), got {size}")
    return ctx.op("vision.affine_grid", ctx.input(0), size=tuple(size),
                  align_corners=bool(ctx.attr("align_corners", 0)))


def _roi_grid_bound(ctx, output_size, spatial_scale, half_pixel):
    """The largest adaptive sampling grid (rows, columns) over the rois, which must be known
    at import: with sampling_ratio 0 the grid of each roi depends on its size."""
    if not ctx.is_known(1):
        ctx.unsupported("sampling_ratio=0 with rois known only at run time (the number of "
                        "samples per bin depends on them)")
    rois = np.asarray(ctx.static(1, "rois"), dtype=np.float64).reshape(-1, 4)
    # (width, height) of each roi; the half-pixel offset moves both corners alike.
    sizes = rois[:, 2:] * spatial_scale - rois[:, :2] * spatial_scale
    if not half_pixel:
        sizes = np.maximum(sizes, 1.0)
    if not len(sizes):
        return 1, 1
    grid_w = np.ceil(sizes[:, 0] / output_size[1]).max()
    grid_h = np.ceil(sizes[:, 1] / output_size[0]).max()
    return int(max(grid_h, 1)), int(max(grid_w, 1))


@converter("RoiAlign")
def _roi_align(ctx):
    """vision.roi_align. Before opset 16 the only coordinate mode was output_half_pixel.

    Example:
        >>> y = _roi_align(ctx)      # X (1, 1, 10, 10), rois (3, 4) -> (3, 1, 5, 5)
        ... # doctest: +SKIP
    """
    default_coords = "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
    coords = ctx.attr("coordinate_transformation_mode", default_coords)
    if coords not in ("half_pixel", "output_half_pixel"):
        ctx.error(f"unknown coordinate_transformation_mode {coords!r}")
    mode = ctx.attr("mode", "avg")
    if mode not in ("avg", "max"):
        ctx.error(f"unknown mode {mode!r}")
    output_size = (int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1)))
    scale = float(ctx.attr("spatial_scale", 1.0))
    ratio = int(ctx.attr("sampling_ratio", 0))
    half_pixel = coords == "half_pixel"
    bound = _roi_grid_bound(ctx, output_size, scale, half_pixel) if ratio <= 0 else None
    rois = ctx.input(1)
    if ctx.dtype(1) != ctx.dtype(0):
        rois = ctx.op("cast", rois, dtype=ctx.dtype(0))
    return ctx.op("vision.roi_align", ctx.input(0), rois, ctx.input(2),
                  output_size=output_size, spatial_scale=scale, sampling_ratio=max(ratio, 0),
                  max_samples=bound, mode=mode, half_pixel=half_pixel)


@converter("Col2Im")
def _col2im(ctx):
    """vision.col2im; image_shape and block_shape fix the output shape (compile-time inputs).

    Example:
        >>> y = _col2im(ctx)         # input (1, 5, 5), image [5, 5], block [1, 5] -> (1, 1, 5, 5)
        ... # doctest: +SKIP
    """
    image = ctx.static_ints(1, "image_shape")
    block = ctx.static_ints(2, "block_shape")
    if len(block) != len(image):
        ctx.error(f"image_shape {image} and block_shape {block} have different lengths")
    strides, dilations, pads = _spatial_attrs(ctx, len(image))
    if ctx.ndim(0) != 3:
        ctx.error(f"input must be (N, C * prod(block_shape), L), got shape {ctx.shape(0)}")
    return ctx.op("vision.col2im", ctx.input(0), image_shape=tuple(image),
                  block_shape=tuple(block), strides=tuple(strides), pads=tuple(pads),
                  dilations=tuple(dilations))


@converter("DeformConv")
def _deform_conv(ctx):
    """vision.deform_conv2d (2-d only, as ONNX's reference).

    Example:
        >>> y = _deform_conv(ctx)    # X (1, 1, 3, 3), W (1, 1, 2, 2), offset (1, 8, 2, 2)
        ... # doctest: +SKIP
    """
    wshape = ctx.shape(1)
    if len(wshape) != 4:
        ctx.unsupported(f"{len(wshape) - 2}-d")
    kernel = list(ctx.attr("kernel_shape", wshape[2:]))
    if kernel != list(wshape[2:]):
        ctx.error(f"kernel_shape {kernel} differs from the weight's {list(wshape[2:])}")
    strides, dilations, pads = _spatial_attrs(ctx, 2)
    dtype = ctx.dtype(0)
    operands = [ctx.input(0)]
    for k in range(1, 5):
        if ctx.has_input(k):
            value = ctx.input(k)
            operands.append(value if ctx.dtype(k) == dtype else
                            ctx.op("cast", value, dtype=dtype))
    return ctx.op("vision.deform_conv2d", *operands, strides=tuple(strides), pads=tuple(pads),
                  dilations=tuple(dilations), groups=int(ctx.attr("group", 1)),
                  offset_groups=int(ctx.attr("offset_group", 1)),
                  with_bias=ctx.has_input(3), with_mask=ctx.has_input(4))


# The greedy selection unrolls into one stage per box (kiln/topi/vision.py): past this many
# boxes per class the kernel would take too long to compile.
MAX_NMS_BOXES = 64


def _optional_scalar(ctx, i: int, what: str):
    """Input i as a Python number, or None when it is absent or empty."""
    if not ctx.has_input(i):
        return None
    value = np.asarray(ctx.static(i, what)).reshape(-1)
    return value[0].item() if value.size else None


@converter("NonMaxSuppression")
def _non_max_suppression(ctx):
    """vision.non_max_suppression, then the selected rows.

    How many boxes survive fixes the output's length, so boxes and scores are compile-time
    inputs (a model with run-time boxes is compiled per value of them, as the ONNX backend
    does, or rejected by from_onnx naming them). kiln evaluates the selection once while
    importing to learn that length; the compiled model computes the rows with the same op.

    Example:
        >>> rows = _non_max_suppression(ctx)    # boxes (1, 6, 4), scores (1, 1, 6) -> (3, 3)
        ... # doctest: +SKIP
    """
    limit = _optional_scalar(ctx, 2, "max_output_boxes_per_class")
    limit = max(int(limit), 0) if limit is not None else 0
    iou = _optional_scalar(ctx, 3, "iou_threshold")
    score = _optional_scalar(ctx, 4, "score_threshold")
    center = int(ctx.attr("center_point_box", 0))
    if center not in (0, 1):
        ctx.error(f"center_point_box must be 0 or 1, got {center}")
    (nb, n, _), (_, nc, _) = ctx.shape(0), ctx.shape(1)
    if limit == 0 or n == 0 or nb * nc == 0:
        return np.zeros((0, 3), np.int64)
    if n > MAX_NMS_BOXES:
        ctx.unsupported(f"{n} boxes per class (at most {MAX_NMS_BOXES})")
    why = "the number of selected boxes, the output's length, depends on it"
    boxes, scores = ctx.static(0, f"boxes: {why}"), ctx.static(1, f"scores: {why}")
    rows = ctx.op("vision.non_max_suppression", boxes, scores, max_output_size=limit,
                  iou_threshold=float(iou or 0.0),
                  score_threshold=None if score is None else float(score),
                  center_point_box=bool(center))
    count = int((np.asarray(evaluate(rows))[:, 0] >= 0).sum())
    if count == 0:
        return np.zeros((0, 3), np.int64)
    return ctx.op("strided_slice", rows, begin=(0,), end=(count,), axes=(0,))

"""Vision operators: grid_sample, affine_grid, roi_align, col2im, deformable convolution and
non-maximum suppression, with ONNX's semantics (which follow PyTorch's grid_sample and
affine_grid and torchvision's roi_align, deform_conv2d and nms).

- grid_sample and affine_grid are gathers and small dot products per output element: they are
  tagged injective and fuse like any index remapping.
- roi_align and col2im are reductions per output element over a static window (sampling
  points of a bin; the block positions that overlap a pixel); deform_conv2d samples its input
  into a column stage, then reduces it against the kernel like im2col + GEMM. Those stages
  are tagged tags.VISION and x86.utils.schedule_stages_at_root computes each at the root,
  once, in one (parallel) loop.
- non_max_suppression orders the boxes by score, settles the greedy selection by a fixed
  point iteration and gathers the kept rows, all as tags.VISION stages.

Float16 data is computed in float32; float32 and float64 in their own precision.

Example:
    >>> from kiln import te
    >>> x = te.placeholder((1, 3, 8, 8), name="x")
    >>> g = te.placeholder((1, 4, 4, 2), name="g")
    >>> y = grid_sample(x, g, mode="linear", padding_mode="border")     # (1, 3, 4, 4)
"""
from __future__ import annotations

import itertools

from .. import te
from . import tags
from .utils import TopiError, get_const_tuple, is_const_int, prod

GRID_SAMPLE_MODES = ("nearest", "linear", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
ROI_ALIGN_MODES = ("avg", "max")
CUBIC_ALPHA = -0.75          # Keys' cubic convolution, as PyTorch's bicubic grid_sample


def _shape(x, op: str) -> tuple:
    if not isinstance(x, te.Tensor):
        raise TopiError(f"{op}: inputs must be te.Tensors, got {type(x).__name__} {x!r}")
    shape = get_const_tuple(x.shape)
    if not all(is_const_int(d) for d in shape):
        raise TopiError(f"{op}: {x.name} needs a static shape, got {shape}")
    return shape


def _compute_dtype(dtype: str) -> str:
    return dtype if dtype in ("float32", "float64") else "float32"


def _clamp(i, lo, hi):
    return te.max(te.min(i, hi), lo)


def _reflect(x, lo: float, hi: float):
    """x folded back into [lo, hi] by reflecting at the borders as often as needed."""
    span = hi - lo
    if span <= 0:
        return te.const(lo, x.dtype)
    dist = te.if_then_else(x < lo, lo - x, x - hi)
    flips = te.floor(dist / span)
    rest = dist - flips * span
    even = flips - 2.0 * te.floor(flips * 0.5) == 0.0
    from_lo = te.if_then_else(even, lo + rest, hi - rest)
    from_hi = te.if_then_else(even, hi - rest, lo + rest)
    return te.if_then_else(x < lo, from_lo, te.if_then_else(x > hi, from_hi, x))


def _cubic_weights(t):
    """Keys' weights of the taps at -1, 0, 1, 2 for a fractional position t in [0, 1)."""
    a = CUBIC_ALPHA

    def outer(d):          # 1 < |d| < 2
        return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a

    def inner(d):          # |d| <= 1
        return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
    return [outer(t + 1.0), inner(t), inner(1.0 - t), outer(2.0 - t)]


# ----------------------------------------------------------------------------- grid_sample
def grid_sample(data, grid, mode: str = "linear", padding_mode: str = "zeros",
                align_corners: bool = False):
    """Sample data (N, C, d1..dr) at the normalized positions of grid (N, o1..or, r), whose
    last axis lists the coordinate of the innermost spatial axis first (x, y, z). Gives
    (N, C, o1..or); nearest rounds half to even; tagged injective.

    Example:
        >>> y = grid_sample(te.placeholder((1, 1, 4, 4)), te.placeholder((1, 2, 2, 2)))
    """
    op = "grid_sample"
    shape, gshape = _shape(data, op), _shape(grid, op)
    rank = len(shape) - 2
    if rank < 1 or len(gshape) != rank + 2 or gshape[0] != shape[0] or gshape[-1] != rank:
        raise TopiError(f"{op}: grid {gshape} does not fit data {shape} (want (N, out..., "
                        f"{rank}))")
    if mode not in GRID_SAMPLE_MODES:
        raise TopiError(f"{op}: mode must be one of {GRID_SAMPLE_MODES}, got {mode!r}")
    if padding_mode not in PADDING_MODES:
        raise TopiError(f"{op}: padding_mode must be one of {PADDING_MODES}, got "
                        f"{padding_mode!r}")
    dims = shape[2:]
    ct = _compute_dtype(data.dtype)
    borders = [(0.0, d - 1.0) if align_corners else (-0.5, d - 0.5) for d in dims]

    def position(b, out, k):
        """The (padded) input coordinate along spatial axis k."""
        g = te.cast(grid[(b,) + tuple(out) + (rank - 1 - k,)], ct)
        d = dims[k]
        x = (g + 1.0) * ((d - 1) / 2.0) if align_corners else ((g + 1.0) * d - 1.0) * 0.5
        if mode == "nearest":
            x = te.round(x)
        lo, hi = borders[k]
        if padding_mode == "border":
            x = te.if_then_else((x < lo) | (x > hi), _clamp(x, 0.0, d - 1.0), x)
        elif padding_mode == "reflection":
            x = _reflect(x, lo, hi)
        return x

    def pixel(b, c, index):
        """data at integer positions, with the padding mode applied to each of them."""
        inside, safe = [], []
        for k, i in enumerate(index):
            d = dims[k]
            if padding_mode == "reflection":
                i = te.cast(_reflect(te.cast(i, ct), *borders[k]), "int32")
            elif padding_mode == "zeros":
                inside += [i >= 0, i < d]
            safe.append(_clamp(i, 0, d - 1))
        value = te.cast(data[(b, c) + tuple(safe)], ct)
        return te.if_then_else(te.all(*inside), value, te.const(0, ct)) if inside else value

    def to_index(x, k):
        # Clamped before the cast: far-away positions stay outside and cannot overflow int32.
        return te.cast(_clamp(x, -4.0, dims[k] + 3.0), "int32")

    def fcompute(*index):
        b, c, *out = index
        xs = [position(b, out, k) for k in range(rank)]
        if mode == "nearest":
            return te.cast(pixel(b, c, [to_index(x, k) for k, x in enumerate(xs)]), data.dtype)
        taps = []                     # per axis: [(index, weight)]
        for k, x in enumerate(xs):
            x0 = te.floor(x)
            t = x - x0
            i0 = to_index(x0, k)
            if mode == "linear":
                taps.append([(i0, 1.0 - t), (i0 + 1, t)])
            else:
                taps.append([(i0 + o, w) for o, w in zip((-1, 0, 1, 2), _cubic_weights(t))])
        total = None
        for combo in itertools.product(*taps):
            weight = combo[0][1]
            for _, w in combo[1:]:
                weight = weight * w
            term = weight * pixel(b, c, [i for i, _ in combo])
            total = term if total is None else total + term
        return te.cast(total, data.dtype)

    return te.compute(tuple(shape[:2]) + tuple(gshape[1:-1]), fcompute, name="grid_sample",
                      tag=tags.INJECTIVE)


# ----------------------------------------------------------------------------- affine_grid
def affine_grid(theta, size, align_corners: bool = False):
    """The sampling grid (N, d1..dr, r) of affine matrices theta (N, r, r + 1) over the
    normalized positions of an image of `size` (N, C, d1..dr), r = 2 or 3; the last axis
    lists x (innermost spatial axis) first. Computed in float64; tagged injective.

    Example:
        >>> g = affine_grid(te.placeholder((2, 2, 3)), (2, 3, 5, 6))      # (2, 5, 6, 2)
    """
    op = "affine_grid"
    n, rows, cols = _shape(theta, op)
    spatial = tuple(int(d) for d in size[2:])
    rank = len(spatial)
    if rank not in (2, 3) or rows != rank or cols != rank + 1 or int(size[0]) != n:
        raise TopiError(f"{op}: theta {(n, rows, cols)} does not fit size {tuple(size)} (want "
                        f"(N, r, r + 1) for r = 2 or 3 spatial axes)")

    def base(i, d):
        """Normalized position of index i on an axis of d points."""
        ix = te.cast(i, "float64")
        if align_corners:
            return te.const(-1.0, "float64") if d == 1 else ix * (2.0 / (d - 1)) - 1.0
        return (ix * 2.0 + 1.0) * (1.0 / d) - 1.0

    def fcompute(*index):
        b, *pos, j = index
        coords = [base(pos[rank - 1 - m], spatial[rank - 1 - m]) for m in range(rank)]
        total = te.cast(theta[b, j, rank], "float64")
        for m, x in enumerate(coords):
            total = total + te.cast(theta[b, j, m], "float64") * x
        return te.cast(total, theta.dtype)

    return te.compute((n,) + spatial + (rank,), fcompute, name="affine_grid",
                      tag=tags.INJECTIVE)


# ----------------------------------------------------------------------------- roi_align
def roi_align(data, rois, batch_indices, output_size, spatial_scale: float = 1.0,
              sampling_ratio: int = 0, max_samples=None, mode: str = "avg",
              half_pixel: bool = True):
    """RoiAlign (ONNX): data (N, C, H, W), rois (R, 4) as (x1, y1, x2, y2), batch_indices (R,)
    to (R, C, oh, ow); each bin averages (or maxes) bilinear samples on a grid of
    sampling_ratio^2 points, or ceil(roi size / bin count) per axis when sampling_ratio is 0
    (then `max_samples` (gh, gw) bounds that grid). Tagged tags.VISION.

    Example:
        >>> y = roi_align(x, rois, idx, (5, 5), sampling_ratio=2)     # doctest: +SKIP
    """
    op = "roi_align"
    n, c, h, w = _shape(data, op)
    num_rois, four = _shape(rois, op)
    oh, ow = (int(v) for v in output_size)
    if four != 4 or _shape(batch_indices, op) != (num_rois,):
        raise TopiError(f"{op}: rois must be (R, 4) and batch_indices (R,), got "
                        f"{(num_rois, four)} and {_shape(batch_indices, op)}")
    if mode not in ROI_ALIGN_MODES:
        raise TopiError(f"{op}: mode must be one of {ROI_ALIGN_MODES}, got {mode!r}")
    if sampling_ratio > 0:
        gh_max = gw_max = int(sampling_ratio)
    elif max_samples is None:
        raise TopiError(f"{op}: sampling_ratio 0 needs max_samples, the largest sampling grid")
    else:
        gh_max, gw_max = (max(int(v), 1) for v in max_samples)
    ct = _compute_dtype(data.dtype)
    offset = 0.5 if half_pixel else 0.0

    def roi(r):
        """(start_h, start_w, bin_h, bin_w, grid_h, grid_w) of roi r."""
        x1, y1, x2, y2 = (te.cast(rois[r, k], ct) * spatial_scale - offset for k in range(4))
        height, width = y2 - y1, x2 - x1
        if not half_pixel:        # malformed rois are forced to 1 x 1
            height, width = te.max(height, 1.0), te.max(width, 1.0)
        bin_h, bin_w = height / float(oh), width / float(ow)
        if sampling_ratio > 0:
            grid_h = grid_w = te.const(int(sampling_ratio), "int32")
        else:
            grid_h = te.cast(te.ceil(height / float(oh)), "int32")
            grid_w = te.cast(te.ceil(width / float(ow)), "int32")
        return y1, x1, bin_h, bin_w, grid_h, grid_w

    def axis_sample(start, bin_size, grid, cell, step, size):
        """(low index, high index, low weight, high weight, inside) of one sample axis."""
        pos = start + te.cast(cell, ct) * bin_size + \
            (te.cast(step, ct) + 0.5) * bin_size / te.cast(grid, ct)
        inside = (pos >= -1.0) & (pos <= float(size))
        pos = te.max(pos, 0.0)
        low = te.cast(te.min(te.floor(pos), float(size - 1)), "int32")
        pos = te.min(pos, float(size - 1))
        frac = pos - te.cast(low, ct)
        return low, te.min(low + 1, size - 1), 1.0 - frac, frac, inside

    iy = te.reduce_axis((0, gh_max), name="iy")
    ix = te.reduce_axis((0, gw_max), name="ix")

    def fcompute(r, ch, ph, pw):
        y1, x1, bin_h, bin_w, grid_h, grid_w = roi(r)
        b = _clamp(te.cast(batch_indices[r], "int32"), 0, n - 1)
        ylo, yhi, wyl, wyh, yin = axis_sample(y1, bin_h, grid_h, ph, iy, h)
        xlo, xhi, wxl, wxh, xin = axis_sample(x1, bin_w, grid_w, pw, ix, w)
        corners = [wyl * wxl * te.cast(data[b, ch, ylo, xlo], ct),
                   wyl * wxh * te.cast(data[b, ch, ylo, xhi], ct),
                   wyh * wxl * te.cast(data[b, ch, yhi, xlo], ct),
                   wyh * wxh * te.cast(data[b, ch, yhi, xhi], ct)]
        zero = te.const(0.0, ct)
        used = (iy < grid_h) & (ix < grid_w)
        if mode == "avg":
            value = te.if_then_else(yin & xin, corners[0] + corners[1] + corners[2] + corners[3],
                                    zero)
            return te.sum(value, axis=[iy, ix], where=used)
        value = te.if_then_else(yin & xin, te.max(te.max(corners[0], corners[1]),
                                                  te.max(corners[2], corners[3])), zero)
        return te.max(value, axis=[iy, ix], where=used)

    pooled = te.compute((num_rois, c, oh, ow), fcompute, name="roi_align_pool", tag=tags.VISION)

    def finish(r, ch, ph, pw):
        *_, grid_h, grid_w = roi(r)
        count = grid_h * grid_w
        value = pooled[r, ch, ph, pw]
        if mode == "avg":
            value = value / te.cast(te.max(count, 1), ct)
        else:                     # no sample at all: 0, not the reduction's -inf
            value = te.if_then_else(count > 0, value, te.const(0.0, ct))
        return te.cast(value, data.dtype)

    return te.compute((num_rois, c, oh, ow), finish, name="roi_align", tag=tags.INJECTIVE)


# ----------------------------------------------------------------------------- col2im
def col2im(data, image_shape, block_shape, strides=None, pads=None, dilations=None):
    """Col2Im (the inverse of im2col, torch.nn.Fold for any rank): data (N, C * prod(block),
    L) holds the blocks of an image (N, C, *image_shape); overlapping values add up.
    pads are (begin..., end...). Tagged tags.VISION.

    Example:
        >>> y = col2im(te.placeholder((1, 5, 15)), (5, 5), (1, 5), pads=(0, 1, 0, 1))
    """
    op = "col2im"
    n, cb, length = _shape(data, op)
    image = tuple(int(v) for v in image_shape)
    block = tuple(int(v) for v in block_shape)
    rank = len(image)
    strides = tuple(strides or (1,) * rank)
    dilations = tuple(dilations or (1,) * rank)
    pads = tuple(pads or (0,) * (2 * rank))
    if len(block) != rank or len(strides) != rank or len(dilations) != rank or \
            len(pads) != 2 * rank:
        raise TopiError(f"{op}: image_shape {image}, block_shape {block}, strides {strides}, "
                        f"dilations {dilations} and pads {pads} disagree on the rank")
    blocks = [(image[k] + pads[k] + pads[rank + k] - dilations[k] * (block[k] - 1) - 1)
              // strides[k] + 1 for k in range(rank)]
    size = prod(block)
    if min(blocks) < 1 or prod(blocks) != length or cb % size:
        raise TopiError(f"{op}: input {(n, cb, length)} does not hold blocks {block} of an "
                        f"image {image} ({blocks} block positions)")
    ks = [te.reduce_axis((0, b), name=f"k{k}") for k, b in enumerate(block)]

    def fcompute(*index):
        b, ch, *pixel = index
        conds, cols = [], []
        for k in range(rank):
            shifted = pixel[k] + pads[k] - ks[k] * dilations[k]
            conds += [shifted >= 0, te.floormod(shifted, strides[k]) == 0,
                      te.floordiv(shifted, strides[k]) < blocks[k]]
            cols.append(te.floordiv(shifted, strides[k]))
        row = ch * size
        col = 0
        for k in range(rank):
            row = row + ks[k] * prod(block[k + 1:])
            col = col * blocks[k] + cols[k]
        return te.sum(data[b, row, col], axis=ks, where=te.all(*conds))

    return te.compute((n, cb // size) + image, fcompute, name="col2im", tag=tags.VISION)


# ----------------------------------------------------------------------------- deform_conv2d
def deform_conv2d(data, weight, offset, bias=None, mask=None, strides=(1, 1),
                  pads=(0, 0, 0, 0), dilations=(1, 1), groups: int = 1, offset_groups: int = 1):
    """Deformable 2-D convolution (ONNX DeformConv, torchvision deform_conv2d): each kernel tap
    samples data bilinearly (zero outside) at its position shifted by `offset`
    (N, offset_groups * 2 * KH * KW, OH, OW; (dy, dx) pairs), scaled by `mask` (N,
    offset_groups * KH * KW, OH, OW) when given. pads are (top, left, bottom, right).

    Example:
        >>> y = deform_conv2d(x, w, off)                      # doctest: +SKIP
    """
    op = "deform_conv2d"
    n, c, h, w = _shape(data, op)
    oc, cg, kh, kw = _shape(weight, op)
    on, oc2, oh, ow = _shape(offset, op)
    taps = kh * kw
    if c != cg * groups or oc % groups or c % offset_groups or on != n or \
            oc2 != offset_groups * 2 * taps:
        raise TopiError(f"{op}: data {(n, c, h, w)}, weight {(oc, cg, kh, kw)} and offset "
                        f"{(on, oc2, oh, ow)} do not fit groups {groups} and offset_groups "
                        f"{offset_groups}")
    if mask is not None and _shape(mask, op) != (n, offset_groups * taps, oh, ow):
        raise TopiError(f"{op}: mask must be {(n, offset_groups * taps, oh, ow)}, got "
                        f"{_shape(mask, op)}")
    ct = _compute_dtype(data.dtype)
    per_offset_group = c // offset_groups
    sh, sw = strides
    dh, dw = dilations

    def pixel(b, ch, y, x):
        inside = te.all(y >= 0, y < h, x >= 0, x < w)
        value = te.cast(data[b, ch, _clamp(y, 0, h - 1), _clamp(x, 0, w - 1)], ct)
        return te.if_then_else(inside, value, te.const(0.0, ct))

    def sample(b, ch, i, j, y, x):
        tap = i * kw + j
        group = ch // per_offset_group
        pos_y = te.cast(y * sh - pads[0] + i * dh, ct) + \
            te.cast(offset[b, group * 2 * taps + 2 * tap, y, x], ct)
        pos_x = te.cast(x * sw - pads[1] + j * dw, ct) + \
            te.cast(offset[b, group * 2 * taps + 2 * tap + 1, y, x], ct)
        y0f, x0f = te.floor(pos_y), te.floor(pos_x)
        ty, tx = pos_y - y0f, pos_x - x0f
        y0 = te.cast(_clamp(y0f, -2.0, h + 1.0), "int32")
        x0 = te.cast(_clamp(x0f, -2.0, w + 1.0), "int32")
        value = ((1.0 - ty) * ((1.0 - tx) * pixel(b, ch, y0, x0) + tx * pixel(b, ch, y0, x0 + 1))
                 + ty * ((1.0 - tx) * pixel(b, ch, y0 + 1, x0) + tx * pixel(b, ch, y0 + 1,
                                                                           x0 + 1)))
        if mask is not None:
            value = value * te.cast(mask[b, group * taps + tap, y, x], ct)
        return value

    columns = te.compute((n, c, kh, kw, oh, ow), sample, name="deform_columns", tag=tags.VISION)
    rc = te.reduce_axis((0, cg), name="rc")
    ri = te.reduce_axis((0, kh), name="ri")
    rj = te.reduce_axis((0, kw), name="rj")
    out_per_group = oc // groups

    def conv(b, o, y, x):
        ch = (o // out_per_group) * cg + rc
        return te.sum(te.cast(weight[o, rc, ri, rj], ct) * columns[b, ch, ri, rj, y, x],
                      axis=[rc, ri, rj])

    out = te.compute((n, oc, oh, ow), conv, name="deform_conv2d", tag=tags.VISION)
    if bias is None:
        return te.compute(out.shape, lambda *i: te.cast(out[i], data.dtype), name="deform_out",
                          tag=tags.INJECTIVE)
    return te.compute(out.shape, lambda b, o, y, x: te.cast(out[b, o, y, x] + te.cast(
        bias[o], ct), data.dtype), name="deform_out", tag=tags.INJECTIVE)


# ----------------------------------------------------------------------------- nms
def _box_edges(boxes, center_point_box: bool, ct: str):
    """(B, N, 4) stage of each box's (x_min, x_max, y_min, y_max)."""
    def fcompute(b, i, e):
        v = [te.cast(boxes[b, i, k], ct) for k in range(4)]
        if center_point_box:          # (x_center, y_center, width, height)
            x_half, y_half = v[2] / 2.0, v[3] / 2.0
            edges = [v[0] - x_half, v[0] + x_half, v[1] - y_half, v[1] + y_half]
        else:                         # (y1, x1, y2, x2), corners in either order
            edges = [te.min(v[1], v[3]), te.max(v[1], v[3]), te.min(v[0], v[2]),
                     te.max(v[0], v[2])]
        return te.if_then_else(e == 0, edges[0], te.if_then_else(
            e == 1, edges[1], te.if_then_else(e == 2, edges[2], edges[3])))
    return te.compute(get_const_tuple(boxes.shape)[:2] + (4,), fcompute, name="nms_edges",
                      tag=tags.VISION)


def _suppresses(edges, iou_threshold: float, ct: str):
    """(B, N, N) stage: box i and box j overlap with IoU > iou_threshold (ONNX's test, in the
    boxes' precision and operation order, so boundary cases decide alike)."""
    def fcompute(b, i, j):
        x0, x1 = te.max(edges[b, i, 0], edges[b, j, 0]), te.min(edges[b, i, 1], edges[b, j, 1])
        y0, y1 = te.max(edges[b, i, 2], edges[b, j, 2]), te.min(edges[b, i, 3], edges[b, j, 3])
        inter = (x1 - x0) * (y1 - y0)
        area_i = (edges[b, i, 1] - edges[b, i, 0]) * (edges[b, i, 3] - edges[b, i, 2])
        area_j = (edges[b, j, 1] - edges[b, j, 0]) * (edges[b, j, 3] - edges[b, j, 2])
        union = area_i + area_j - inter
        overlap = te.all(x1 > x0, y1 > y0, inter > 0.0, area_i > 0.0, area_j > 0.0,
                         union > 0.0)
        iou = inter / te.if_then_else(overlap, union, te.const(1.0, ct))
        return overlap & (iou > te.const(iou_threshold, ct))
    n = get_const_tuple(edges.shape)[1]
    return te.compute((get_const_tuple(edges.shape)[0], n, n), fcompute, name="nms_suppress",
                      tag=tags.VISION)


def _score_order(scores):
    """(B, C, N) stage: the box at each position of the descending score order (ties: lower
    index first, as ONNX's reference)."""
    nb, nc, n = get_const_tuple(scores.shape)
    j = te.reduce_axis((0, n), name="j")

    def rank(b, c, i):
        before = (scores[b, c, j] > scores[b, c, i]) | \
            ((scores[b, c, j] == scores[b, c, i]) & (j < i))
        return te.sum(te.if_then_else(before, 1, 0), axis=j)

    ranks = te.compute((nb, nc, n), rank, name="nms_rank", tag=tags.VISION)
    i = te.reduce_axis((0, n), name="i")
    return te.compute((nb, nc, n), lambda b, c, p: te.sum(
        te.if_then_else(ranks[b, c, i] == p, i, 0), axis=i), name="nms_order", tag=tags.VISION)


def non_max_suppression(boxes, scores, max_output_size: int, iou_threshold: float = 0.0,
                        score_threshold=None, center_point_box: bool = False):
    """ONNX NonMaxSuppression: boxes (B, N, 4), scores (B, C, N) to (B * C * K, 3) int64 rows
    (batch, class, box) of the selected boxes, batch by batch, class by class, each class in
    selection order; the rows after the selected ones are -1. K = min(max_output_size, N).

    te has no sequential loop, so the greedy selection (a box is kept when no kept box
    before it in score order suppresses it) is iterated to its fixed point: iteration t
    settles position t, N - 1 iterations of O(N^2) each (tags.VISION stages).

    Example:
        >>> rows = non_max_suppression(te.placeholder((1, 6, 4)), te.placeholder((1, 1, 6)), 3,
        ...                            0.5)
    """
    op = "non_max_suppression"
    nb, n, four = _shape(boxes, op)
    sb, nc, sn = _shape(scores, op)
    if four != 4 or (sb, sn) != (nb, n):
        raise TopiError(f"{op}: boxes {(nb, n, four)} and scores {(sb, nc, sn)} do not fit "
                        f"(want (B, N, 4) and (B, C, N))")
    k = min(int(max_output_size), n)
    if k < 1:
        raise TopiError(f"{op}: max_output_size must be >= 1, got {max_output_size}")
    ct = _compute_dtype(boxes.dtype)
    suppress = _suppresses(_box_edges(boxes, center_point_box, ct), iou_threshold, ct)
    order = _score_order(scores)

    def candidate(b, c, p):
        if score_threshold is None:
            return te.const(True, "bool")
        return scores[b, c, order[b, c, p]] > te.const(score_threshold, scores.dtype)

    valid = te.compute((nb, nc, n), candidate, name="nms_valid", tag=tags.VISION)
    blocked = None            # per position: how many kept boxes before it suppress it

    def kept(b, c, p, blocked):
        return valid[b, c, p] if blocked is None else valid[b, c, p] & (blocked[b, c, p] == 0)

    for t in range(1, n):
        q = te.reduce_axis((0, n), name="q")

        def settle(b, c, p, prev=blocked, q=q):
            hit = kept(b, c, q, prev) & suppress[b, order[b, c, q], order[b, c, p]]
            return te.sum(te.if_then_else(hit, 1, 0), axis=q, where=q < p)
        blocked = te.compute((nb, nc, n), settle, name=f"nms_blocked{t}", tag=tags.VISION)

    def keep(b, c, p):
        return kept(b, c, p, blocked)

    q = te.reduce_axis((0, n), name="q")
    before = te.compute((nb, nc, n), lambda b, c, p: te.sum(
        te.if_then_else(keep(b, c, q), 1, 0), axis=q, where=q < p), name="nms_before",
        tag=tags.VISION)
    q2 = te.reduce_axis((0, n), name="q2")
    kept_count = te.compute((nb, nc), lambda b, c: te.sum(
        te.if_then_else(keep(b, c, q2), 1, 0), axis=q2), name="nms_count", tag=tags.VISION)
    blocks = te.reduce_axis((0, nb * nc), name="blocks")
    start = te.compute((nb, nc), lambda b, c: te.sum(
        te.min(kept_count[blocks // nc, blocks % nc], k), axis=blocks,
        where=blocks < b * nc + c), name="nms_start", tag=tags.VISION)
    rb, rc, rp = (te.reduce_axis((0, d), name=name) for d, name in
                  ((nb, "rb"), (nc, "rc"), (n, "rp")))

    def row(t, e):
        hit = keep(rb, rc, rp) & (before[rb, rc, rp] < k) & \
            (start[rb, rc] + before[rb, rc, rp] == t)
        field = te.if_then_else(e == 0, rb, te.if_then_else(e == 1, rc, order[rb, rc, rp]))
        # One (b, c, p) at most matches; an unmatched row sums to 0 and reads -1.
        return te.sum(te.if_then_else(hit, te.cast(field, "int64") + 1, te.const(0, "int64")),
                      axis=[rb, rc, rp])

    shifted = te.compute((nb * nc * k, 3), row, name="nms_rows", tag=tags.VISION)
    return te.compute(shifted.shape, lambda t, e: shifted[t, e] - 1,
                      name="non_max_suppression", tag=tags.INJECTIVE)

"""Signal-processing ONNX ops: HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix, DFT,
STFT; and Det (LU elimination composed from catalog ops, one column per step).

Window sizes, DFT lengths and the MelWeightMatrix parameters are compile-time values
(ctx.static). A DFT is a matrix product: the signal axis (times its real/imaginary pair) is
multiplied by a constant real matrix that holds the cos/sin table, with nn.dense, so it runs as
kiln's tuned dense kernel. That is O(n^2) per transform where an FFT is O(n log n): fine for the
frame lengths of audio front ends, and refused beyond _MAX_DFT_MATRIX elements.
"""
from __future__ import annotations

import math

import numpy as np

from ..context import dtype_of, shape_of
from ..dtypes import kiln_dtype
from ..registry import converter
from .elementwise import _cast_to as cast_to
from .tensor import reshape_to

# -- windows and mel filters -----------------------------------------------------------------

# Generalized cosine windows: w[n] = a0 - a1 cos(2 pi n / D) + a2 cos(4 pi n / D).
_WINDOWS = {"HannWindow": (0.5, 0.5), "HammingWindow": (25.0 / 46.0, 21.0 / 46.0),
            "BlackmanWindow": (0.42, 0.5, 0.08)}


def _static_scalar(ctx, i: int, what: str):
    """Input i, a compile-time scalar (or one-element tensor), as a Python number."""
    value = np.asarray(ctx.static(i, what))
    if value.size != 1:
        ctx.error(f"{what} (input {i}) must be a scalar, got shape {value.shape}")
    return value.reshape(()).item()


def _static_int(ctx, i: int, what: str) -> int:
    value = _static_scalar(ctx, i, what)
    if not float(value).is_integer():
        ctx.error(f"{what} (input {i}) must be an integer, got {value}")
    return int(value)


def _output_dtype(ctx) -> str:
    return kiln_dtype(int(ctx.attr("output_datatype", 1)),
                      f"ONNX node {ctx.name!r} ({ctx.op_type}) output_datatype")


@converter(*_WINDOWS)
def _window(ctx):
    size = _static_int(ctx, 0, "size")
    if size < 0:
        ctx.error(f"size must not be negative, got {size}")
    if size == 0:
        ctx.unsupported("size 0 (an empty window)")
    return ctx.op("signal.cosine_window", length=size, coefficients=_WINDOWS[ctx.op_type],
                  periodic=bool(ctx.attr("periodic", 1)), dtype=_output_dtype(ctx))


@converter("MelWeightMatrix")
def _mel_weight_matrix(ctx):
    bins = _static_int(ctx, 0, "num_mel_bins")
    length = _static_int(ctx, 1, "dft_length")
    rate = _static_int(ctx, 2, "sample_rate")
    lower = float(_static_scalar(ctx, 3, "lower_edge_hertz"))
    upper = float(_static_scalar(ctx, 4, "upper_edge_hertz"))
    for what, value in (("num_mel_bins", bins), ("dft_length", length), ("sample_rate", rate)):
        if value < 1:
            ctx.error(f"{what} must be positive, got {value}")
    if not 0 <= lower < upper:
        ctx.error(f"need 0 <= lower_edge_hertz < upper_edge_hertz, got {lower} and {upper}")
    return ctx.op("signal.mel_weight_matrix", num_mel_bins=bins, dft_length=length,
                  sample_rate=rate, lower_edge_hertz=lower, upper_edge_hertz=upper,
                  dtype=_output_dtype(ctx))


# -- DFT as a matrix product -----------------------------------------------------------------

# Largest DFT matrix (elements) built: 16 Mi, 64 MiB in float32 (a complex DFT of length 2048).
_MAX_DFT_MATRIX = 1 << 24


def _unit_circle(n: int):
    """cos and sin of 2 pi j / n for j in [0, n), exact at multiples of pi / 2 (so that a real
    signal's DC and Nyquist terms have an imaginary part of exactly 0, as in an FFT)."""
    j = np.arange(n)
    cos, sin = np.cos(2 * np.pi * j / n), np.sin(2 * np.pi * j / n)
    for quarter, (c, s) in enumerate(((1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0))):
        if (quarter * n) % 4 == 0:
            cos[quarter * n // 4], sin[quarter * n // 4] = c, s
    return cos, sin


def dft_shape(n: int, inverse: bool, onesided: bool) -> tuple:
    """(length along the axis, values per element) of a length-n DFT's result: 2 for complex
    results, 1 for the real signal of an inverse one-sided transform (numpy's irfft).

    Example:
        >>> dft_shape(16, inverse=False, onesided=True)
        (9, 2)
    """
    if inverse:
        return n, 1 if onesided else 2
    return (n // 2 + 1 if onesided else n), 2


def dft_matrix(n_in: int, channels: int, n: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The real float64 matrix W (outputs, inputs) of a length-n DFT as nn.dense applies it:
    an input row holds n_in samples times `channels` (1: real, 2: real and imaginary parts,
    interleaved), an output row the dft_shape values. Samples past the ones the transform
    reads are ignored; missing ones count as zeros.

    Example:
        >>> dft_matrix(4, 1, 4, inverse=False, onesided=True).shape    # 3 bins x (re, im)
        (6, 4)
    """
    cos, sin = _unit_circle(n)
    n_out, pair = dft_shape(n, inverse, onesided)
    real_out = pair == 1
    used = min(n_in, n // 2 + 1 if real_out else n)
    t = np.arange(n_out)[:, None] if inverse else np.arange(used)[None, :]
    k = np.arange(used)[None, :] if inverse else np.arange(n_out)[:, None]
    phase = (k * t) % n
    # M[out, in] = e^{-i theta} (forward) or e^{+i theta} / n (inverse).
    re = cos[phase] / (n if inverse else 1)
    im = (sin[phase] if inverse else -sin[phase]) / (n if inverse else 1)
    if real_out:
        # irfft: the other half of the spectrum mirrors bins 1 .. ceil(n/2)-1 (count twice);
        # the imaginary parts of DC and of the Nyquist bin are ignored.
        edge = (np.arange(used) == 0) | (2 * np.arange(used) == n)
        re, im = re * np.where(edge, 1.0, 2.0), im * np.where(edge, 0.0, 2.0)
    w = np.zeros((n_out, pair, n_in, channels))
    w[:, 0, :used, 0] = re                 # y.re += M.re x.re
    if channels == 2:
        w[:, 0, :used, 1] = -im            # y.re -= M.im x.im
    if not real_out:
        w[:, 1, :used, 0] = im             # y.im += M.im x.re
        if channels == 2:
            w[:, 1, :used, 1] = re         # y.im += M.re x.im
    return w.reshape(n_out * pair, n_in * channels)


def _rows_along(ctx, x, axis: int):
    """x (..., channels) as a 2-d (others, axis * channels) matrix, and the permutation used."""
    shape = tuple(shape_of(x))
    order = [d for d in range(len(shape) - 1) if d != axis] + [axis, len(shape) - 1]
    if order != list(range(len(shape))):
        x = ctx.op("transpose", x, axes=tuple(order))
    return reshape_to(ctx, x, (math.prod(shape[d] for d in order[:-2]),
                               shape[axis] * shape[-1])), order


def dft(ctx, x, axis: int, n: int, inverse: bool = False, onesided: bool = False):
    """The DFT of x (..., channels) along `axis` (not the last), ONNX layout: a trailing
    dimension of 1 (real) or 2 (complex); the result's axis has the transform's length.

    Example:
        >>> y = dft(ctx, x, 1, 16, onesided=True)   # (B, 16, 1) to (B, 9, 2)  # doctest: +SKIP
    """
    shape = tuple(shape_of(x))
    n_out, pair = dft_shape(n, inverse, onesided)
    reads = n // 2 + 1 if pair == 1 else n
    if shape[axis] > reads:          # only the first samples matter: drop the rest first
        x = ctx.op("strided_slice", x, begin=(0,), end=(reads,), strides=(1,), axes=(axis,))
        shape = tuple(shape_of(x))
    if n_out * pair * shape[axis] * shape[-1] > _MAX_DFT_MATRIX:
        ctx.unsupported(f"a DFT of length {n} (kiln multiplies by a {n_out * pair}x"
                        f"{shape[axis] * shape[-1]} matrix, at most {_MAX_DFT_MATRIX} elements)")
    dtype = dtype_of(x)
    compute = "float32" if dtype == "float16" else dtype     # no float16 accumulation
    rows, order = _rows_along(ctx, x, axis)
    w = dft_matrix(shape[axis], shape[-1], n, inverse, onesided)
    y = ctx.op("nn.dense", cast_to(ctx, rows, compute), w.astype(compute))
    y = reshape_to(ctx, cast_to(ctx, y, dtype),
                   tuple(shape[d] for d in order[:-2]) + (n_out, pair))
    if order != list(range(len(shape))):
        y = ctx.op("transpose", y, axes=tuple(int(a) for a in np.argsort(order)))
    return y


def _dft_axis(ctx, rank: int) -> int:
    if ctx.opset < 20:
        axis = int(ctx.attr("axis", 1))
    elif ctx.has_input(2):
        axis = _static_int(ctx, 2, "axis")
    else:
        axis = -2
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        ctx.error(f"axis {axis} is not a signal axis of a rank-{rank} input (the last axis "
                  f"holds the real and imaginary parts)")
    return axis % rank


@converter("DFT")
def _dft(ctx):
    shape = ctx.shape(0)
    if len(shape) < 2 or shape[-1] not in (1, 2):
        ctx.error(f"input shape {tuple(shape)} must end in 1 (real) or 2 (complex)")
    if not dtype_of(ctx.input(0)).startswith("float"):
        ctx.error(f"input must be floating point, got {dtype_of(ctx.input(0))}")
    axis = _dft_axis(ctx, len(shape))
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    if ctx.has_input(1):
        n = _static_int(ctx, 1, "dft_length")
    else:
        n = 2 * (shape[axis] - 1) if inverse and onesided else shape[axis]
    if n < 1:
        ctx.error(f"the DFT length must be positive, got {n}")
    return dft(ctx, ctx.input(0), axis, n, inverse, onesided)


@converter("STFT")
def _stft(ctx):
    shape = ctx.shape(0)
    if len(shape) != 3 or shape[2] not in (1, 2):
        ctx.error(f"signal shape {tuple(shape)} must be (batch, length, 1 or 2)")
    step = _static_int(ctx, 1, "frame_step")
    window = ctx.input(2) if ctx.has_input(2) else None
    if window is not None and len(shape_of(window)) != 1:
        ctx.error(f"window must be 1-D, got shape {tuple(shape_of(window))}")
    if ctx.has_input(3):
        length = _static_int(ctx, 3, "frame_length")
    else:
        length = shape_of(window)[0] if window is not None else shape[1]
    if window is not None and shape_of(window)[0] != length:
        ctx.error(f"window length {shape_of(window)[0]} differs from frame_length {length}")
    if step < 1 or not 1 <= length <= shape[1]:
        ctx.error(f"frame_step {step} and frame_length {length} do not fit a signal of "
                  f"length {shape[1]}")
    frames = 1 + (shape[1] - length) // step
    # Frame t is samples t * step .. t * step + length - 1: one gather of (frames, length).
    index = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    x = ctx.op("take", ctx.input(0), index.astype("int64"), axis=1)
    if window is not None:
        if dtype_of(window) != dtype_of(x):
            ctx.error(f"window dtype {dtype_of(window)} differs from the signal's "
                      f"{dtype_of(x)}")
        x = ctx.op("multiply", x, reshape_to(ctx, window, (1, 1, length, 1)))
    return dft(ctx, x, 2, length, onesided=bool(ctx.attr("onesided", 1)))


# -- Det: LU factorization with partial pivoting, one column per step ------------------------

# Columns eliminated one graph step each; beyond this, compile time grows too much.
_MAX_DET_SIZE = 64


def _slice(ctx, x, axis: int, begin: int, end: int):
    return ctx.op("strided_slice", x, begin=(begin,), end=(end,), strides=(1,), axes=(axis,))


def _det_step(ctx, m, size: int):
    """One elimination step on m (B, size, size): the pivot (B, 1, 1), whether rows were
    swapped (B, 1, 1) and the (B, size-1, size-1) Schur complement (None for size 1)."""
    p = ctx.op("argmax", ctx.op("abs", _slice(ctx, m, 2, 0, 1)), axis=1, keepdims=True)
    index = ctx.op("broadcast_to", p, shape=(shape_of(m)[0], 1, size))
    pivot_row = ctx.op("gather", m, index, axis=1)                    # (B, 1, size)
    pivot = _slice(ctx, pivot_row, 2, 0, 1)
    swapped = ctx.op("not_equal", p, np.zeros((), "int64"))
    if size == 1:
        return pivot, swapped, None
    # Row p takes row 0 (the swap); row 0 (now the pivot row) then leaves the matrix.
    rows = np.arange(size, dtype="int64").reshape(1, size, 1)
    rest = _slice(ctx, ctx.op("where", ctx.op("equal", rows, p), _slice(ctx, m, 1, 0, 1), m),
                  1, 1, size)
    # A zero pivot means a zero column: the determinant is 0; divide by 1 to keep NaNs out.
    safe = ctx.op("where", ctx.op("equal", pivot, ctx.scalar(0, pivot)), ctx.scalar(1, pivot),
                  pivot)
    factor = ctx.op("divide", _slice(ctx, rest, 2, 0, 1), safe)
    update = ctx.op("multiply", factor, _slice(ctx, pivot_row, 2, 1, size))
    return pivot, swapped, ctx.op("subtract", _slice(ctx, rest, 2, 1, size), update)


@converter("Det")
def _det(ctx):
    shape = tuple(ctx.shape(0))
    if len(shape) < 2 or shape[-1] != shape[-2]:
        ctx.error(f"input shape {shape} is not a (batch of) square matrices")
    dtype = ctx.dtype(0)
    if not dtype.startswith("float"):
        ctx.error(f"input must be floating point, got {dtype}")
    n, batch = shape[-1], shape[:-2]
    if n > _MAX_DET_SIZE:
        ctx.unsupported(f"{n}x{n} matrices (kiln eliminates one column per graph step, "
                        f"up to {_MAX_DET_SIZE})")
    compute = "float32" if dtype == "float16" else dtype
    m = cast_to(ctx, reshape_to(ctx, ctx.input(0), (math.prod(batch), n, n)), compute)
    # det = (-1)^(row swaps) * product of the pivots, as LAPACK's LU gives it.
    det = None
    for size in range(n, 0, -1):
        pivot, swapped, m = _det_step(ctx, m, size)
        signed = ctx.op("where", swapped, ctx.op("negative", pivot), pivot)
        det = signed if det is None else ctx.op("multiply", det, signed)
    return reshape_to(ctx, cast_to(ctx, det, dtype), batch)

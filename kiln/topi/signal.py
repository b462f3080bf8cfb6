"""Signal-processing computes: generalized cosine windows (Hann, Hamming, Blackman) and the
mel filter bank matrix. Both are functions of their attributes alone (no input tensors); they
compute in float64 and round once to the output dtype.

Example:
    >>> from kiln import te, topi
    >>> w = topi.signal.cosine_window(16, (0.5, 0.5), periodic=True)       # Hann
    >>> m = topi.signal.mel_weight_matrix(8, 16, 8192, 0.0, 4096.0)         # (9, 8)
    >>> s = te.create_schedule([w.op, m.op])
"""
from __future__ import annotations

import math

from .. import te
from ..tir import dtype as dt
from . import tags
from .utils import TopiError


def _check_dtype(dtype: str, op_name: str) -> str:
    try:
        return dt.normalize(dtype)
    except dt.DTypeError as err:
        raise TopiError(f"{op_name}: {err}") from None


def cosine_window(length: int, coefficients, periodic: bool = True, dtype: str = "float32"):
    """w[n] = a0 - a1 cos(2 pi n / D) + a2 cos(4 pi n / D) - ..., n in [0, length), with
    D = length for a periodic window and length - 1 for a symmetric one.

    Hann is (0.5, 0.5), Hamming (25/46, 21/46), Blackman (0.42, 0.5, 0.08). A symmetric
    window of length 1 divides 0 by 0 (NaN), as the formula does.

    Example:
        >>> w = cosine_window(10, (0.42, 0.5, 0.08), periodic=False)   # Blackman
    """
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise TopiError(f"cosine_window: length must be a positive int, got {length!r}")
    coefficients = tuple(float(a) for a in coefficients)
    if not coefficients:
        raise TopiError("cosine_window: needs at least one coefficient")
    dtype = _check_dtype(dtype, "cosine_window")
    denom = te.const(float(length if periodic else length - 1), "float64")

    def element(n):
        angle = te.cast(n, "float64") * (2.0 * math.pi) / denom
        acc = None
        for k, a in enumerate(coefficients[1:], start=1):
            term = te.cos(angle * float(k)) * (-a if k % 2 else a)
            acc = term if acc is None else acc + term
        # a0 last, as the ONNX reference sums: the center of a symmetric Blackman window is
        # then exactly 1 (what an integer output_datatype truncates).
        acc = te.const(coefficients[0], "float64") if acc is None else acc + coefficients[0]
        return te.cast(acc, dtype)

    return te.compute((length,), element, name="cosine_window", tag=tags.INJECTIVE)


def hz_to_mel(hz: float) -> float:
    """The mel scale of the ONNX spec, 2595 * log10(1 + hz / 700): hz_to_mel(700.0) ~ 781.17."""
    return 2595.0 * math.log10(1.0 + hz / 700.0)


def mel_weight_matrix(num_mel_bins: int, dft_length: int, sample_rate: int,
                      lower_edge_hertz: float, upper_edge_hertz: float, dtype: str = "float32"):
    """The (dft_length // 2 + 1, num_mel_bins) matrix of triangular mel filters (ONNX
    MelWeightMatrix): filter i rises linearly from spectrogram bin e[i] to 1 at e[i + 1] and
    falls to 0 at e[i + 2]. The edges e[k], k in [0, num_mel_bins + 2), are
    floor((dft_length + 1) * hz(k) / sample_rate), the points hz(k) evenly spaced on the mel
    scale from lower_edge_hertz with step (mel(upper) - mel(lower)) / (num_mel_bins + 2).

    Example:
        >>> m = mel_weight_matrix(8, 16, 8192, 0.0, 4096.0)
    """
    for name, value in (("num_mel_bins", num_mel_bins), ("dft_length", dft_length),
                        ("sample_rate", sample_rate)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TopiError(f"mel_weight_matrix: {name} must be a positive int, got {value!r}")
    dtype = _check_dtype(dtype, "mel_weight_matrix")
    low = hz_to_mel(float(lower_edge_hertz))
    step = (hz_to_mel(float(upper_edge_hertz)) - low) / (num_mel_bins + 2)

    def edge(k):
        mel = te.cast(k, "float64") * step + low
        hz = (te.exp(mel * (math.log(10.0) / 2595.0)) - 1.0) * 700.0
        return te.floor(hz * float(dft_length + 1) / float(sample_rate))

    def element(j, i):
        lo, center, hi = edge(i), edge(i + 1), edge(i + 2)
        f = te.cast(j, "float64")
        rising = te.select(center == lo, te.const(1.0, "float64"), (f - lo) / (center - lo))
        falling = (hi - f) / (hi - center)
        value = te.select(te.all(f >= center, f < hi), falling,
                          te.select(te.all(f >= lo, f <= center), rising,
                                    te.const(0.0, "float64")))
        return te.cast(value, dtype)

    shape = (dft_length // 2 + 1, num_mel_bins)
    return te.compute(shape, element, name="mel_weight_matrix", tag=tags.INJECTIVE)

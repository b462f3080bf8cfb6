"""Signal-processing operators that generate a tensor from their attributes alone: cosine
windows (Hann, Hamming, Blackman) and the mel filter bank matrix. They take no inputs, so
FoldConstant evaluates them once at compile time when their output is small."""
from __future__ import annotations

from ..expr import GraphTypeError
from ..op import REQUIRED
from ..ty import TensorType
from .define import injective
from .relations import check_dtype


def _positive(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GraphTypeError(f"{what} must be a positive int, got {value!r}")
    return value


def _cosine_window_rel(types, attrs):
    """A (length,) tensor of the requested dtype."""
    coefficients = tuple(attrs.coefficients)
    if not coefficients:
        raise GraphTypeError("coefficients must not be empty")
    return TensorType((_positive(attrs.length, "length"),), check_dtype(attrs.dtype))


injective("signal.cosine_window", _cosine_window_rel, "signal:cosine_window", num_inputs=0,
          attrs={"length": REQUIRED, "coefficients": (0.5, 0.5), "periodic": True,
                 "dtype": "float32"},
          kwargs=lambda a, t: {"length": a.length, "coefficients": tuple(a.coefficients),
                               "periodic": bool(a.periodic), "dtype": t.dtype},
          doc="a0 - a1 cos(2 pi n / D) + a2 cos(4 pi n / D) - ..., D = length (periodic) "
              "or length - 1")


def _mel_rel(types, attrs):
    """A (dft_length // 2 + 1, num_mel_bins) tensor of the requested dtype."""
    bins = _positive(attrs.num_mel_bins, "num_mel_bins")
    length = _positive(attrs.dft_length, "dft_length")
    _positive(attrs.sample_rate, "sample_rate")
    if not 0 <= attrs.lower_edge_hertz < attrs.upper_edge_hertz:
        raise GraphTypeError(f"need 0 <= lower_edge_hertz < upper_edge_hertz, got "
                             f"{attrs.lower_edge_hertz} and {attrs.upper_edge_hertz}")
    return TensorType((length // 2 + 1, bins), check_dtype(attrs.dtype))


_MEL_ATTRS = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
              "upper_edge_hertz")

injective("signal.mel_weight_matrix", _mel_rel, "signal:mel_weight_matrix", num_inputs=0,
          attrs={**{k: REQUIRED for k in _MEL_ATTRS}, "dtype": "float32"},
          kwargs=lambda a, t: {**{k: a[k] for k in _MEL_ATTRS}, "dtype": t.dtype},
          doc="triangular mel filters: (dft_length // 2 + 1, num_mel_bins) weights")

"""Signal computes (cosine windows, mel filter bank) against numpy, built with the x86
injective schedule, and their graph operators' type relations. Tolerance: 1e-12 in float64
(one rounding of a float64 formula); float32 outputs 1e-7 (the float64 value rounded once).
"""
import math

import numpy as np
import pytest

from kiln.graph import GraphTypeError, call
from kiln.topi import signal
from kiln.topi.utils import TopiError
from kiln.topi.x86.injective import schedule_injective


def window_ref(length, coefficients, periodic):
    n = np.arange(length)
    d = length if periodic else length - 1
    return sum((-1) ** k * a * np.cos(2 * np.pi * k * n / d) for k, a in enumerate(coefficients))


def mel_ref(bins, length, rate, low, high):
    """The ONNX spec's triangular filters, written out loop by loop."""
    mel = lambda hz: 2595 * math.log10(1 + hz / 700)   # noqa: E731
    step = (mel(high) - mel(low)) / (bins + 2)
    edges = [math.floor((length + 1) * 700 * (10 ** ((mel(low) + k * step) / 2595) - 1) / rate)
             for k in range(bins + 2)]
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        lo, center, hi = edges[i:i + 3]
        for j in range(lo, center + 1):
            out[j, i] = 1.0 if center == lo else (j - lo) / (center - lo)
        for j in range(center, hi):
            out[j, i] = (hi - j) / (hi - center)
    return out


@pytest.mark.parametrize("length,coefficients,periodic", [
    (16, (0.5, 0.5), True), (17, (25 / 46, 21 / 46), False), (10, (0.42, 0.5, 0.08), False),
    (1, (0.5, 0.5), True)])
def test_cosine_window(build_run, length, coefficients, periodic):
    w = signal.cosine_window(length, coefficients, periodic, dtype="float64")
    got = build_run(schedule_injective, w, [], [])
    np.testing.assert_allclose(got, window_ref(length, coefficients, periodic), atol=1e-12)


def test_mel_weight_matrix(build_run):
    args = (40, 512, 16000, 20.0, 7600.0)
    m64 = signal.mel_weight_matrix(*args, dtype="float64")
    m32 = signal.mel_weight_matrix(*args)
    got64, got32 = build_run(schedule_injective, [m64, m32], [], [])
    np.testing.assert_allclose(got64, mel_ref(*args), atol=1e-12)
    np.testing.assert_allclose(got32, mel_ref(*args).astype("float32"), atol=1e-7)
    assert got32.dtype == np.float32 and got32.shape == (257, 40)


def test_compute_errors():
    with pytest.raises(TopiError, match="cosine_window: length must be a positive int"):
        signal.cosine_window(0, (0.5, 0.5))
    with pytest.raises(TopiError, match="mel_weight_matrix: sample_rate must be a positive"):
        signal.mel_weight_matrix(8, 16, 0, 0.0, 100.0)


def test_graph_type_relations():
    y = call("signal.cosine_window", length=12, coefficients=(0.5, 0.5), dtype="float64")
    assert (y.checked_type.shape, y.checked_type.dtype) == ((12,), "float64")
    m = call("signal.mel_weight_matrix", num_mel_bins=8, dft_length=16, sample_rate=8000,
             lower_edge_hertz=0.0, upper_edge_hertz=4000.0)
    assert (m.checked_type.shape, m.checked_type.dtype) == ((9, 8), "float32")
    with pytest.raises(GraphTypeError, match="signal.cosine_window: length must be a positive"):
        call("signal.cosine_window", length=-1)
    with pytest.raises(GraphTypeError, match="need 0 <= lower_edge_hertz < upper_edge_hertz"):
        call("signal.mel_weight_matrix", num_mel_bins=8, dft_length=16, sample_rate=8000,
             lower_edge_hertz=100.0, upper_edge_hertz=50.0)

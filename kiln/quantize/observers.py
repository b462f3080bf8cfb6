"""Observers: the range of a tensor over calibration data, and its uint8 scale and zero point.

    MinMax       the smallest and largest value seen
    Percentile   the p-th / (100 − p)-th percentiles of the values seen (outliers clipped)
    Entropy      the clipping threshold whose 8-bit histogram loses the least information
                 (Kullback-Leibler divergence against the full histogram, as in NVIDIA's
                 "8-bit inference with TensorRT", 2017)

Every range includes 0, so a real zero (padding, a ReLU's floor) is exactly representable.

Example:
    >>> o = MinMax(); o.observe(np.array([-1.0, 3.0])); o.qparams()
    (0.01568627..., 64)
"""
from __future__ import annotations

import numpy as np

QMIN, QMAX = 0, 255          # activations are uint8


def affine_qparams(lo: float, hi: float) -> tuple[float, int]:
    """(scale, zero point) of uint8 values covering [lo, hi] (widened to include 0).

    Example:
        >>> affine_qparams(0.0, 2.55)
        (0.01, 0)
    """
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo <= 0:
        return 1.0, 0
    scale = float(np.float32((hi - lo) / (QMAX - QMIN)))
    zero = int(np.clip(round(QMIN - lo / scale), QMIN, QMAX))
    return scale, zero


class MinMax:
    """The range of every value seen."""

    name = "minmax"

    def __init__(self):
        self.lo, self.hi = np.inf, -np.inf

    def observe(self, x: np.ndarray) -> None:
        self.lo = min(self.lo, float(x.min()))
        self.hi = max(self.hi, float(x.max()))

    def range(self) -> tuple[float, float]:
        return min(self.lo, 0.0), max(self.hi, 0.0)

    def qparams(self) -> tuple[float, int]:
        return affine_qparams(*self.range())


class _Histogram(MinMax):
    """A histogram over [lo, hi] that widens (re-binning what it has) as new values arrive."""

    BINS = 2048

    def __init__(self):
        super().__init__()
        self.counts = None

    def observe(self, x: np.ndarray) -> None:
        x = np.asarray(x, "float64").ravel()
        lo, hi = min(self.lo, float(x.min()), 0.0), max(self.hi, float(x.max()), 0.0)
        if self.counts is not None and (lo, hi) != (self.lo, self.hi):
            centers = self.edges()[:-1] + (self.hi - self.lo) / self.BINS / 2
            self.counts = np.histogram(centers, self.BINS, (lo, hi), weights=self.counts)[0]
        self.lo, self.hi = lo, hi
        if hi == lo:
            self.zeros = getattr(self, "zeros", 0) + x.size    # all zero: counted once binned
            return
        if getattr(self, "zeros", 0):
            x = np.concatenate([x, np.zeros(self.zeros)])
            self.zeros = 0
        counts = np.histogram(x, self.BINS, (lo, hi))[0].astype("float64")
        self.counts = counts if self.counts is None else self.counts + counts

    def edges(self) -> np.ndarray:
        return np.linspace(self.lo, self.hi, self.BINS + 1)


class Percentile(_Histogram):
    """The range between the (100 − p)-th and p-th percentiles."""

    name = "percentile"

    def __init__(self, percentile: float = 99.99):
        super().__init__()
        if not 50.0 < percentile <= 100.0:
            raise ValueError(f"percentile must be in (50, 100], got {percentile}")
        self.percentile = percentile

    def range(self) -> tuple[float, float]:
        if self.counts is None:
            return self.lo, self.hi
        cdf = np.cumsum(self.counts) / self.counts.sum()
        edges = self.edges()
        tail = 1.0 - self.percentile / 100.0
        lo = edges[int(np.searchsorted(cdf, tail))] if self.lo < 0 else self.lo
        hi = edges[min(int(np.searchsorted(cdf, 1.0 - tail)) + 1, self.BINS)]
        return float(lo), float(hi)


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    mask = p > 0
    p = p / p.sum()
    q = q / max(q.sum(), 1e-300)
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))


class Entropy(_Histogram):
    """The upper threshold (the lower one stays the minimum) minimizing the KL divergence
    between the histogram clipped there and its quantization to the levels above zero."""

    name = "entropy"

    def range(self) -> tuple[float, float]:
        if self.counts is None or self.hi <= 0:
            return self.lo, self.hi
        edges = self.edges()
        zero_bin = int(np.searchsorted(edges, 0.0, side="right")) - 1
        # the bin holding 0 is left out: zero is exact whatever the threshold, and a ReLU's
        # many zeros would otherwise outweigh the rest and favour the smallest threshold
        positive = self.counts[zero_bin + 1:]
        # the levels above zero: uint8's share of the range above zero
        levels = max(1, round((QMAX - QMIN) * self.hi / (self.hi - self.lo)))
        best, best_kl = len(positive), np.inf
        candidates = list(range(min(levels, len(positive)), len(positive), 16))
        for stop in candidates + [len(positive)]:             # the last: no clipping
            p = positive[:stop].copy()
            p[-1] += positive[stop:].sum()              # outliers clipped into the last bin
            # the candidate: the slice without its outliers, merged into `levels` levels and
            # spread back over the bins that were not empty
            raw = positive[:stop]
            starts = np.array([c[0] for c in np.array_split(np.arange(stop), min(levels, stop))])
            nonzero = p > 0
            mass = np.add.reduceat(raw, starts)
            filled = np.add.reduceat(nonzero.astype("float64"), starts)
            width = np.diff(np.append(starts, stop))
            q = np.repeat(mass / np.maximum(filled, 1), width) * nonzero
            kl = _kl(p, q)
            if kl < best_kl:
                best, best_kl = stop, kl
        return self.lo, float(edges[min(zero_bin + 1 + best, self.BINS)])


OBSERVERS = {c.name: c for c in (MinMax, Percentile, Entropy)}


def make_observer(kind: str):
    """A fresh observer by name: "minmax", "percentile" or "entropy".

    Example:
        >>> make_observer("entropy").name
        'entropy'
    """
    if kind not in OBSERVERS:
        raise ValueError(f"unknown observer {kind!r}; kiln has {', '.join(OBSERVERS)}")
    return OBSERVERS[kind]()


__all__ = ["Entropy", "MinMax", "OBSERVERS", "Percentile", "affine_qparams", "make_observer"]

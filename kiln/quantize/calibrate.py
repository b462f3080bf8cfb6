"""kiln.quantize.quantize: a float model into an int8 one, calibrated on data the user gives.

    1. prepare   bind the weights, fold batch norms into the convolutions (the passes
                 kiln.compile starts with), so that every product has a constant weight;
    2. find      the products and value points (annotate.find_points);
    3. observe   run the float graph with every value point as an extra output over the
                 calibration data; an observer per point (min-max, percentile, entropy);
    4. write     the QDQ form (annotate.QDQWriter): what an ONNX QDQ model holds, which
                 kiln.compile turns into integer kernels (FakeQuantizationToInteger);
    5. report    run both graphs on the calibration data and compare each product's result:
                 the signal-to-quantization-noise ratio per layer, so a user sees which layer
                 hurts and can `skip` it.

Example:
    >>> result = quantize(mod, params, [{"x": x} for x in batches])      # doctest: +SKIP
    >>> print(result.report)                                              # doctest: +SKIP
    >>> lib = kiln.compile(result.mod, params=result.params)              # doctest: +SKIP
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..graph import Function, IRModule, Tuple
from .annotate import QDQWriter, find_points, matched_names
from .observers import make_observer


@dataclass
class LayerError:
    """One quantized product's result against float32 over the calibration data."""

    name: str
    op: str             # "nn.conv2d (float output)": a model output, its product in float
    shape: tuple
    sqnr_db: float          # 10 log10(sum f^2 / sum (f - q)^2)
    max_abs_error: float
    max_abs_value: float


@dataclass
class QuantizeReport:
    """The per-layer error of a quantized model, worst first when printed."""

    observer: str
    weight_bits: int
    per_channel: bool
    layers: list = field(default_factory=list)
    skipped: list = field(default_factory=list)

    def worst(self, count: int = 5) -> list:
        """The `count` layers with the lowest signal-to-noise ratio."""
        return sorted(self.layers, key=lambda r: r.sqnr_db)[:count]

    def __str__(self) -> str:
        head = (f"kiln.quantize: {len(self.layers)} layers quantized ({self.observer} "
                f"calibration, {self.weight_bits}-bit weights "
                f"{'per channel' if self.per_channel else 'per tensor'})")
        rows = [f"{'SQNR dB':>8s} {'max|err|':>10s} {'max|ref|':>10s}  layer (op)"]
        for r in sorted(self.layers, key=lambda r: r.sqnr_db):
            rows.append(f"{r.sqnr_db:8.1f} {r.max_abs_error:10.4g} {r.max_abs_value:10.4g}  "
                        f"{r.name} ({r.op})")
        tail = [f"left in float32: {', '.join(self.skipped)}"] if self.skipped else []
        return "\n".join([head, *rows, *tail])


@dataclass
class QuantizeResult:
    """What quantize returns: the QDQ module, its params (none: the weights are in the
    graph), and the report. Unpacks as (mod, params, report)."""

    mod: IRModule
    params: dict
    report: QuantizeReport

    def __iter__(self):
        return iter((self.mod, self.params, self.report))


def _prepare(mod, params) -> Function:
    from ..graph.transform import (FoldConstant, InferType, PassContext, Sequential,
                                   SimplifyExpr, SimplifyInference)
    from ..graph.transform.fold_constant import bind_params
    func = mod["main"] if isinstance(mod, IRModule) else mod
    func = bind_params(func, params or {})
    with PassContext(opt_level=3):
        prepared = Sequential([InferType(), SimplifyInference(), FoldConstant(), SimplifyExpr(),
                               InferType()])(IRModule.from_expr(func))
    return prepared["main"]


def _batches(func, data) -> list:
    names = [p.name_hint for p in func.params]
    batches = []
    for item in data:
        if isinstance(item, dict):
            batch = item
        elif isinstance(item, (tuple, list)):
            batch = dict(zip(names, item))
        else:
            batch = {names[0]: item}
        missing = [n for n in names if n not in batch]
        if missing:
            raise ValueError(f"calibration batch {len(batches)} lacks input(s) "
                             f"{', '.join(missing)} (the model takes {', '.join(names)})")
        batches.append({n: np.asarray(batch[n]) for n in names})
    if not batches:
        raise ValueError("quantize needs at least one calibration batch")
    return batches


def _probe(func, values):
    """An executor of func's inputs returning `values` (graph expressions inside func)."""
    import kiln
    from ..runtime import GraphExecutor
    probe = Function(func.params, Tuple(list(values)))
    return GraphExecutor(kiln.compile(IRModule.from_expr(probe)))


def _outputs(ex, batch, count) -> list:
    ex.run(**batch)
    return [ex.get_output(k).numpy() for k in range(count)]


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    noise = float(np.sum((ref.astype("float64") - got) ** 2))
    signal = float(np.sum(ref.astype("float64") ** 2))
    if noise == 0:
        return math.inf
    return 10.0 * math.log10(max(signal, 1e-300) / noise)


def default_weight_bits() -> int:
    """8 where the host has VNNI (exact 8-bit products), else 7: the `vpmaddubsw` kernels of
    AVX2 are exact only when the weights' pairs fit int16 (ONNX Runtime's `reduce_range`)."""
    from ..target import Target
    host = Target("llvm")
    return 8 if host.has_feature("avx512vnni") or host.has_feature("avxvnni") else 7


def quantize(mod, params, calibration_data, observer: str = "minmax", per_channel: bool = True,
             skip=(), weight_bits: int | None = None) -> QuantizeResult:
    """An int8 version of a float model, calibrated on `calibration_data` (an iterable of
    batches: dicts by input name, tuples in input order, or arrays for a one-input model).

    observer: "minmax", "percentile" or "entropy" for the activations (uint8, asymmetric);
    weights are int8, symmetric, per output channel (or per tensor), with `weight_bits` 8 or
    7 (default: default_weight_bits()); `skip` names ops ("nn.dense") or nodes (their source
    names, as the report lists them) to leave in float32. The result's report gives each
    quantized layer's error against float32.

    Example:
        >>> mod8, params8, report = quantize(mod, params, batches,
        ...                                  observer="entropy")      # doctest: +SKIP
    """
    bits = default_weight_bits() if weight_bits is None else weight_bits
    if bits not in (7, 8):
        raise ValueError(f"weight_bits must be 7 or 8, got {weight_bits}")
    func = _prepare(mod, params)
    batches = _batches(func, calibration_data)
    points = find_points(func, skip)
    unmatched = sorted(set(skip) - matched_names(func, skip))
    if unmatched:
        raise ValueError(f"skip names no op or node of the model: {', '.join(unmatched)} "
                         f"(give op names such as 'nn.dense', or node names as the report "
                         f"prints them)")
    if not points.products:
        raise ValueError("the model has no convolution or dense with constant weights to "
                         "quantize" + (f" outside skip={sorted(skip)}" if skip else ""))
    observers = [make_observer(observer) for _ in points.values]
    probe = _probe(func, points.values)
    for batch in batches:
        for obs, value in zip(observers, _outputs(probe, batch, len(points.values))):
            obs.observe(value)
    qparams = {v: obs.qparams() for v, obs in zip(points.values, observers)}

    writer = QDQWriter(points, qparams, per_channel, 127 if bits == 8 else 63)
    body = writer.visit(func.body)
    quantized = Function(func.params, body, func.attrs)

    # each product's result: its dequantized value point, or (a model output) the float end
    ends = [p.end for p in points.products if p.call in writer.weight_scale]
    quantized_ends = [writer.dequantized.get(e, writer.memo[e]) for e in ends]
    report = QuantizeReport(observer, bits, per_channel,
                            skipped=sorted({n for n in skip}))
    float_probe = _probe(func, ends)
    int_probe = _probe(quantized, quantized_ends)
    refs = [[] for _ in ends]
    gots = [[] for _ in ends]
    for batch in batches:
        for k, (f, q) in enumerate(zip(_outputs(float_probe, batch, len(ends)),
                                       _outputs(int_probe, batch, len(ends)))):
            refs[k].append(f)
            gots[k].append(q)
    by_end = {p.end: p for p in points.products}
    for end, ref, got in zip(ends, refs, gots):
        ref = np.concatenate([r.ravel() for r in ref])
        got = np.concatenate([g.ravel() for g in got])
        product = by_end[end]
        op = getattr(product.call.op, "name", "") + ("" if end in writer.dequantized
                                                      else " (float output)")
        report.layers.append(LayerError(product.name, op,
                                        tuple(end.checked_type.shape), _sqnr(ref, got),
                                        float(np.abs(ref - got).max()),
                                        float(np.abs(ref).max())))
    return QuantizeResult(IRModule.from_expr(quantized), {}, report)


__all__ = ["LayerError", "QuantizeReport", "QuantizeResult", "default_weight_bits", "quantize"]

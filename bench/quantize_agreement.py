"""kiln.quantize on ResNet-18: top-1 agreement with float32 over seeded inputs, the per-layer
report, and int8 against float32 latency (issue 25's calibration bar).

    python bench/quantize_agreement.py [--observers minmax percentile entropy]
                                       [--weight-bits 7 8] [--inputs 256] [--width 64]
                                       [--skip nn.dense ...] [--no-onnxruntime]

kiln.testing.models.resnet18 with seeded random weights, calibrated on 8 seeded random images,
evaluated on --inputs other seeded images. Besides the agreement it prints how decisive the
float model itself is (how many classes it predicts, its median top-1 / top-2 logit margin):
a model with seeded random weights predicts few classes by small margins, so agreement there
measures whether quantization noise stays below those margins. For scale, the same model
quantized by ONNX Runtime's `quantize_static` (QDQ, per-channel, the same calibration images,
7-bit weights where kiln's are 7-bit) and run by ONNX Runtime, against ONNX Runtime float32.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

THREADS = peers.configure_threads(int(os.environ.get("BENCH_THREADS", "2")))

import numpy as np  # noqa: E402


def _top(ex, name, x):
    ex.run(**{name: x})
    return ex.get_output(0).numpy().ravel()


def _onnxruntime_agreement(model, shape, calibration, inputs, bits) -> int:
    """Top-1 agreement of ONNX Runtime's int8 session with its float32 one, the model
    quantized by quantize_static on the same calibration images."""
    import tempfile
    import torch
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Batches(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": c} for c in calibration])

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory(prefix="kiln_agree_") as workdir:
        f32 = peers.onnx_export(model, [torch.zeros(shape)], os.path.join(workdir, "f32.onnx"),
                                input_names=["x"])
        qdq = os.path.join(workdir, "qdq.onnx")
        quantize_static(f32, qdq, Batches(), quant_format=QuantFormat.QDQ, per_channel=True,
                        reduce_range=bits == 7, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
        s32, s8 = (peers.onnxruntime_call(path, calibration[:1], THREADS).session
                   for path in (f32, qdq))
        return int(sum(s8.run(None, {"x": x})[0].argmax() == s32.run(None, {"x": x})[0].argmax()
                       for x in inputs))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--observers", nargs="+", default=["minmax", "percentile", "entropy"])
    p.add_argument("--weight-bits", nargs="+", type=int, default=[7, 8])
    p.add_argument("--inputs", type=int, default=256)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--skip", nargs="*", default=[],
                   help="ops or nodes kiln.quantize leaves in float32 (e.g. nn.dense)")
    p.add_argument("--no-onnxruntime", action="store_true",
                   help="leave out ONNX Runtime's quantize_static for comparison")
    args = p.parse_args(argv)

    import torch
    import kiln
    from kiln.frontend import from_pytorch
    from kiln.quantize import quantize
    from kiln.testing import models
    torch.set_num_threads(THREADS)
    model = models.resnet18(seed=0, width=args.width).eval()
    shape = (1, 3, args.size, args.size)
    mod, params = from_pytorch(model, (torch.zeros(shape),))
    name = mod["main"].params[0].name_hint
    calibration = [np.random.default_rng(k).standard_normal(shape).astype("float32")
                   for k in range(8)]
    inputs = [np.random.default_rng(1000 + k).standard_normal(shape).astype("float32")
              for k in range(args.inputs)]
    ex32 = kiln.runtime.GraphExecutor(kiln.compile(mod, params=params))
    logits = [_top(ex32, name, x) for x in inputs]
    top32 = np.array([v.argmax() for v in logits])
    margins = [float(np.sort(v)[-1] - np.sort(v)[-2]) for v in logits]
    spread = statistics.median(float(v.max() - v.min()) for v in logits)
    print(f"float32 ResNet-18 (width {args.width}, {args.size}x{args.size}): "
          f"{len(set(top32.tolist()))} distinct top-1 classes over {args.inputs} inputs, "
          f"median top-1/top-2 margin {statistics.median(margins):.3g} "
          f"(median logit range {spread:.3g})")
    rows = []
    for bits in args.weight_bits:
        for observer in args.observers:
            t0 = time.perf_counter()
            mod8, params8, report = quantize(mod, params, calibration, observer=observer,
                                             weight_bits=bits, skip=tuple(args.skip))
            seconds = time.perf_counter() - t0
            ex8 = kiln.runtime.GraphExecutor(kiln.compile(mod8, params=params8))
            agree = int(sum(_top(ex8, name, x).argmax() == t for x, t in zip(inputs, top32)))
            samples = peers.interleave({"int8": ex8.run, "float32": ex32.run}, rounds=3, runs=5)
            ms = {k: peers.median_ms(v) for k, v in samples.items()}
            worst = report.worst(1)[0]
            rows.append([observer, str(bits), f"{agree}/{args.inputs}",
                         f"{100 * agree / args.inputs:.1f}%", f"{worst.sqnr_db:.1f}",
                         f"{ms['int8']:.2f}", f"{ms['float32']:.2f}", f"{seconds:.1f}"])
            if observer == args.observers[0] and bits == args.weight_bits[0]:
                print(report)
        if not args.no_onnxruntime:
            agree = _onnxruntime_agreement(model, shape, calibration, inputs, bits)
            rows.append(["ORT quantize_static (minmax)", str(bits), f"{agree}/{args.inputs}",
                         f"{100 * agree / args.inputs:.1f}%", "", "", "", ""])
    print(peers.format_table(["observer", "weight bits", "top-1 agree", "%", "worst SQNR dB",
                              "int8 ms", "float32 ms", "quantize s"], rows))
    print("issue 25 bar: top-1 agreement >= 95% of 256 seeded inputs")


if __name__ == "__main__":
    main()

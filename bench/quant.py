"""int8 models: kiln's integer kernels against ONNX Runtime's int8 session and kiln float32
(issue 25), one process, interleaved.

    python bench/quant.py [--models resnet18 mobilenet_v2 bert] [--full-range] [--json out.json]

Each model (kiln.testing.models, seeded random weights) is exported to ONNX and quantized by
ONNX Runtime's `quantize_static` as the issue asks: QDQ format, per-channel int8 weights, uint8
activations, calibrated (min-max) on 4 seeded random inputs. Without VNNI the weights are 7-bit
(`reduce_range=True`), as ONNX Runtime's documentation recommends for such machines: its
`vpmaddubsw` kernels saturate pairs of full-range products (kiln's would have to sum them as
int16 pairs instead, exact but slower). --full-range quantizes to 8 bits anyway.

Systems: kiln int8 (the QDQ model through from_onnx + kiln.compile), ONNX Runtime int8 (the QDQ
model, all graph optimizations: its QLinear kernels), kiln float32 and ONNX Runtime float32
(the float model). Latency: median of rounds x runs samples, 2 threads each, a pause between
systems. Accuracy, on one seeded input (the issue's bar): max|kiln − ORT int8| against the
quantization error max|ORT int8 − ORT float32|; and against ONNX Runtime running the QDQ graph
as written (optimizations off: dequantize, float op, quantize), which is the ONNX definition.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

THREADS = peers.configure_threads(int(os.environ.get("BENCH_THREADS", "2")))

import numpy as np  # noqa: E402

MODELS = ("resnet18", "mobilenet_v2", "bert")
SYSTEMS = ("kiln int8", "ORT int8", "kiln float32", "ORT float32")
CALIBRATION_BATCHES = 4


def _inputs(model, seed):
    from kiln.testing import models
    return [x.numpy() for x in models.example_input(model, seed=seed)]


def quantized_model(name: str, workdir: str, full_range: bool) -> tuple:
    """(float ONNX path, QDQ ONNX path, model inputs, reduce_range) for one model."""
    import torch
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    from kiln.target import Target
    from kiln.testing import models
    torch.set_num_threads(THREADS)
    model = getattr(models, name)(seed=0).eval()
    inputs = _inputs(model, 0)
    names = [f"input{i}" for i in range(len(inputs))]
    f32 = peers.onnx_export(model, [torch.from_numpy(x) for x in inputs],
                            os.path.join(workdir, f"{name}.onnx"), input_names=names)

    class Calibration(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([dict(zip(names, _inputs(model, 100 + k)))
                                 for k in range(CALIBRATION_BATCHES)])

        def get_next(self):
            return next(self.batches, None)

    host = Target("llvm")
    reduce_range = not full_range and not (host.has_feature("avx512vnni")
                                           or host.has_feature("avxvnni"))
    qdq = os.path.join(workdir, f"{name}_qdq.onnx")
    quantize_static(f32, qdq, Calibration(), quant_format=QuantFormat.QDQ, per_channel=True,
                    reduce_range=reduce_range, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return f32, qdq, inputs, reduce_range


def _kiln(path: str, inputs: list):
    import onnx
    import kiln
    from kiln.frontend import from_onnx
    mod, params = from_onnx(onnx.load(path))
    return peers.kiln_executor(kiln.compile(mod, target="llvm", params=params), inputs)


def _output(call) -> np.ndarray:
    if hasattr(call, "binding"):
        call()
        return call.binding.copy_outputs_to_cpu()[0]
    call.run()
    return call.get_output(0).numpy()


def _unfused_onnxruntime(path: str, inputs: list) -> np.ndarray:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return sess.run(None, {m.name: x for m, x in zip(sess.get_inputs(), inputs)})[0]


def prepare(name: str, workdir: str, full_range: bool) -> tuple:
    f32, qdq, inputs, reduce_range = quantized_model(name, workdir, full_range)
    kiln8, kiln32 = _kiln(qdq, inputs), _kiln(f32, inputs)
    ort8 = peers.onnxruntime_call(qdq, inputs, THREADS)
    ort32 = peers.onnxruntime_call(f32, inputs, THREADS)
    out = {s: _output(c) for s, c in zip(SYSTEMS, (kiln8, ort8, kiln32, ort32))}
    reference = _unfused_onnxruntime(qdq, inputs)
    quant_error = float(np.abs(out["ORT int8"] - out["ORT float32"]).max())
    info = {"reduce_range": reduce_range,
            "quantization_error": quant_error,
            "kiln_vs_ort_int8": float(np.abs(out["kiln int8"] - out["ORT int8"]).max()),
            "kiln_vs_qdq_reference": float(np.abs(out["kiln int8"] - reference).max()),
            "ort_int8_vs_qdq_reference": float(np.abs(out["ORT int8"] - reference).max()),
            "kiln_float32_vs_ort_float32": float(np.abs(out["kiln float32"]
                                                        - out["ORT float32"]).max())}
    calls = {"kiln int8": kiln8.run, "ORT int8": ort8, "kiln float32": kiln32.run,
             "ORT float32": ort32}
    return calls, info


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--full-range", action="store_true",
                   help="8-bit weights even without VNNI (ONNX Runtime then saturates)")
    peers.add_sampling_args(p)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.runs = 2, 2
    peers.warn_if_busy()
    print(f"int8 vs float32, batch 1, {THREADS} threads each; median of "
          f"{args.rounds}x{args.runs} interleaved runs")
    results = {}
    with tempfile.TemporaryDirectory(prefix="kiln_quant_") as workdir:
        for name in args.models:
            calls, info = prepare(name, workdir, args.full_range)
            samples = peers.interleave(calls, args.rounds, args.runs)
            info["median_ms"] = {s: peers.median_ms(v) for s, v in samples.items()}
            results[name] = info
            print(f"  {name}: done", file=sys.stderr, flush=True)

    rows = []
    for name, r in results.items():
        ms = r["median_ms"]
        q = r["quantization_error"]
        rows.append([name, "7" if r["reduce_range"] else "8",
                     *(peers.fmt(ms[s]) for s in SYSTEMS),
                     peers.fmt(ms["ORT int8"] / ms["kiln int8"]),
                     peers.fmt(ms["kiln float32"] / ms["kiln int8"]),
                     peers.fmt(r["kiln_vs_ort_int8"] / q, ".3f"),
                     peers.fmt(r["ort_int8_vs_qdq_reference"] / q, ".3f"),
                     peers.fmt(r["kiln_vs_qdq_reference"] / q, ".3f")])
    print(peers.format_table(
        ["model", "weight bits", *(f"{s} ms" for s in SYSTEMS), "ORT8/kiln8", "kiln32/kiln8",
         "|kiln-ORT8|/qerr", "|ORT8-ref|/qerr", "|kiln-ref|/qerr"], rows))
    print("\nqerr = max|ORT int8 - ORT float32|; ref = ONNX Runtime running the QDQ graph as "
          "written (no fusion)")
    print("issue 25 bars:")
    for name, r in results.items():
        ms = r["median_ms"]
        fast = ms["kiln int8"] <= ms["ORT int8"]
        line = (f"  {name}: int8 kiln {'at least as fast as' if fast else 'SLOWER than'} "
                f"ORT int8; {ms['kiln float32'] / ms['kiln int8']:.2f}x float32 kiln; "
                f"|kiln-ORT8| {r['kiln_vs_ort_int8'] / r['quantization_error']:.3f} of the "
                f"quantization error (bar 0.25)")
        print(line)
    if args.json:
        peers.write_json(args.json, {"machine": peers.machine_info(THREADS),
                                     "rounds": args.rounds, "runs": args.runs,
                                     "models": results})
    return results


if __name__ == "__main__":
    main()

"""Op classes off the reference models' beaten track (issue 34): kiln against ONNX Runtime and
PyTorch in one process, with each kernel's share of this machine's measured peak.

    python bench/breadth.py [--cases G2 G32a ...] [--json out.json] [--quick]

Cases (float32, batch 1, 2 threads per system):
  G*  grouped convolutions that are not depthwise (groups 2-32, 4-128 channels per group:
      AlexNet's groups=2, ShuffleNet-v1's grouped 1x1 convs, ResNeXt-50 32x4d, RegNetX-400MF);
  M*  dense layers (nn.Linear 768 -> 2304, ViT-B/16's qkv projection) of M = 1, 7, 197, 384
      and 1000 rows;
  K11 AlexNet's first convolution (11x11, stride 4); LRN AlexNet's local response norm;
  P*  1x1 convolutions of ResNeXt-50 and RegNetX (7x7 and 56x56 outputs, one stride 2).

Each case is one op, imported from PyTorch and compiled with kiln.compile (weights bound as
constants); the systems run interleaved in rounds with a pause between systems (bench/peers.py).
"% peak" is kiln's GFLOPS over kiln.runtime.peak's measured float32 peak for the pool's threads;
"vs ORT" is ONNX Runtime's time / kiln's (>= 1: kiln at least as fast). The bar of issue 34:
kiln at least as fast as ONNX Runtime on each case, and >= 50% of peak on the compute-bound ones
(arithmetic intensity, FLOPs per byte of input + weight + output, of at least AI_BOUND).
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

import ops  # noqa: E402

# (H/W, in channels, out channels, kernel, stride, groups)
GROUPED = {
    "G2": (27, 96, 256, 5, 1, 2),          # AlexNet conv2 (48 -> 128 per group)
    "G2b": (28, 128, 128, 3, 1, 2),        # 64 per group
    "G3": (28, 240, 60, 1, 1, 3),          # ShuffleNet-v1 g=3, stage 2 1x1 (80 -> 20)
    "G4": (28, 128, 128, 3, 1, 4),         # 32 per group
    "G8": (28, 384, 96, 1, 1, 8),          # ShuffleNet-v1 g=8, stage 2 1x1 (48 -> 12)
    "G10": (14, 160, 160, 3, 1, 10),       # RegNetX-400MF stage 3 (group width 16)
    "G32a": (56, 128, 128, 3, 1, 32),      # ResNeXt-50 32x4d stage 1 (4 per group)
    "G32b": (14, 512, 512, 3, 1, 32),      # ResNeXt-50 32x4d stage 3 (16 per group)
}
# rows M of an nn.Linear(DENSE_K, DENSE_N)
DENSE = {"M1": 1, "M7": 7, "M197": 197, "M384": 384, "M1000": 1000}
DENSE_K, DENSE_N = 768, 2304
CONVS = {"K11": (224, 3, 64, 11, 4, 1),          # AlexNet conv1 (torchvision: padding 2)
         # 1x1 convolutions of ResNeXt-50 / RegNet: 7x7 outputs (no 2-d register tile fits
         # them well), a 56x56 one, and a stride-2 projection.
         "P7": (7, 1024, 2048, 1, 1, 1), "P7r": (7, 400, 400, 1, 1, 1),
         "P56": (56, 256, 128, 1, 1, 1), "P7s2": (14, 1024, 2048, 1, 2, 1)}
LRN = {"LRN": (96, 55)}                          # channels, size; LocalResponseNorm(5)
CASES = list(GROUPED) + list(DENSE) + list(CONVS) + list(LRN)
AI_BOUND = 10.0        # FLOPs per byte from which a case counts as compute bound here


def case_workload(key: str) -> dict:
    """The parameters of one conv case (bench/ops.py conv_workload) and its arithmetic
    intensity (FLOPs per byte of input, weight and output).

    Example:
        >>> case_workload("G32a")["groups"]
        32
    """
    size, cin, cout, kernel, stride, groups = {**GROUPED, **CONVS}[key]
    w = ops.conv_workload(size, cin, cout, kernel, stride, groups)
    if key == "K11":
        w["pad"], w["out"] = 2, (size + 4 - kernel) // stride + 1     # torchvision's AlexNet
        w["flops"] = 2.0 * w["out"] ** 2 * cout * cin * kernel * kernel
    moved = 4 * (cin * size * size + cout * (cin // groups) * kernel * kernel
                 + cout * w["out"] * w["out"])
    w["intensity"] = w["flops"] / moved
    return w


def module_case(key: str) -> tuple:
    """(torch module, input, info) of a dense or LRN case; info has the shape text, the FLOPs
    and the arithmetic intensity.

    Example:
        >>> module_case("M197")[2]["shape"]
        '197x768 -> 2304'
    """
    import torch
    torch.manual_seed(0)
    if key in DENSE:
        m = DENSE[key]
        flops = 2.0 * m * DENSE_K * DENSE_N
        moved = 4 * (m * DENSE_K + DENSE_K * DENSE_N + m * DENSE_N)
        return (torch.nn.Linear(DENSE_K, DENSE_N).eval(), torch.randn(m, DENSE_K),
                {"shape": f"{m}x{DENSE_K} -> {DENSE_N}", "flops": flops,
                 "intensity": flops / moved})
    channels, size = LRN[key]
    elements = channels * size * size
    flops = elements * (2 * 5 + 4.0)     # squares and window sum, scale, power, divide
    return (torch.nn.LocalResponseNorm(5).eval(), torch.randn(1, channels, size, size),
            {"shape": f"{channels}x{size}x{size} size 5", "flops": flops,
             "intensity": flops / (8 * elements)})


def _lrn_onnx(path: str, shape: tuple) -> str:
    """An ONNX model of one LRN node (size 5, torch's defaults): kiln imports AlexNet-style
    models' LRN from ONNX (torch.export spells it as a 3-D average pool)."""
    import onnx
    from onnx import TensorProto, helper
    node = helper.make_node("LRN", ["input0"], ["output"], size=5, alpha=1e-4, beta=0.75,
                            bias=1.0)
    graph = helper.make_graph([node], "lrn",
                              [helper.make_tensor_value_info("input0", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8        # what ONNX Runtime 1.31 reads
    onnx.save(model, path)
    return path


def _kiln_from_onnx(path: str, x) -> tuple:
    import time

    import kiln
    from kiln.frontend import from_onnx
    t0 = time.perf_counter()
    mod, params = from_onnx(path)
    t1 = time.perf_counter()
    lib = kiln.compile(mod, target="llvm", params=params)
    return peers.kiln_executor(lib, [x.numpy()]), t1 - t0, time.perf_counter() - t1


def prepare_module(key: str, workdir: str) -> tuple:
    """Every system's call for a dense or LRN case, and info (compile time, agreement)."""
    import torch
    module, x, info = module_case(key)
    info["errors"] = {}
    path = os.path.join(workdir, f"{key}.onnx")
    if key in LRN:
        ex, import_s, compile_s = _kiln_from_onnx(_lrn_onnx(path, tuple(x.shape)), x)
    else:
        ex, _, import_s, compile_s = peers.kiln_compile(module, (x,))
        peers.onnx_export(module, (x,), path)
    ex.run()
    with torch.inference_mode():
        ref = module(x).numpy()
    info.update(import_s=import_s, compile_s=compile_s, max_rel_err=float(
        np.abs(ex.get_output(0).numpy() - ref).max() / np.abs(ref).max()))
    calls = {"kiln": ex.run, "torch": peers.torch_eager(module, (x,))}
    try:
        calls["onnxruntime"] = peers.onnxruntime_call(path, [x.numpy()], THREADS)
    except Exception as exc:  # noqa: BLE001 - a failing peer is reported, not fatal
        info["errors"]["onnxruntime"] = peers.short_error(exc)
    return calls, info


def _shape_text(key: str, r: dict) -> str:
    if "shape" in r:
        return r["shape"]
    return (f"{r['size']}x{r['size']} {r['cin']}->{r['cout']} k{r['kernel']} s{r['stride']}"
            + (f" g{r['groups']}" if r["groups"] > 1 else ""))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", default=CASES, choices=CASES, metavar="KEY",
                   help=f"subset of {' '.join(CASES)} (default: all)")
    peers.add_sampling_args(p)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.runs = 2, 2
    import torch

    import kiln
    from kiln.runtime.peak import peak_gflops
    torch.set_num_threads(THREADS)
    peers.warn_if_busy()
    peak = peak_gflops(refresh=True)     # this VM's speed drifts: measure it now
    print(f"op classes, float32, batch 1, {THREADS} threads each; median of "
          f"{args.rounds}x{args.runs} interleaved samples; peak "
          f"{peers.fmt(peak, '.1f')} GFLOPS (kiln.runtime.peak, {kiln.runtime.num_threads()} "
          f"threads)")
    results = {}
    with tempfile.TemporaryDirectory(prefix="kiln_breadth_") as workdir:
        for key in args.cases:
            if key in DENSE or key in LRN:
                calls, info = prepare_module(key, workdir)
            else:
                calls, info = ops.prepare_conv(key, case_workload(key), workdir)
            peers.time_case(calls, info, args)
            info["peak_fraction"] = info["gflops"]["kiln"] / peak if peak else None
            results[key] = info
            print(f"  {key}: kiln {info['gflops']['kiln']:.1f} GFLOPS (max |err|/max|ref| = "
                  f"{info['max_rel_err']:.1e})", file=sys.stderr, flush=True)

    headers = ["case", "shape", "AI", "kiln us", "kiln GF/s", "% peak", "torch GF/s",
               "torch_cl GF/s", "ORT GF/s", "vs ORT", "compile s"]
    rows = []
    for key, r in results.items():
        g, ms = r["gflops"], r["median_ms"]
        vs_ort = ms["onnxruntime"] / ms["kiln"] if "onnxruntime" in ms else None
        rows.append([key, _shape_text(key, r), f"{r['intensity']:.0f}",
                     f"{ms['kiln'] * 1e3:.0f}", f"{g['kiln']:.1f}",
                     peers.fmt(None if r["peak_fraction"] is None else 100 * r["peak_fraction"],
                               ".0f"),
                     peers.fmt(g.get("torch"), ".1f"), peers.fmt(g.get("torch_cl"), ".1f"),
                     peers.fmt(g.get("onnxruntime"), ".1f"),
                     peers.fmt(vs_ort) + ("x" if vs_ort else ""), f"{r['compile_s']:.2f}"])
    print(peers.format_table(headers, rows))
    ratios = [r["median_ms"]["onnxruntime"] / r["median_ms"]["kiln"]
              for r in results.values() if "onnxruntime" in r["median_ms"]]
    wins = sum(1 for x in ratios if x >= 1)
    bound = [k for k, r in results.items() if r["intensity"] >= AI_BOUND]
    at_half = [k for k in bound if (results[k]["peak_fraction"] or 0) >= 0.5]
    geomean = float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")
    print(f"\nkiln at least as fast as ONNX Runtime on {wins} of {len(ratios)} cases "
          f"(geometric mean ORT/kiln {geomean:.2f}); >= 50% of peak on {len(at_half)} of the "
          f"{len(bound)} compute-bound ones (AI >= {AI_BOUND:.0f} FLOP/byte)")
    for key, r in results.items():
        for s, e in r["errors"].items():
            print(f"  note: {key} / {s} unavailable: {e}")
    print("\n".join(peers.spread_notes(results)))
    if args.json:
        peers.write_json(args.json, {"machine": peers.machine_info(THREADS), "peak_gflops": peak,
                                     "rounds": args.rounds, "runs": args.runs,
                                     "cases": results, "wins": wins, "geomean": geomean})
    return results


if __name__ == "__main__":
    main()

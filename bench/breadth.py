"""Op classes off the reference models' beaten track (issue 34): kiln against ONNX Runtime and
PyTorch in one process, with each kernel's share of this machine's measured peak.

    python bench/breadth.py [--cases G2 G32a ...] [--json out.json] [--quick]

Cases (float32, batch 1, 2 threads per system):
  grouped convolutions that are not depthwise (groups 2-32, 4-128 channels per group: AlexNet's
  groups=2, ShuffleNet-v1's grouped 1x1 convs, ResNeXt-50 32x4d, RegNetX-400MF).

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
CASES = list(GROUPED)
AI_BOUND = 10.0        # FLOPs per byte from which a case counts as compute bound here


def case_workload(key: str) -> dict:
    """The parameters of one case (bench/ops.py conv_workload) and its arithmetic intensity.

    Example:
        >>> case_workload("G32a")["groups"]
        32
    """
    size, cin, cout, kernel, stride, groups = GROUPED[key]
    w = ops.conv_workload(size, cin, cout, kernel, stride, groups)
    moved = 4 * (cin * size * size + cout * (cin // groups) * kernel * kernel
                 + cout * w["out"] * w["out"])
    w["intensity"] = w["flops"] / moved
    return w


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", default=CASES, choices=CASES, metavar="KEY",
                   help=f"subset of {' '.join(CASES)} (default: all)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=5, help="timed samples per system per round")
    p.add_argument("--quick", action="store_true", help="2 rounds x 2 samples, for smoke testing")
    p.add_argument("--json", help="write the results to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.runs = 2, 2
    import torch

    import kiln
    from kiln.runtime.peak import peak_gflops
    torch.set_num_threads(THREADS)
    peers.warn_if_busy()
    peak = peak_gflops()
    print(f"op classes, float32, batch 1, {THREADS} threads each; median of "
          f"{args.rounds}x{args.runs} interleaved samples; peak "
          f"{peers.fmt(peak, '.1f')} GFLOPS (kiln.runtime.peak, {kiln.runtime.num_threads()} "
          f"threads)")
    results = {}
    with tempfile.TemporaryDirectory(prefix="kiln_breadth_") as workdir:
        for key in args.cases:
            w = case_workload(key)
            calls, info = ops.prepare_conv(key, w, workdir)
            samples = peers.interleave(calls, args.rounds, args.runs,
                                       min_sample_s=1e-3 if args.quick else 2e-3)
            info["median_ms"] = {s: peers.median_ms(v) for s, v in samples.items()}
            info["min_ms"] = {s: min(v) * 1e3 for s, v in samples.items()}
            info["gflops"] = {s: info["flops"] / (ms * 1e-3) / 1e9
                              for s, ms in info["median_ms"].items()}
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
        rows.append([key, f"{r['size']}x{r['size']} {r['cin']}->{r['cout']} k{r['kernel']} "
                          f"s{r['stride']} g{r['groups']}", f"{r['intensity']:.0f}",
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

"""Single operators: the TVM paper's conv2d C1-C12 and depthwise conv2d D1-D9 workloads (Table 2),
kiln against PyTorch (oneDNN, NCHW and channels_last) and ONNX Runtime (issue 4, item 5).

    python bench/ops.py [--workloads C1 D3 ...] [--json out.json] [--quick] [--tuning-log LOG]

float32, batch 1, "SAME" padding (kernel // 2 on each side, which gives ceil(H / stride) outputs
for every workload here), no bias, 2 threads per system. kiln compiles each workload as a one-op
graph (an nn.Conv2d imported with from_pytorch, weights bound as constants) with kiln.compile.
All systems run interleaved in rounds with a pause between systems; each sample times enough
calls to last >= 2 ms (the calls' fixed overheads are part of every system's figure). The ratio
is the best peer's time / kiln's time (>= 1: kiln at least as fast as every peer).

With --tuning-log (from bench/tune_models.py --ops ...), "kiln tuned" (compiled under
apply_history_best) runs next to the untuned default, and the ratio is the tuned one's (issue 5:
at least as fast as the best peer on 18 of 21, geometric-mean ratio >= 1.1).
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

# (H/W, in channels, out channels, kernel, stride)
CONV = {"C1": (224, 3, 64, 7, 2), "C2": (56, 64, 64, 3, 1), "C3": (56, 64, 64, 1, 1),
        "C4": (56, 64, 128, 3, 2), "C5": (56, 64, 128, 1, 2), "C6": (28, 128, 128, 3, 1),
        "C7": (28, 128, 256, 3, 2), "C8": (28, 128, 256, 1, 2), "C9": (14, 256, 256, 3, 1),
        "C10": (14, 256, 512, 3, 2), "C11": (14, 256, 512, 1, 2), "C12": (7, 512, 512, 3, 1)}
# (H/W, channels, kernel, stride)
DEPTHWISE = {"D1": (112, 32, 3, 1), "D2": (112, 64, 3, 2), "D3": (56, 128, 3, 1),
             "D4": (56, 128, 3, 2), "D5": (28, 256, 3, 1), "D6": (28, 256, 3, 2),
             "D7": (14, 512, 3, 1), "D8": (14, 512, 3, 2), "D9": (7, 1024, 3, 1)}
WORKLOADS = list(CONV) + list(DEPTHWISE)
PEERS = ("torch", "torch_cl", "onnxruntime")
SYSTEMS = ("kiln", "kiln tuned") + PEERS


def workload(key: str) -> dict:
    """The conv parameters of one workload: size, cin, cout, kernel, stride, groups, pad.

    Example:
        >>> workload("D9")["groups"]
        1024
    """
    if key in CONV:
        size, cin, cout, kernel, stride = CONV[key]
        groups = 1
    else:
        size, cin, kernel, stride = DEPTHWISE[key]
        cout = groups = cin
    w = conv_workload(size, cin, cout, kernel, stride, groups)
    assert w["out"] == -(-size // stride), key      # SAME: ceil(H / stride)
    return w


def conv_workload(size: int, cin: int, cout: int, kernel: int, stride: int,
                  groups: int = 1) -> dict:
    """A square conv's parameters with padding kernel // 2: size, cin, cout, kernel, stride,
    groups, pad, out (output size) and flops (multiply-adds x 2).

    Example:
        >>> conv_workload(56, 128, 128, 3, 1, groups=32)["flops"]
        28901376.0
    """
    pad = kernel // 2
    out = (size + 2 * pad - kernel) // stride + 1
    return {"size": size, "cin": cin, "cout": cout, "kernel": kernel, "stride": stride,
            "groups": groups, "pad": pad, "out": out,
            "flops": 2.0 * out * out * cout * (cin // groups) * kernel * kernel}


def conv_module(key: str):
    """The torch conv of one workload (seeded weights, no bias) and its input.

    Example:
        >>> conv, x = conv_module("C6")
        >>> tuple(x.shape)
        (1, 128, 28, 28)
    """
    return conv_module_of(workload(key))


def conv_module_of(w: dict):
    """The torch conv of workload parameters `w` (conv_workload; seeded weights, no bias) and
    its input.

    Example:
        >>> conv, x = conv_module_of(conv_workload(28, 64, 64, 3, 1, groups=4))
        >>> conv.groups
        4
    """
    import torch
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(w["cin"], w["cout"], w["kernel"], w["stride"], w["pad"],
                           groups=w["groups"], bias=False).eval()
    return conv, torch.randn(1, w["cin"], w["size"], w["size"])


def prepare(key: str, workdir: str, tuning_log: str | None = None) -> tuple:
    """Every system's call for one workload, and info (compile time, agreement, errors)."""
    return prepare_conv(key, workload(key), workdir, tuning_log)


def prepare_conv(key: str, w: dict, workdir: str, tuning_log: str | None = None) -> tuple:
    """Every system's call for the conv of workload parameters `w` (named `key`), and info
    (compile time, agreement, errors)."""
    import torch
    import torch.nn.functional as F
    conv, x = conv_module_of(w)
    info = {**w, "errors": {}}
    calls = {}

    ex, _, import_s, compile_s = peers.kiln_compile(conv, (x,))
    ex.run()
    with torch.inference_mode():
        ref = conv(x).numpy()
    info.update(import_s=import_s, compile_s=compile_s,
                max_rel_err=float(np.abs(ex.get_output(0).numpy() - ref).max() / np.abs(ref).max()))
    calls["kiln"] = ex.run
    if tuning_log is not None:
        tex, _, _, tcompile_s = peers.kiln_compile(conv, (x,), tuning_log)
        tex.run()
        info.update(tuned_compile_s=tcompile_s, tuned_max_rel_err=float(
            np.abs(tex.get_output(0).numpy() - ref).max() / np.abs(ref).max()))
        calls["kiln tuned"] = tex.run

    weight = conv.weight.detach()
    stride, pad, groups = w["stride"], w["pad"], w["groups"]

    def nchw():
        with torch.inference_mode():
            return F.conv2d(x, weight, None, stride, pad, 1, groups)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    w_cl = weight.contiguous(memory_format=torch.channels_last)

    def channels_last():
        with torch.inference_mode():
            return F.conv2d(x_cl, w_cl, None, stride, pad, 1, groups)
    calls["torch"], calls["torch_cl"] = nchw, channels_last

    try:
        path = peers.onnx_export(conv, (x,), os.path.join(workdir, f"{key}.onnx"))
        calls["onnxruntime"] = peers.onnxruntime_call(path, [x.numpy()], THREADS)
    except Exception as exc:  # noqa: BLE001 - a failing peer is reported, not fatal
        info["errors"]["onnxruntime"] = peers.short_error(exc)
    return calls, info


def _kiln(r: dict) -> float:
    """kiln's GFLOPS for the ratio: the tuned build's when there is one."""
    return r["gflops"].get("kiln tuned") or r["gflops"]["kiln"]


def _row(key: str, r: dict, systems) -> list:
    g = r["gflops"]
    best = max((g[s] for s in PEERS if g.get(s)), default=None)
    ratio = _kiln(r) / best if best else None
    shape = (f"{r['size']}x{r['size']} {r['cin']}->{r['cout']} k{r['kernel']} s{r['stride']}"
             if r["groups"] == 1 else f"{r['size']}x{r['size']} c{r['cin']} k{r['kernel']} s{r['stride']}")
    return ([key, shape, peers.fmt(r["median_ms"]["kiln"] * 1e3, ".0f")]
            + [peers.fmt(g.get(s), ".1f") for s in systems]
            + [peers.fmt(ratio) + ("x" if ratio else ""), peers.fmt(r["compile_s"], ".2f")])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", default=WORKLOADS, choices=WORKLOADS, metavar="KEY",
                   help="subset of C1..C12 D1..D9 (default: all)")
    peers.add_sampling_args(p)
    p.add_argument("--tuning-log", help="also run kiln compiled with this log's best configs")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.runs = 2, 2
    import torch

    import kiln
    torch.set_num_threads(THREADS)
    peers.warn_if_busy()
    print(f"conv2d / depthwise conv2d, float32, batch 1, SAME, {THREADS} threads each (kiln pool: "
          f"{kiln.runtime.num_threads()}); median of {args.rounds}x{args.runs} interleaved samples")
    results = {}
    with tempfile.TemporaryDirectory(prefix="kiln_ops_") as workdir:
        for key in args.workloads:
            calls, info = prepare(key, workdir, args.tuning_log)
            peers.time_case(calls, info, args)
            results[key] = info
            print(f"  {key}: kiln {info['gflops']['kiln']:.1f} GFLOPS (max |err|/max|ref| = "
                  f"{info['max_rel_err']:.1e})", file=sys.stderr, flush=True)

    tuned = args.tuning_log is not None
    systems = SYSTEMS if tuned else tuple(s for s in SYSTEMS if s != "kiln tuned")
    headers = (["op", "shape", "kiln us", "kiln GF/s"] + (["tuned GF/s"] if tuned else [])
               + ["torch GF/s", "torch_cl GF/s", "ORT GF/s", "kiln/best", "compile s"])
    print(peers.format_table(headers, [_row(k, r, systems) for k, r in results.items()]))
    ratios = [_kiln(r) / max(r["gflops"].get(s, 0) for s in PEERS) for r in results.values()]
    wins = sum(1 for x in ratios if x >= 1)
    geomean = float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")
    what = "tuned kiln" if tuned else "kiln"
    bar = "issue 5 bar: 18 of 21, geomean >= 1.1" if tuned else "issue 4 bar: 12 of 21"
    print(f"\n{what} at least as fast as the best peer on {wins} of {len(results)} workloads, "
          f"geometric-mean kiln/best {geomean:.2f} ({bar}); torch_cl = PyTorch channels_last")
    if tuned:
        faster = sum(1 for r in results.values()
                     if r["gflops"]["kiln tuned"] > r["gflops"]["kiln"])
        print(f"tuned faster than untuned on {faster} of {len(results)}")
    for key, r in results.items():
        for s, e in r["errors"].items():
            print(f"  note: {key} / {s} unavailable: {e}")
    print("\n".join(peers.spread_notes(results)))
    if args.json:
        peers.write_json(args.json, {"machine": peers.machine_info(THREADS), "rounds": args.rounds,
                                     "runs": args.runs, "workloads": results,
                                     "wins": wins, "geomean": geomean})
    return results


if __name__ == "__main__":
    main()

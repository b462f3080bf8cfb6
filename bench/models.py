"""Whole models: kiln against PyTorch eager, torch.compile and ONNX Runtime (issue 4, item 5).

    python bench/models.py [--models resnet18 mobilenet_v2 bert] [--json out.json] [--quick]
                           [--no-memory] [--no-torch-compile] [--tuning-log tune.jsonl]

Besides the three reference models (the default), --models takes the grouped-convolution
architectures of kiln.testing.grouped_models (issue 34): resnext50_32x4d, shufflenet_v1 (groups
3), shufflenet_v2, regnet_x_400mf; and vit_b_16 (kiln.testing.vit).

With --tuning-log (a log from bench/tune_models.py or kiln.autotvm.tune_model), "kiln tuned"
(compiled under apply_history_best) runs next to the untuned default "kiln", in the same rounds.

float32, batch 1 (images 1x3x224x224; BERT-base, 12 layers, seq 128), 2 threads per system. All
systems run in this one process, interleaved in rounds with a pause between systems; latency is
the median of rounds * runs samples (>= 20 unless --quick). Ratios are peer ms / kiln ms (> 1:
kiln is faster). Compile time is kiln's import (from_pytorch) + kiln.compile.

Peak memory (RSS, VmHWM) is measured per system in a fresh process that loads only what that
system needs to run the model (kiln: the exported library; ONNX Runtime: the .onnx file; PyTorch:
the torch.nn model) and runs it a few times.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

THREADS = peers.configure_threads(int(os.environ.get("BENCH_THREADS", "2")))

import numpy as np  # noqa: E402

SYSTEMS = ("kiln", "kiln tuned", "torch", "torch.compile", "onnxruntime")
MODELS = ("resnet18", "mobilenet_v2", "bert")
GROUPED_MODELS = ("resnext50_32x4d", "shufflenet_v1", "shufflenet_v2", "regnet_x_400mf")
EXTRA_MODELS = GROUPED_MODELS + ("vit_b_16",)
ORT_BAR = 1.3      # issue 4: kiln within 1.3x of ONNX Runtime's latency


def _build(name: str):
    import torch
    from kiln.testing import grouped_models, models, vit
    torch.set_num_threads(THREADS)
    where = grouped_models if name in GROUPED_MODELS else vit if name == "vit_b_16" else models
    model = getattr(where, name)(seed=0)
    return model, models.example_input(model)


def _rel_err(out, ref) -> float:
    return float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))


def prepare(name: str, workdir: str, with_compile: bool, tuning_log: str | None = None) -> tuple:
    """Build every system for one model. Returns ({system: call}, info dict with compile time,
    errors and kiln's agreement with PyTorch)."""
    model, inputs = _build(name)
    arrays = [x.numpy() for x in inputs]
    info = {"errors": {}}
    calls = {}

    ex, lib, import_s, compile_s = peers.kiln_compile(model, inputs)
    ex.run()
    torch_out = peers.torch_eager(model, inputs)()
    ref = (torch_out[0] if isinstance(torch_out, tuple) else torch_out).numpy()
    info.update(import_s=import_s, compile_s=compile_s, kernel_calls=len(lib.graph["kernels"]),
                max_rel_err=_rel_err(ex.get_output(0).numpy(), ref))
    calls["kiln"] = ex.run
    lib.export_library(os.path.join(workdir, f"{name}.so"))
    if tuning_log is not None:
        tex, tlib, _, tcompile_s = peers.kiln_compile(model, inputs, tuning_log)
        tex.run()
        info.update(tuned_compile_s=tcompile_s,
                    tuned_max_rel_err=_rel_err(tex.get_output(0).numpy(), ref))
        calls["kiln tuned"] = tex.run
        tlib.export_library(os.path.join(workdir, f"{name}.tuned.so"))
    for i, a in enumerate(arrays):
        np.save(os.path.join(workdir, f"{name}.input{i}.npy"), a)

    calls["torch"] = peers.torch_eager(model, inputs)
    if with_compile:
        try:
            calls["torch.compile"], info["torch_compile_s"] = peers.torch_compiled(model, inputs)
        except Exception as exc:  # noqa: BLE001 - torch.compile may not work here: report it
            info["errors"]["torch.compile"] = peers.short_error(exc)
    else:
        info["errors"]["torch.compile"] = "skipped (--no-torch-compile)"

    try:
        path = peers.onnx_export(model, inputs, os.path.join(workdir, f"{name}.onnx"))
        calls["onnxruntime"] = peers.onnxruntime_call(path, arrays, THREADS)
    except Exception as exc:  # noqa: BLE001
        info["errors"]["onnxruntime"] = peers.short_error(exc)
    return calls, info


# ----------------------------------------------------------------------- memory (child side)
def child(system: str, name: str, workdir: str, runs: int) -> dict:
    """Run one system on one model in this fresh process; report its peak RSS."""
    arrays = []
    i = 0
    while os.path.exists(p := os.path.join(workdir, f"{name}.input{i}.npy")):
        arrays.append(np.load(p))
        i += 1
    if system in ("kiln", "kiln tuned"):
        import kiln
        so = os.path.join(workdir, f"{name}.tuned.so" if system == "kiln tuned" else f"{name}.so")
        call = peers.kiln_executor(kiln.runtime.load_module(so), arrays).run
    elif system == "onnxruntime":
        call = peers.onnxruntime_call(os.path.join(workdir, f"{name}.onnx"), arrays, THREADS)
    else:
        model, inputs = _build(name)
        call = (peers.torch_eager(model, inputs) if system == "torch"
                else peers.torch_compiled(model, inputs)[0])
    samples = peers.interleave({system: call}, rounds=1, runs=runs, pause_s=0)
    return {"system": system, "model": name, "peak_rss_mb": peers.peak_rss_mb(),
            "median_ms": peers.median_ms(samples[system])}


def measure_memory(name: str, workdir: str, systems: list, runs: int) -> dict:
    """Peak RSS in MiB per system (None with the error where the child failed)."""
    out, errors = {}, {}
    for system in systems:
        r = peers.run_child([os.path.abspath(__file__), "--child", system, "--models", name,
                             "--workdir", workdir, "--runs", str(runs)])
        out[system] = r.get("peak_rss_mb")
        if "error" in r:
            errors[system] = r["error"]
    return {"peak_rss_mb": out, "errors": errors}


# ----------------------------------------------------------------------- report
PEERS = ("torch", "torch.compile", "onnxruntime")


def _row(name: str, r: dict, tuned: bool) -> list:
    """Latencies, then peers' ratios to kiln (tuned kiln when there is a log), untuned/tuned."""
    ms = r["median_ms"]
    k = ms.get("kiln tuned") if tuned else ms.get("kiln")
    shown = SYSTEMS if tuned else tuple(s for s in SYSTEMS if s != "kiln tuned")
    cells = [name] + [peers.fmt(ms.get(s)) for s in shown]
    cells += [peers.fmt(ms[s] / k if ms.get(s) and k else None) + ("x" if ms.get(s) else "")
              for s in PEERS]
    if tuned:
        cells.append(peers.fmt(ms["kiln"] / k if k else None) + "x")
    cells.append(peers.fmt(r["import_s"] + r["compile_s"], ".1f"))
    return cells


def _verdicts(results: dict) -> list:
    lines = []
    for name, r in results.items():
        ms, k = r["median_ms"], r["median_ms"]["kiln"]
        parts = []
        for s in ("torch", "torch.compile"):
            if ms.get(s):
                parts.append(f"faster than {s}: {'yes' if k < ms[s] else 'NO'}")
        if ms.get("onnxruntime"):
            ratio = k / ms["onnxruntime"]
            parts.append(f"kiln/ORT latency {ratio:.2f} (bar {ORT_BAR}): "
                         f"{'yes' if ratio <= ORT_BAR else 'NO'}")
        mem = r.get("memory", {}).get("peak_rss_mb", {})
        if mem.get("kiln") and mem.get("onnxruntime"):
            parts.append(f"RSS <= ORT's: {'yes' if mem['kiln'] <= mem['onnxruntime'] else 'NO'}")
        lines.append(f"  {name}: " + "; ".join(parts))
        t = ms.get("kiln tuned")
        if t:
            tparts = [f"tuned faster than untuned: {'yes' if t < k else 'NO'} ({k / t:.3f}x)"]
            if ms.get("onnxruntime"):
                tparts.append(f"tuned at least as fast as ORT: "
                              f"{'yes' if t <= ms['onnxruntime'] else 'NO'} "
                              f"({ms['onnxruntime'] / t:.2f}x)")
            lines.append(f"  {name} (issue 5): " + "; ".join(tparts))
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS),
                   choices=MODELS + EXTRA_MODELS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=5, help="timed runs per system per round")
    p.add_argument("--quick", action="store_true", help="2 rounds x 2 runs, for smoke testing")
    p.add_argument("--no-memory", action="store_true", help="skip the per-process RSS column")
    p.add_argument("--no-torch-compile", action="store_true")
    p.add_argument("--json", help="write the results to this file")
    p.add_argument("--tuning-log", help="also run kiln compiled with this log's best configs")
    p.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.models[0], args.workdir, args.runs)))
        return None
    if args.quick:
        args.rounds, args.runs = 2, 2
    if args.rounds * args.runs < 20 and not args.quick:
        print(f"warning: {args.rounds * args.runs} samples per system; the issue asks for >= 20",
              file=sys.stderr)

    import kiln
    peers.warn_if_busy()
    print(f"kiln vs peers, float32, batch 1, {THREADS} threads each (kiln pool: "
          f"{kiln.runtime.num_threads()}); median of {args.rounds}x{args.runs} interleaved runs")
    results = {}
    with tempfile.TemporaryDirectory(prefix="kiln_bench_") as workdir:
        for name in args.models:
            calls, info = prepare(name, workdir, not args.no_torch_compile, args.tuning_log)
            samples = peers.interleave(calls, args.rounds, args.runs)
            info["median_ms"] = {s: peers.median_ms(v) for s, v in samples.items()}
            info["min_ms"] = {s: min(v) * 1e3 for s, v in samples.items()}
            info["samples_ms"] = {s: [t * 1e3 for t in v] for s, v in samples.items()}
            if not args.no_memory:
                mem_systems = [s for s in SYSTEMS if s in calls]
                info["memory"] = measure_memory(name, workdir, mem_systems, 3 if args.quick else 10)
            results[name] = info
            print(f"  {name}: done (kiln max |err|/max|ref| = {info['max_rel_err']:.1e})",
                  file=sys.stderr, flush=True)

    tuned = args.tuning_log is not None
    kiln_ms = ["kiln ms", "kiln tuned ms"] if tuned else ["kiln ms"]
    ref = "tuned" if tuned else "kiln"
    headers = ["model", *kiln_ms, "torch ms", "compile ms", "ORT ms", f"torch/{ref}",
               f"compile/{ref}", f"ORT/{ref}", *(["untuned/tuned"] if tuned else []),
               "kiln import+compile s"]
    print(peers.format_table(headers, [_row(n, r, tuned) for n, r in results.items()]))
    if not args.no_memory:
        print("\npeak RSS (MiB), one fresh process per system:")
        print(peers.format_table(["model", *SYSTEMS], [
            [n] + [peers.fmt(r["memory"]["peak_rss_mb"].get(s), ".0f") for s in SYSTEMS]
            for n, r in results.items()]))
    print("\nissue 4 bars (untuned kiln)" + (" and issue 5 bars (tuned):" if tuned else ":"))
    print("\n".join(_verdicts(results)))
    notes = [(n, s, e) for n, r in results.items()
             for s, e in {**r["errors"], **r.get("memory", {}).get("errors", {})}.items()]
    for n, s, e in notes:
        print(f"  note: {n} / {s} unavailable: {e}")
    print("\n".join(peers.spread_notes(results)))
    if args.json:
        peers.write_json(args.json, {"machine": peers.machine_info(THREADS),
                                     "rounds": args.rounds, "runs": args.runs, "models": results})
    return results


if __name__ == "__main__":
    main()

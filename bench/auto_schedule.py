"""The auto-scheduler against kiln's default schedules and its hand-written templates (issue 30).

    python bench/auto_schedule.py ops [--workloads C2 C6 D3 ...] [--trials 256]
        [--template-log bench/logs/ops-epyc.jsonl] [--auto-log auto_ops.jsonl] [--json out]
    python bench/auto_schedule.py model bert|mobilenet_v2|layer [--trials 64]
        [--auto-log auto_bert.jsonl] [--template-log LOG] [--json out]

ops: each of bench/ops.py's conv2d / depthwise workloads (the paper's 21) is auto-scheduled
(every kernel of its one-op graph, --trials per kernel on average, through the task
scheduler; a log holding them already is resumed, nothing measured twice), then compiled three
times -- untuned, under the template-tuned log (bench/tune_models.py --ops), under the auto
log -- and the three are timed interleaved in one process. The ratio is template time / auto
time (>= 0.95 on 18 of 21 with a geometric mean >= 1 is the issue's bar).

model: a whole model (BERT-base, MobileNet-V2, or "layer": one 256-wide transformer encoder
layer, for a quick run) is auto-scheduled the same way and timed untuned / template-tuned
(when a log is given) / auto-tuned, interleaved; then each kernel's default and best
auto-scheduled times from the log (measured alone, by the tuner) are listed, the ones without
templates marked.

Every figure is a median of interleaved samples on this machine's CPU, 2 threads per system.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

THREADS = peers.configure_threads(int(os.environ.get("BENCH_THREADS", "2")))

import numpy as np  # noqa: E402

MODELS = ("bert", "mobilenet_v2", "layer")


def _model(name):
    import torch

    from kiln.testing import models
    if name == "layer":
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, activation="gelu",
                                                 batch_first=True).eval()
        return layer, (torch.randn(1, 128, 256),)
    model = getattr(models, name)(seed=0)
    return model, models.example_input(model)


def auto_tune(model, inputs, log: str, trials: int, seed: int = 0, warm: bool = False):
    """Auto-schedule every kernel of a torch model into `log` (resumed); returns the tasks
    with their tuners' default and best costs."""
    from kiln.autotvm import LocalRunner, measure_option
    from kiln.autotvm.tune_model import flush_for
    from kiln.auto_schedule import TaskScheduler, extract_search_tasks
    from kiln.frontend import from_pytorch
    mod, params = from_pytorch(model, inputs)
    tasks = extract_search_tasks(mod, params)
    option = measure_option(runner=LocalRunner(
        enable_cpu_cache_flush=False if warm else flush_for(params), check_correctness=True))
    sched = TaskScheduler(tasks, seed=seed)
    sched.tune(trials * len(tasks), measure_option=option, log_file=log, progress=sys.stderr)
    for task, tuner in zip(tasks, sched.tuners):
        default = tuner._costs.get(0)
        task.default_s = statistics.median(default) if default else math.nan
        task.best_s = tuner.best_cost
    return tasks


def _time(calls: dict, flops, args) -> dict:
    info = {"flops": flops}
    peers.time_case(calls, info, args)
    return info


def _compiled(model, inputs, log):
    ex, _, _, compile_s = peers.kiln_compile(model, inputs, log)
    return ex


def _check(ex, ref, what):
    ex.run()
    got = ex.get_output(0).numpy()
    err = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))
    if err > 1e-4:
        raise SystemExit(f"{what}: max |err| / max |ref| = {err:.1e} (> 1e-4)")
    return err


def run_ops(args) -> dict:
    import torch

    import ops
    results = {}
    for key in args.workloads:
        conv, x = ops.conv_module(key)
        print(f"\n{key}: auto-scheduling", file=sys.stderr, flush=True)
        auto_tune(conv, (x,), args.auto_log, args.trials, warm=True)
        with torch.inference_mode():
            ref = conv(x).numpy()
        calls = {}
        for label, log in (("untuned", None), ("template", args.template_log),
                           ("auto", args.auto_log)):
            if label == "template" and not log:
                continue
            ex = _compiled(conv, (x,), log)
            _check(ex, ref, f"{key} {label}")
            calls[label] = ex.run
        info = _time(calls, ops.workload(key)["flops"], args)
        results[key] = info
        ms = info["median_ms"]
        ratio = ms["template"] / ms["auto"] if "template" in ms else None
        print(f"  {key}: untuned {ms['untuned'] * 1e3:.0f} us, template "
              f"{peers.fmt(ms.get('template', None) and ms['template'] * 1e3, '.0f')} us, auto "
              f"{ms['auto'] * 1e3:.0f} us, template/auto {peers.fmt(ratio)}", flush=True)
    ratios = [r["median_ms"]["template"] / r["median_ms"]["auto"] for r in results.values()
              if "template" in r["median_ms"]]
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ntemplate/auto: >= 0.95 on {sum(r >= 0.95 for r in ratios)} of {len(ratios)}, "
              f"geometric mean {geo:.2f}")
    return results


def run_model(args) -> dict:
    import torch

    from kiln.autotvm.extract import extract_tasks
    from kiln.frontend import from_pytorch
    model, inputs = _model(args.name)
    tasks = auto_tune(model, inputs, args.auto_log, args.trials)
    with torch.inference_mode():
        ref = model(*inputs)
        ref = (ref[0] if isinstance(ref, (tuple, list)) else ref)
        ref = getattr(ref, "last_hidden_state", ref).numpy()
    calls = {}
    for label, log in (("untuned", None), ("template", args.template_log),
                       ("auto", args.auto_log)):
        if label == "template" and not log:
            continue
        ex = _compiled(model, inputs, log)
        _check(ex, ref, f"{args.name} {label}")
        calls[label] = ex.run
    info = _time(calls, None, args)
    ms = info["median_ms"]
    print(f"\n{args.name}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in ms.items()))
    mod, params = from_pytorch(model, inputs)
    templated = {k for t in extract_tasks(mod, params) for k in t.kernels}
    rows = []
    for t in tasks:
        rows.append([t.kernel_name[:56], "yes" if set(t.kernels) & templated else "no",
                     peers.fmt(t.default_s * 1e6, ".1f"), peers.fmt(t.best_s * 1e6, ".1f"),
                     peers.fmt(t.default_s / t.best_s) + "x"])
    print(peers.format_table(["kernel", "template", "default us", "auto us", "speedup"], rows))
    info["kernels"] = {t.kernel_name: {"default_us": t.default_s * 1e6,
                                       "auto_us": t.best_s * 1e6} for t in tasks}
    return info


def main(argv=None) -> int:
    import ops
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    o = sub.add_parser("ops")
    o.add_argument("--workloads", nargs="+", default=ops.WORKLOADS, choices=ops.WORKLOADS)
    m = sub.add_parser("model")
    m.add_argument("name", choices=MODELS)
    for p in (o, m):
        p.add_argument("--trials", type=int, default=256, help="trials per kernel (average)")
        p.add_argument("--auto-log", default=None, help="the auto-scheduler's log (resumed)")
        p.add_argument("--template-log", default=None,
                       help="a template-tuned log to compare with")
        peers.add_sampling_args(p)
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.runs = 2, 2
    if args.auto_log is None:
        args.auto_log = os.path.join(tempfile.gettempdir(), f"kiln_auto_{args.mode}.jsonl")
    peers.warn_if_busy()
    import torch
    torch.set_num_threads(THREADS)
    results = run_ops(args) if args.mode == "ops" else run_model(args)
    if args.json:
        peers.write_json(args.json, {"machine": peers.machine_info(THREADS),
                                     "trials": args.trials, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())

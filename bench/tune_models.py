"""Tune whole models (and the single-operator workloads of bench/ops.py) with
kiln.autotvm.tune_model into one log, for `bench/models.py --tuning-log` and
`bench/ops.py --tuning-log` (issue 5).

    python bench/tune_models.py [--models resnet18 mobilenet_v2 bert] [--ops C1 .. D9]
                                [--log tune.jsonl] [--tuner xgb] [--trials N] [--budget 45m]

Each model (then each op workload) is tuned with tune_model's defaults unless --trials /
--budget / --tuner say otherwise; the log is appended to and reused: a task measured before (by
this or an earlier run, or by another model with the same task) is not measured again. Prints,
per model, the tasks, the wall time, and how many measurements were new.

Models are measured as tune_model does by default: with each candidate's weights evicted from
the caches before every call when the model's weights outgrow the cores' own caches (as inside
such a model). Op workloads are timed with their operands cached, because bench/ops.py times
each operator back to back. Keep the two in separate logs.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

THREADS = peers.configure_threads(int(os.environ.get("BENCH_THREADS", "2")))

MODELS = ("resnet18", "mobilenet_v2", "bert")


def _records(log: str) -> int:
    from kiln.autotvm import load_records
    return sum(1 for _ in load_records(log)) if os.path.exists(log) else 0


def tune_one(label: str, model, inputs, args, warm: bool = False) -> dict:
    """Tune one torch model into args.log (`warm`: candidates timed with their operands
    cached); returns what it took."""
    from kiln.autotvm import LocalRunner, measure_option, tune_model
    from kiln.frontend import from_pytorch
    mod, params = from_pytorch(model, inputs)
    before = _records(args.log)
    options = {"log_file": args.log, "tuner": args.tuner}
    if warm:
        options["measure_option"] = measure_option(runner=LocalRunner())
    if args.trials is not None:
        options["trials_per_task"] = args.trials
    if args.budget is not None:
        options["time_budget"] = args.budget
    print(f"\n{label}:", flush=True)
    start = time.perf_counter()
    tasks = tune_model(mod, params, "llvm", **options)
    seconds = time.perf_counter() - start
    new = _records(args.log) - before
    print(f"{label}: {len(tasks)} tasks, {seconds / 60:.1f} min, {new} new measurements "
          f"({_records(args.log)} in {args.log})", flush=True)
    return {"tasks": len(tasks), "seconds": seconds, "new": new}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    ap.add_argument("--ops", nargs="*", default=[], metavar="KEY",
                    help="bench/ops.py workloads to tune too (C1..C12, D1..D9)")
    ap.add_argument("--log", default="tune.jsonl")
    ap.add_argument("--tuner", default="xgb", choices=("xgb", "ga", "random", "grid"))
    ap.add_argument("--trials", type=int, help="trials per task (default: tune_model's)")
    ap.add_argument("--budget", help="time budget per model, e.g. 45m (default: none)")
    args = ap.parse_args(argv)
    import torch

    from kiln.testing import models
    torch.set_num_threads(THREADS)
    done = {}
    for name in args.models:
        model = getattr(models, name)(seed=0)
        done[name] = tune_one(name, model, models.example_input(model), args)
    if args.ops:
        import ops
        for key in args.ops:
            if key not in ops.WORKLOADS:
                ap.error(f"unknown op workload {key!r}; choose from {' '.join(ops.WORKLOADS)}")
            conv, x = ops.conv_module(key)
            done[key] = tune_one(key, conv, (x,), args, warm=True)
    print("\nsummary: " + "; ".join(f"{k} {v['seconds'] / 60:.1f} min ({v['new']} new)"
                                     for k, v in done.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

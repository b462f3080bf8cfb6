"""Compile time of whole models: import from PyTorch, kiln.compile, and check the result.

    python bench/compile_time.py [--models resnet18 mobilenet_v2 bert] [--json out.json]

Prints, per model, the import time, the compile time (passes + fusion + lowering + LLVM), the
number of kernel calls and distinct kernels, and the agreement with PyTorch; then where the time
went (kiln.compile_timings: frontend, each graph pass, each lowering pass, LLVM optimization,
machine code; --phases N shows each model's N costliest phases, 0 none).
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("KILN_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend import from_pytorch  # noqa: E402
from kiln.testing import models  # noqa: E402

MODELS = {"resnet18": models.resnet18, "mobilenet_v2": models.mobilenet_v2, "bert": models.bert}
LIMITS_S = {"resnet18": 10.0, "bert": 60.0}      # the bars of issue 3


def measure(name: str) -> dict:
    model = MODELS[name]()
    inputs = models.example_input(model)
    with kiln.compile_timings() as timings:
        t0 = time.perf_counter()
        mod, params = from_pytorch(model, inputs)
        t1 = time.perf_counter()
        lib = kiln.compile(mod, target="llvm", params=params)
        t2 = time.perf_counter()
    m = kiln.runtime.GraphExecutor(lib)
    for input_name, value in zip(m.get_input_names(), inputs):
        m.set_input(input_name, value.numpy())
    m.run()
    with torch.no_grad():
        ref = model(*inputs)
    ref = (ref[0] if isinstance(ref, tuple) else ref).numpy()
    err = float(np.abs(m.get_output(0).numpy() - ref).max() / np.abs(ref).max())
    return {"model": name, "import_s": t1 - t0, "compile_s": t2 - t1,
            "kernel_calls": len(lib.graph["kernels"]), "distinct_kernels": len(lib.prim_funcs),
            "max_err_rel": err, "limit_s": LIMITS_S.get(name), "timings": timings.to_json()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--json")
    p.add_argument("--phases", type=int, default=12, metavar="N",
                   help="show each model's N costliest phases (default 12; 0: none)")
    args = p.parse_args(argv)
    print(f"{'model':>14} {'import':>8} {'compile':>8} {'limit':>6} {'calls':>6} {'kernels':>8} {'max err/max|y|':>15}")
    rows = []
    for name in args.models:
        r = measure(name)
        rows.append(r)
        limit = f"{r['limit_s']:.0f}s" if r["limit_s"] else "-"
        print(f"{name:>14} {r['import_s']:>7.2f}s {r['compile_s']:>7.2f}s {limit:>6} "
              f"{r['kernel_calls']:>6} {r['distinct_kernels']:>8} {r['max_err_rel']:>15.2e}", flush=True)
        phases = sorted(r["timings"]["phases"].items(), key=lambda kv: -kv[1])[:args.phases]
        groups = ", ".join(f"{g} {s:.2f}" for g, s in sorted(r["timings"]["groups"].items(),
                                                              key=lambda kv: -kv[1]))
        if args.phases:
            print(f"{'':>14} seconds by stage: {groups}")
            for phase, seconds in phases:
                print(f"{'':>16} {phase:<34} {seconds:7.3f}s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return rows


if __name__ == "__main__":
    main()

"""Per-run overhead of kiln's C runtime over its kernels, on this machine.

    python bench/c_runtime_overhead.py [--models tiny resnet18 mobilenet_v2 bert] [--runs 200]
                                       [--threads 2] [--json out.json]

Each model is compiled for this CPU and exported; then, in turn, with ~50 ms between them:
  kernels   the sum of the kernels' times per run (kiln.runtime.profile: each kernel timed in
            its place in the run, medians),
  python    a run through the Python GraphExecutor (median of --runs),
  c         a run through the C runtime (run_model --repeat, median of --runs), a separate
            process started on the same library.
The overhead is c - kernels per run; its share is of c. Both runtimes run the same kernels
with the same thread count, so the difference is what each runtime adds per run (argument
packing, the call loop, dispatch), plus noise: the machine is shared, so the medians of a few
hundred runs are what to read.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PAUSE_S = 0.05


def _model(name: str):
    import torch
    from torch import nn

    from kiln.testing.models import bert, example_input, mobilenet_v2, resnet18
    if name == "tiny":
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                              nn.Linear(8 * 8 * 8, 10)).eval()
        return model, (torch.randn(1, 3, 8, 8),)
    model = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "bert": bert}[name](seed=1)
    return model, example_input(model, seed=5)


def measure(name: str, runs: int, threads: int) -> dict:
    import kiln
    from kiln.runtime.c.runner import run_exported

    model, inputs = _model(name)
    mod, params = kiln.frontend.from_pytorch(model, inputs)
    lib = kiln.compile(mod, params=params)
    names = [i["name"] for i in json.loads(lib.graph_json)["inputs"]]
    feeds = {n: t.numpy() for n, t in zip(names, inputs)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.so"
        lib.export_library(path)
        loaded = kiln.runtime.load_module(path)      # the same file both runtimes run
        m = kiln.runtime.GraphExecutor(loaded)
        m.set_input(**feeds)
        report = kiln.runtime.profile(m, number=max(1, runs // 10), repeat=10)
        time.sleep(PAUSE_S)
        python = float(np.median(m.benchmark(number=1, repeat=runs).results))
        time.sleep(PAUSE_S)
        outputs, c = run_exported(path, feeds, repeat=runs, threads=threads)
    m.run()
    assert np.array_equal(outputs[0], m.get_output(0).numpy()), f"{name}: outputs differ"
    return {"model": name, "kernels": len(report.kernels), "kernels_s": report.total,
            "python_s": python, "c_s": c, "overhead_s": c - report.total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "resnet18", "mobilenet_v2",
                                                        "bert"])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    os.environ["KILN_NUM_THREADS"] = str(args.threads)
    rows = []
    print(f"{'model':14} {'kerns':>5} {'kernels':>10} {'python':>10} {'C':>10} "
          f"{'C overhead':>12}  (per run, medians; {args.threads} threads)")
    for name in args.models:
        r = measure(name, args.runs, args.threads)
        rows.append(r)
        print(f"{name:14} {r['kernels']:5d} {r['kernels_s'] * 1e6:8.1f}us "
              f"{r['python_s'] * 1e6:8.1f}us {r['c_s'] * 1e6:8.1f}us "
              f"{r['overhead_s'] * 1e6:8.1f}us ({r['overhead_s'] / r['c_s']:+.1%})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    sys.exit(main())

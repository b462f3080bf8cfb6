"""One library for every size: kiln compiled over a symbolic dimension against kiln compiled
for one static shape, in the same process, interleaved (issue 32).

    python bench/dynamic.py [--models bert_base resnet18] [--rounds 5] [--runs 3] [--quick]
                            [--json out.json]

bert_base: BERT-base exported with a symbolic sequence length seq in [1, 512]; its outputs are
compared with PyTorch's at lengths 1, 7, 128, 384 and 512, and its latency at 128 with the
library compiled for (1, 128). resnet18: ResNet-18 (224x224) with a symbolic batch in [1, 32],
compared at batches 1 and 8, and timed at both against the static libraries of those batches.
"ratio" is the symbolic library's median latency over the static one's (issue 32's bar:
<= 1.15). 2 threads per system; medians of rounds x runs samples.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

THREADS = peers.configure_threads(int(os.environ.get("BENCH_THREADS", "2")))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.export import Dim  # noqa: E402

import kiln  # noqa: E402
from kiln.runtime import GraphExecutor  # noqa: E402
from kiln.testing.models import bert, resnet18  # noqa: E402

# model -> (build, dimension name, its range, the axis of input 0, sizes checked, sizes timed)
MODELS = {
    "bert_base": (lambda: bert(seed=1), "seq", (1, 512), 1, (1, 7, 128, 384, 512), (128,)),
    "resnet18": (lambda: resnet18(seed=1), "batch", (1, 32), 0, (1, 8), (1, 8)),
}


def _input(name: str, size: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(size)
    if name == "bert_base":
        return torch.randint(0, 30522, (1, size), generator=g)
    return torch.randn(size, 3, 224, 224, generator=g)


def _compile(model, x, dynamic_shapes=None):
    t0 = time.perf_counter()
    mod, params = kiln.frontend.from_pytorch(model, (x,), dynamic_shapes=dynamic_shapes)
    lib = kiln.compile(mod, params=params)
    return GraphExecutor(lib), time.perf_counter() - t0


def run_model(name: str, args) -> dict:
    build, dim, (low, high), axis, checked, timed = MODELS[name]
    model = build().eval()
    # torch.export specializes a dimension whose example size is 0 or 1: export at 2 or more.
    example = _input(name, max(timed[0], 2))
    symbolic, compile_s = _compile(model, example,
                                   ({axis: Dim(dim, min=low, max=high)},))
    input_name = symbolic.get_input_names()[0]
    out = {"model": name, "dim": dim, "range": [low, high], "compile_s": compile_s,
           "checked": {}, "timed": {}}
    for size in checked:
        x = _input(name, size)
        symbolic.run(**{input_name: x.numpy()})
        with torch.no_grad():
            ref = model(x).numpy()
        err = float(np.abs(symbolic.get_output(0).numpy() - ref).max() / np.abs(ref).max())
        out["checked"][size] = err
        print(f"  {name} {dim}={size}: max |err| / max |ref| = {err:.1e}", flush=True)
    for size in timed:
        x = _input(name, size).numpy()
        static, static_s = _compile(model, torch.from_numpy(x))
        static.set_input(input_name, x)
        symbolic.set_input(input_name, x)
        samples = peers.interleave({"static": static.run, "symbolic": symbolic.run},
                                   args.rounds, args.runs)
        ms = {k: peers.median_ms(v) for k, v in samples.items()}
        out["timed"][size] = {"static_ms": ms["static"], "symbolic_ms": ms["symbolic"],
                              "ratio": ms["symbolic"] / ms["static"],
                              "static_compile_s": static_s}
        del static
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    peers.add_sampling_args(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.runs = 2, 2
    peers.warn_if_busy()
    results = [run_model(m, args) for m in args.models]
    rows = []
    for r in results:
        for size, t in r["timed"].items():
            rows.append([r["model"], f"{r['dim']}={size}", f"[{r['range'][0]}, {r['range'][1]}]",
                         peers.fmt(t["static_ms"]), peers.fmt(t["symbolic_ms"]),
                         peers.fmt(t["ratio"]) + "x", peers.fmt(t["static_compile_s"], ".1f"),
                         peers.fmt(r["compile_s"], ".1f"),
                         f"{max(r['checked'].values()):.1e}"])
    print(f"one symbolic library vs one static library per shape, float32, {THREADS} threads; "
          f"median of {args.rounds}x{args.runs} interleaved samples")
    print(peers.format_table(["model", "at", "range", "static ms", "symbolic ms", "ratio",
                              "static compile s", "symbolic compile s", "worst err"], rows))
    if args.json:
        peers.write_json(args.json, {"machine": peers.machine_info(THREADS),
                                     "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One training step (forward + backward, batch 8) in kiln against PyTorch eager and
torch.compile (inductor), in the same process, interleaved.

    python bench/train.py [--models bert_layer bert_base resnet18] [--steps 10] [--threads 2]
                          [--mode train|eval] [--no-inductor] [--json out.json]

A step is loss = mean(output^2); loss.backward() on the same inputs, parameters' gradients
zeroed before each. kiln runs kiln.torch.optimize(model, inputs, training=True): its forward
and backward are kiln's, its parameters the model's. Models are in --mode for every system:
train (the default: BERT's dropout drops, ResNet's batch norm normalizes by the batch and
updates its running statistics) or eval (no dropout, frozen statistics, as when fine-tuning).
Medians over --steps steps, ~50 ms apart. Also printed: what kiln's forward saves for the
backward, against what its backward reads.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

PAUSE_S = 0.05


def _model(name: str, mode: str = "train"):
    import torch

    from kiln.testing.models import BertConfig, BertLayer, bert, example_input, resnet18
    torch.manual_seed(0)
    if name == "bert_layer":       # the "Bridging PyTorch and TVM" write-up's example
        model = BertLayer(BertConfig())
        inputs = (torch.randn(8, 128, 768), torch.zeros(8, 1, 1, 128))
    elif name == "bert_base":
        model = bert(seed=1)
        inputs = example_input(model, batch=8, seq_len=128, seed=5)
    else:
        model = resnet18(seed=1)
        inputs = example_input(model, batch=8, image_size=224, seed=5)
    return model.train(mode == "train"), inputs


def _step(module, inputs, params):
    for p in params:
        p.grad = None
    module(*inputs).pow(2).mean().backward()


def _time(fn, steps: int) -> float:
    fn()                                   # warm-up (and, for inductor, compilation)
    times = []
    for _ in range(steps):
        time.sleep(PAUSE_S)
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, steps: int, inductor: bool, mode: str) -> dict:
    import torch

    import kiln.torch
    model, inputs = _model(name, mode)
    params = list(model.parameters())
    start = time.perf_counter()
    fast = kiln.torch.optimize(model, inputs, training=True)
    compile_s = time.perf_counter() - start
    systems = {"kiln": fast, "eager": model}
    if inductor:
        systems["inductor"] = torch.compile(model)
    row = {"model": name, "kiln_compile_s": compile_s,
           "saved_bytes": fast.split.saved_bytes, "read_bytes": fast.split.read_bytes}
    for system, module in systems.items():
        row[system + "_s"] = _time(lambda: _step(module, inputs, params), steps)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert_layer", "bert_base", "resnet18"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mode", choices=("train", "eval"), default="train")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    os.environ["KILN_NUM_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    rows = []
    print(f"one training step, batch 8, {args.mode} mode, {args.threads} threads, median of "
          f"{args.steps} (ms; x: kiln's time over eager's)")
    for name in args.models:
        r = measure(name, args.steps, not args.no_inductor, args.mode)
        rows.append(r)
        inductor = f"  inductor {r['inductor_s'] * 1e3:8.1f}" if "inductor_s" in r else ""
        print(f"{name:11} kiln {r['kiln_s'] * 1e3:8.1f}  eager {r['eager_s'] * 1e3:8.1f}"
              f"{inductor}  x{r['kiln_s'] / r['eager_s']:.2f}  (kiln saves "
              f"{r['saved_bytes'] / 2**20:.1f} MiB of the {r['read_bytes'] / 2**20:.1f} MiB its "
              f"backward reads; compiled in {r['kiln_compile_s']:.1f} s)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

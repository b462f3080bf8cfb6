"""Greedy generation with a KV cache: kiln against eager PyTorch and torch.compile (inductor),
in the same process, interleaved (issue 32).

    python bench/generate.py [--model gpt2|llama] [--prompt 16] [--tokens 32] [--rounds 5]
                             [--json out.json]

The model (kiln.testing.decoder: transformers' GPT-2 with 6 layers, or a Llama-style decoder,
random weights from their configs) generates --tokens tokens greedily after a --prompt token
prompt, its cache of past keys and values passed as tensors (CacheStep). kiln compiles the
prefill over the prompt length and the one-token step over the past length, each once
(compile_decoder); torch.compile gets dynamic=True. Every system's tokens must equal eager
PyTorch's. Printed: tokens/s of the first generation (kiln then makes the buffers of each new
past length; inductor compiles) and the median of --rounds more (warm), 2 threads each.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

THREADS = peers.configure_threads(int(os.environ.get("BENCH_THREADS", "2")))

import torch  # noqa: E402

from kiln.testing.decoder import CacheStep, compile_decoder, gpt2, greedy, llama  # noqa: E402

MODELS = {"gpt2": gpt2, "llama": llama}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODELS), default="gpt2")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    peers.warn_if_busy()
    model = MODELS[args.model]()
    prompt = torch.randint(0, model.config.vocab_size, (1, args.prompt),
                           generator=torch.Generator().manual_seed(0))
    eager = CacheStep(model).eval()
    t0 = time.perf_counter()
    prefill, step = compile_decoder(model, max_length=args.prompt + args.tokens + 1)
    compile_s = time.perf_counter() - t0
    systems = {"eager": (eager, eager), "kiln": (prefill, step)}
    if not args.no_inductor:
        compiled = torch.compile(eager, dynamic=True)
        systems["torch.compile"] = (compiled, compiled)
    want = None
    first, warm = {}, {name: [] for name in systems}
    for name, (p, s) in systems.items():
        t0 = time.perf_counter()
        tokens = greedy(p, s, prompt, args.tokens)
        first[name] = args.tokens / (time.perf_counter() - t0)
        want = tokens if want is None else want
        if not torch.equal(tokens, want):
            raise SystemExit(f"{name}'s tokens differ from eager PyTorch's: "
                             f"{tokens[0, args.prompt:].tolist()} vs "
                             f"{want[0, args.prompt:].tolist()}")
        time.sleep(peers.PAUSE_S)
    for _ in range(args.rounds):
        for name, (p, s) in systems.items():
            t0 = time.perf_counter()
            greedy(p, s, prompt, args.tokens)
            warm[name].append(args.tokens / (time.perf_counter() - t0))
            time.sleep(peers.PAUSE_S)
    median = {name: statistics.median(v) for name, v in warm.items()}
    print(f"{args.model}: {model.config.num_hidden_layers} layers, greedy {args.tokens} tokens "
          f"after a {args.prompt}-token prompt, {THREADS} threads; tokens equal eager's on every "
          f"system; kiln compiled prefill and step in {compile_s:.1f} s")
    rows = [[name, peers.fmt(first[name], ".1f"), peers.fmt(median[name], ".1f"),
             peers.fmt(median[name] / median["eager"]) + "x"] for name in systems]
    print(peers.format_table(["system", "first tokens/s", "warm tokens/s", "vs eager"], rows))
    if args.json:
        peers.write_json(args.json, {"machine": peers.machine_info(THREADS), "model": args.model,
                                     "first": first, "warm": warm, "compile_s": compile_s})
    return 0


if __name__ == "__main__":
    sys.exit(main())

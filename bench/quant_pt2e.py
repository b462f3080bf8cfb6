"""A PT2E-quantized ResNet-18 in kiln against PyTorch's own int8 (issue 25), one process.

    python bench/quant_pt2e.py [--width 64] [--image 224] [--inputs 8] [--json out.json]

The model (kiln.testing.models.resnet18, seeded random weights) is quantized by torchao's
prepare_pt2e / convert_pt2e with the X86InductorQuantizer (uint8 activations, per-channel int8
weights), calibrated on 4 seeded random inputs. PyTorch's converted model runs two ways: eagerly
(its reference: float ops between quantize and dequantize calls) and lowered to int8 kernels by
torch.compile with Inductor's freezing, as the X86InductorQuantizer is meant to be used. kiln
imports the exported converted model (from_pytorch) and runs it in its integer kernels.

Accuracy, on --inputs seeded inputs (medians and maxima over them): each system's max|out −
PyTorch eager reference| against the quantization error max|reference − float32 model|; the
issue's bar is ¼. Latency: kiln int8, PyTorch Inductor int8, kiln float32 and PyTorch eager
float32, medians of interleaved rounds, 2 threads each, a pause between systems.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

THREADS = peers.configure_threads(int(os.environ.get("BENCH_THREADS", "2")))

import numpy as np  # noqa: E402

SYSTEMS = ("kiln int8", "PyTorch int8 (Inductor)", "kiln float32", "PyTorch float32")


def _inductor(converted, x):
    """The converted model lowered by Inductor with freezing (its int8 kernels), compiled by a
    first call; (the compiled model, seconds to compile)."""
    import time
    import torch
    import torch._inductor.config as inductor_config
    compiled = torch.compile(converted)
    t0 = time.perf_counter()
    with inductor_config.patch(freezing=True), torch.inference_mode():
        compiled(x)
    return compiled, time.perf_counter() - t0


def prepare(width: int, image: int, inputs: int):
    import torch
    import kiln
    from kiln.frontend import from_pytorch
    from kiln.testing import models
    from kiln.testing.pt2e import pt2e_quantize
    torch.set_num_threads(THREADS)
    model = models.resnet18(seed=0, width=width).eval()
    shape = (1, 3, image, image)
    converted = pt2e_quantize(model, shape)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))

    mod, params = from_pytorch(torch.export.export(converted, (x,)))
    kiln8 = peers.kiln_executor(kiln.compile(mod, target="llvm", params=params), [x.numpy()])
    kiln32, _, _, _ = peers.kiln_compile(model, (x,))
    inductor8, compile_s = _inductor(converted, x)
    eager32 = peers.torch_eager(model, (x,))

    gen = torch.Generator().manual_seed(2)
    errors = {"kiln int8": [], "PyTorch int8 (Inductor)": [], "quantization": []}
    for _ in range(inputs):
        xi = torch.randn(shape, generator=gen)
        with torch.inference_mode():
            reference, float_out = converted(xi).numpy(), model(xi).numpy()
        kiln8.set_input(kiln8.get_input_names()[0], xi.numpy())
        kiln8.run()
        got = kiln8.get_output(0).numpy()
        with torch.inference_mode():
            lowered = inductor8(xi).numpy()
        errors["kiln int8"].append(float(np.abs(got - reference).max()))
        errors["quantization"].append(float(np.abs(reference - float_out).max()))
        errors["PyTorch int8 (Inductor)"].append(float(np.abs(lowered - reference).max()))
    kiln8.set_input(kiln8.get_input_names()[0], x.numpy())
    calls = {"kiln int8": kiln8.run, "PyTorch int8 (Inductor)": peers.torch_eager(inductor8, (x,)),
             "kiln float32": kiln32.run, "PyTorch float32": eager32}
    return calls, errors, compile_s


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--inputs", type=int, default=8, help="seeded inputs for the accuracy")
    peers.add_sampling_args(p)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.runs = 2, 2
    warnings.filterwarnings("ignore")
    peers.warn_if_busy()
    calls, errors, compile_s = prepare(args.width, args.image, args.inputs)
    samples = peers.interleave(calls, args.rounds, args.runs)
    ms = {s: peers.median_ms(v) for s, v in samples.items()}
    print(f"PT2E ResNet-18 (width {args.width}, {args.image}x{args.image}), batch 1, {THREADS} "
          f"threads each; median of {args.rounds}x{args.runs} interleaved runs")
    print(peers.format_table(["system", "ms", "vs kiln int8"],
                             [[s, peers.fmt(ms[s]), peers.fmt(ms[s] / ms["kiln int8"])]
                              for s in SYSTEMS]))
    qerr = np.array(errors["quantization"])
    print(f"\naccuracy over {args.inputs} seeded inputs, against PyTorch's eager converted "
          f"model; qerr = max|reference - float32| (median {np.median(qerr):.4f})")
    rows = []
    for s in ("kiln int8", "PyTorch int8 (Inductor)"):
        ratio = np.array(errors[s]) / qerr
        rows.append([s, peers.fmt(float(np.median(ratio)), ".3f"),
                     peers.fmt(float(ratio.max()), ".3f")])
    print(peers.format_table(["system", "median |out-ref|/qerr", "max |out-ref|/qerr"], rows))
    print(f"(Inductor compile {compile_s:.1f} s)")
    if args.json:
        peers.write_json(args.json, {"machine": peers.machine_info(THREADS), "median_ms": ms,
                                     "errors": errors, "rounds": args.rounds, "runs": args.runs})


if __name__ == "__main__":
    main()

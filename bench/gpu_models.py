"""ResNet-18, MobileNet-V2 and BERT-base compiled by kiln for CUDA against PyTorch eager on the
same GPU (float32, batch 1; BERT sequence 128). TF32 is off for PyTorch's convolutions and
matrix products alike (cuDNN's default is on), so both compute in float32.

    python bench/gpu_models.py [--models resnet18 mobilenet_v2 bert] [--json out.json]

Needs an NVIDIA GPU and torch with CUDA; prints why and exits 0 without one. Each kiln output is
compared with PyTorch's on the GPU (max |error| <= 1e-4 x max |output|). Times are medians of 5
repeats of back-to-back runs lasting >= 50 ms (kiln: GraphExecutor.benchmark, device-synchronized;
torch: CUDA events), kiln and torch alternating with a pause between them.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2", "bert"])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import kiln
    from kiln.runtime.gpu import DeviceUnavailableError, device_api
    try:
        api = device_api(kiln.cuda(0))
    except DeviceUnavailableError as err:
        print(f"no CUDA GPU: {err}")
        return 0
    import torch
    from kiln.frontend import from_pytorch
    from kiln.testing.models import bert, example_input, mobilenet_v2, resnet18
    builders = {"resnet18": lambda: resnet18(seed=1), "mobilenet_v2": lambda: mobilenet_v2(seed=2),
                "bert": lambda: bert(seed=3)}
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"GPU: {api.name}; torch {torch.__version__}, TF32 off", flush=True)
    rows, failed = [], []
    for name in args.models:
        try:
            rows.append(_bench(name, builders[name], api, from_pytorch, example_input, torch, kiln))
        except Exception:                       # report, and go on with the next model
            import traceback
            traceback.print_exc()
            failed.append(name)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": api.name, "rows": rows, "failed": failed}, f, indent=1)
    return 1 if failed else 0


def _bench(name, build, api, from_pytorch, example_input, torch, kiln):
    model = build().eval()
    inputs = example_input(model, image_size=224, seq_len=128, seed=5)
    mod, params = from_pytorch(model, inputs)
    t0 = time.perf_counter()
    lib = kiln.compile(mod, target="cuda -arch=sm_90", params=params)
    compile_s = time.perf_counter() - t0
    ex = kiln.runtime.GraphExecutor(lib)
    names = [p.name_hint for p in mod["main"].params if p.name_hint not in params]
    ex.set_input(**{n: x.numpy() for n, x in zip(names, inputs)})
    cuda_model = model.cuda()
    cuda_inputs = [x.cuda() for x in inputs]

    def torch_run():
        with torch.no_grad():
            out = cuda_model(*cuda_inputs)
        return out

    ref = torch_run()
    ref = getattr(ref, "last_hidden_state", ref)
    ref = (ref[0] if isinstance(ref, tuple) else ref).float().cpu().numpy()
    ex.run()
    out = ex.get_output(0).numpy()
    err = float(np.abs(out - ref).max() / np.abs(ref).max())

    def torch_time():
        number = 5
        while True:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(number):
                torch_run()
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
            if ms >= 50:
                return ms / number * 1e-3
            number *= 2

    def kiln_time():
        number = 2
        while True:
            t = ex.benchmark(number=number, repeat=1, warmup=0).median
            if t * number >= 0.05:
                return t
            number *= 2

    kt, tt = [], []
    for _ in range(5):
        kt.append(kiln_time())
        time.sleep(0.05)
        tt.append(torch_time())
        time.sleep(0.05)
    row = dict(model=name, kiln_ms=float(np.median(kt)) * 1e3, torch_ms=float(np.median(tt)) * 1e3,
               max_rel_err=err, compile_s=compile_s, kernels=len(lib.prim_funcs),
               kernel_calls=len(lib.graph["kernels"]))
    row["torch_over_kiln"] = row["torch_ms"] / row["kiln_ms"]
    print(f"{name:13s} kiln {row['kiln_ms']:8.2f} ms  torch eager {row['torch_ms']:7.2f} ms  "
          f"torch/kiln {row['torch_over_kiln']:.3f}  err {err:.1e}  compile {compile_s:.1f}s "
          f"({row['kernels']} kernels, {row['kernel_calls']} calls)", flush=True)
    assert err <= 1e-4, f"{name}: kiln's output differs from PyTorch's ({err:.2e})"
    return row


if __name__ == "__main__":
    sys.exit(main())

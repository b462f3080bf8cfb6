"""The TVM paper's GPU matrix multiply, written with kiln.te and compiled for CUDA, against
PyTorch's torch.matmul (cuBLAS) on the same GPU, float32 (TF32 off: PyTorch's default).

    python bench/gpu_matmul.py [--sizes 1024 2048 4096] [--json out.json]

Needs an NVIDIA GPU (kiln.cuda(0)) and torch with CUDA; prints why and exits 0 without one.
Each result is checked against torch.matmul in float64 on the GPU. Times are CUDA-event medians
of 5 repeats, each of >= 20 ms of back-to-back calls, kiln and torch alternating.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))

import numpy as np  # noqa: E402

# (threads y, x), (vthreads y, x), (per-thread y, x), k tile
CONFIGS = {"paper-64": ((8, 8), (2, 2), (4, 4), 8),
           "128x128": ((16, 16), (2, 2), (4, 4), 8),
           "128x128-k16": ((16, 16), (2, 2), (4, 4), 16)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
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
    from matmul_schedules import matmul, paper_schedule
    dev = kiln.cuda(0)
    print(f"GPU: {api.name}; torch {torch.__version__}, allow_tf32="
          f"{torch.backends.cuda.matmul.allow_tf32}")
    rows = []
    for n in args.sizes:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n)).astype("float32")
        b = rng.standard_normal((n, n)).astype("float32")
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        ref = (ta.double().T @ tb.double()).cpu().numpy()
        tat = ta.T.contiguous()
        flops = 2.0 * n ** 3

        def torch_time():
            torch.cuda.synchronize()
            reps = []
            for _ in range(5):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                number = 10
                while True:
                    start.record()
                    for _ in range(number):
                        torch.matmul(tat, tb)
                    end.record()
                    end.synchronize()
                    ms = start.elapsed_time(end)
                    if ms >= 20:
                        break
                    number *= 2
                reps.append(ms / number * 1e-3)
                time.sleep(0.05)
            return float(np.median(reps))

        A_d, B_d = kiln.nd.array(a, device=dev), kiln.nd.array(b, device=dev)
        C_d = kiln.nd.empty((n, n), "float32", dev)
        t_torch = torch_time()
        for name, (threads, vthreads, per_thread, k_tile) in CONFIGS.items():
            A, B, C = matmul(n, n, n)
            s = paper_schedule(A, B, C, threads, vthreads, per_thread, k_tile)
            t0 = time.perf_counter()
            mod = kiln.build(s, [A, B, C], target="cuda -arch=sm_90")
            build_s = time.perf_counter() - t0
            mod(A_d, B_d, C_d)
            out = C_d.numpy()
            err = float(np.abs(out - ref).max() / np.abs(ref).max())
            timer = mod.time_evaluator(mod.entry, number=10, repeat=5, min_repeat_ms=20)
            t_kiln = timer(A_d, B_d, C_d).median
            time.sleep(0.05)
            t_torch2 = torch_time()
            t_ref = min(t_torch, t_torch2)
            row = dict(n=n, config=name, kiln_ms=t_kiln * 1e3, torch_ms=t_ref * 1e3,
                       kiln_tflops=flops / t_kiln / 1e12, torch_tflops=flops / t_ref / 1e12,
                       torch_over_kiln=t_ref / t_kiln, max_rel_err=err, build_s=build_s)
            rows.append(row)
            print(f"n={n:5d} {name:12s} kiln {row['kiln_ms']:8.3f} ms ({row['kiln_tflops']:5.1f} "
                  f"TFLOP/s)  torch {row['torch_ms']:8.3f} ms ({row['torch_tflops']:5.1f})  "
                  f"torch/kiln {row['torch_over_kiln']:.2f}  err {err:.1e}  build {build_s:.1f}s",
                  flush=True)
            assert err < 1e-5, f"kiln's result differs from torch's: {err}"
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": api.name, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

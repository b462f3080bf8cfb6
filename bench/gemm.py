"""GEMM: kiln's best hand schedule against numpy (OpenBLAS), float32, 2 threads, same process.

Run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (the Makefile's `make bench` / `make demo`
do), so numpy uses its AVX-512 kernels. Prints GFLOPS of both, their ratio, and the time to
lower + build each kernel; writes the figures as JSON with --json.

    python bench/gemm.py --sizes 256 512 1024 2048
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

# Thread counts must be fixed before numpy/OpenBLAS and the kiln pool start.
THREADS = os.environ.setdefault("KILN_NUM_THREADS", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", THREADS)
os.environ.setdefault("OMP_NUM_THREADS", THREADS)

import numpy as np  # noqa: E402

import kiln  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from gemm_schedule import gemm_schedule  # noqa: E402


def median_seconds(fn, runs, min_time=0.2):
    fn()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time / runs or number >= 1 << 12:
            break
        number *= 2
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


def bench_size(n, runs, rounds):
    t0 = time.perf_counter()
    s, args = gemm_schedule(n, n, n)
    f = kiln.build(s, args, target="llvm")
    build_s = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype="float32")
    b = rng.standard_normal((n, n), dtype="float32")
    c = kiln.nd.empty((n, n), "float32")
    ka, kb = kiln.nd.array(a), kiln.nd.array(b)
    f(ka, kb, c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-3, atol=1e-2 * np.sqrt(n))
    out = np.empty((n, n), dtype="float32")
    flops = 2.0 * n ** 3
    kiln_t, numpy_t = [], []
    for _ in range(rounds):          # interleave the two systems; pause between them
        kiln_t.append(median_seconds(lambda: f(ka, kb, c), runs))
        time.sleep(0.05)
        numpy_t.append(median_seconds(lambda: np.matmul(a, b, out=out), runs))
        time.sleep(0.05)
    kt, nt = statistics.median(kiln_t), statistics.median(numpy_t)
    return {"n": n, "kiln_gflops": flops / kt / 1e9, "numpy_gflops": flops / nt / 1e9,
            "ratio": nt / kt, "build_s": build_s}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write results to this file")
    p.add_argument("--demo", action="store_true", help="short run for `make demo`")
    args = p.parse_args(argv)
    if args.demo:
        args.runs, args.rounds = 5, 2
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in os.environ:
            print(f"warning: {var} is set; numpy will not use its AVX-512 kernels", file=sys.stderr)
    print(f"kiln GEMM vs numpy, float32, {THREADS} threads (kiln pool: {kiln.runtime.num_threads()})")
    print(f"{'n':>6} {'kiln GFLOPS':>12} {'numpy GFLOPS':>13} {'kiln/numpy':>11} {'lower+build':>12}")
    results = []
    for n in args.sizes:
        r = bench_size(n, args.runs, args.rounds)
        results.append(r)
        print(f"{n:>6} {r['kiln_gflops']:>12.1f} {r['numpy_gflops']:>13.1f} {r['ratio']:>10.2f}x "
              f"{r['build_s'] * 1e3:>9.0f} ms", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return results


if __name__ == "__main__":
    main()

"""Int8 GEMM through tensorize against kiln's float32 GEMM, same process, same shape.

uint8 data (M, K) times int8 weights (N, K) into int32, through the target's int8 dot-product
intrinsic (AVX-512 VNNI / AVX-VNNI `vpdpbusd`, else AVX2 `vpmaddwd` on int16 operands: see
kiln/topi/x86/tensor_intrin.py); float32 is kiln's x86 dense schedule with each register tile
it can take (the best one counts). Both with pre-packed weights, as a compiled model has them.
The int8 result must equal numpy's integer product exactly. Prints operations per second
(a multiply-add counts two) and their ratio.

    python bench/int8_gemm.py --sizes 1024
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

THREADS = os.environ.setdefault("KILN_NUM_THREADS", "2")

import numpy as np  # noqa: E402

import kiln  # noqa: E402
from kiln import te, topi  # noqa: E402
from kiln.target import current_target  # noqa: E402
from kiln.topi.nn.dense import pack_weight_numpy  # noqa: E402
from kiln.topi.x86.dense import schedule_gemm_tile  # noqa: E402
from kiln.topi.x86.dense_int8 import (dense_int8, int8_layout, pack_int8_weight,  # noqa: E402
                                      schedule_dense_int8)
from kiln.topi.x86.tensor_intrin import int8_dot  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from gemm import median_seconds  # noqa: E402


def build_int8(m, n, k, w, rows):
    lanes, group, dtype = int8_layout()
    wp = pack_int8_weight(w, lanes, group, dtype)
    A = te.placeholder((m, k), "uint8", name="A")
    W = te.placeholder(wp.shape, dtype, name="W")
    C = dense_int8(A, W, n)
    return kiln.build(schedule_dense_int8([C], rows=rows), [A, W, C]), wp


def build_float(m, n, k, w, rows):
    wp = pack_weight_numpy(w)
    A = te.placeholder((m, k), "float32", name="A")
    W = te.placeholder(wp.shape, "float32", name="W")
    C = topi.nn.dense(A, W, units=n)
    s = te.create_schedule(C.op)
    schedule_gemm_tile(s, C.op, [C], rows)
    return kiln.build(s, [A, W, C]), wp


def best(builder, m, n, k, w, a, out, rows_options, runs):
    """(seconds, rows) of the fastest register tile, and the last result."""
    results = []
    for rows in rows_options:
        f, wp = builder(m, n, k, w, rows)
        args = (kiln.nd.array(a), kiln.nd.array(wp), out)
        results.append((median_seconds(lambda: f(*args), runs), rows, f, args))
        time.sleep(0.05)
    return min(results, key=lambda r: r[0])


def bench_size(n, runs, rounds):
    rng = np.random.default_rng(0)
    a8 = rng.integers(0, 256, (n, n), dtype=np.uint8)
    w8 = rng.integers(-128, 128, (n, n), dtype=np.int8)
    af = rng.standard_normal((n, n), dtype="float32")
    wf = rng.standard_normal((n, n), dtype="float32")
    c8, cf = kiln.nd.empty((n, n), "int32"), kiln.nd.empty((n, n), "float32")
    _, i8_rows, f8, args8 = best(build_int8, n, n, n, w8, a8, c8, (2, 3, 4, 6), runs)
    _, f_rows, ff, argsf = best(build_float, n, n, n, wf, af, cf, (2, 3, 4, 6), runs)
    f8(*args8)
    exact = bool(np.array_equal(c8.numpy(), a8.astype(np.int64) @ w8.astype(np.int64).T))
    ff(*argsf)
    np.testing.assert_allclose(cf.numpy(), af @ wf.T, rtol=1e-3, atol=1e-2 * np.sqrt(n))
    t8, tf = [], []
    for _ in range(rounds):        # interleaved; a pause between the two
        t8.append(median_seconds(lambda: f8(*args8), runs))
        time.sleep(0.05)
        tf.append(median_seconds(lambda: ff(*argsf), runs))
        time.sleep(0.05)
    ops = 2.0 * n ** 3
    g8, gf = ops / statistics.median(t8) / 1e9, ops / statistics.median(tf) / 1e9
    return {"n": n, "int8_gops": g8, "float32_gflops": gf, "ratio": g8 / gf, "exact": exact,
            "int8_rows": i8_rows, "float32_rows": f_rows, "intrinsic": int8_dot()[0].name}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1024])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write results to this file")
    args = p.parse_args(argv)
    print(f"int8 (tensorized) vs float32 GEMM, {THREADS} threads, target {current_target()}")
    print(f"{'n':>6} {'int8 Gop/s':>11} {'f32 GFLOP/s':>12} {'int8/f32':>9} {'exact':>6}  intrinsic")
    results = []
    for n in args.sizes:
        r = bench_size(n, args.runs, args.rounds)
        results.append(r)
        print(f"{n:>6} {r['int8_gops']:>11.1f} {r['float32_gflops']:>12.1f} {r['ratio']:>8.2f}x "
              f"{str(r['exact']):>6}  {r['intrinsic']} (rows: int8 {r['int8_rows']}, "
              f"f32 {r['float32_rows']})", flush=True)
        if not r["exact"]:
            raise SystemExit("int8 result differs from numpy's integer product")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return results


if __name__ == "__main__":
    main()

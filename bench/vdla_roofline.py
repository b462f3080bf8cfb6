"""VDLA roofline (the TVM paper's Fig. 10): ResNet-18's convolutions on the simulated VDLA,
with and without virtual threads (latency hiding), on one cycle model.

Layers are C2-C12 of the paper's Table 2; C1 (3 input channels) does not fill VDLA's 16-channel
blocks and is left out. Each layer is compiled from the same schedule (kiln/accel/vdla/conv2d.py)
with one tiling, once with 1 and once with 2 virtual threads, run on the simulator with random
int8 data, and checked bit-exact against numpy. Prints per layer: arithmetic intensity
(operations per DRAM byte), GOPS and GEMM utilization for both; writes the roofline as a PNG.

    python bench/vdla_roofline.py --png vdla_roofline.png
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

import kiln
from kiln.accel.vdla import VDLAConfig
from kiln.accel.vdla.conv2d import (default_tiling, pack_data, pack_kernel, reference,
                                    schedule_conv2d, unpack_output)

# name: (H = W, in channels, out channels, kernel, stride), from the paper's Table 2; pad
# keeps "same" geometry (kernel // 2).
LAYERS = {"C2": (56, 64, 64, 3, 1), "C3": (56, 64, 64, 1, 1), "C4": (56, 64, 128, 3, 2),
          "C5": (56, 64, 128, 1, 2), "C6": (28, 128, 128, 3, 1), "C7": (28, 128, 256, 3, 2),
          "C8": (28, 128, 256, 1, 2), "C9": (14, 256, 256, 3, 1), "C10": (14, 256, 512, 3, 2),
          "C11": (14, 256, 512, 1, 2), "C12": (7, 512, 512, 3, 1)}


def run_layer(name, vthreads, tiles, rng):
    size, cin, cout, k, stride = LAYERS[name]
    pad = k // 2
    x = rng.integers(-128, 128, (1, cin, size, size)).astype(np.int8)
    w = rng.integers(-128, 128, (cout, cin, k, k)).astype(np.int8)
    rows, obt, ibt, split = tiles
    t0 = time.perf_counter()
    s, args = schedule_conv2d(1, cin, size, size, cout, k, stride, pad, rows=rows,
                              out_blocks=obt, in_blocks=ibt, vthreads=vthreads, split=split)
    f = kiln.build(s, args, target="vdla")
    build_s = time.perf_counter() - t0
    oh = (size + 2 * pad - k) // stride + 1
    y = np.zeros((1, cout // 16, oh, oh, 16), np.int8)
    stats = f(pack_data(x), pack_kernel(w), y)
    exact = bool(np.array_equal(unpack_output(y), reference(x, w, stride, pad, 8)))
    return {"layer": name, "vthreads": vthreads, "tiles": list(tiles), "cycles": stats.cycles,
            "ops": stats.ops, "dram_bytes": stats.dram_bytes, "gops": stats.gops,
            "utilization": stats.utilization, "intensity": stats.ops / stats.dram_bytes,
            "exact": exact, "build_s": build_s}


def plot(results, path, config=VDLAConfig()):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    bandwidth = config.dram_bytes_per_cycle * config.clock_mhz / 1e3      # GB/s
    xs = np.logspace(0, 3, 200)
    ax.plot(xs, np.minimum(config.peak_gops, bandwidth * xs), "k-", lw=1, label="roofline")
    for vt, marker, label in ((1, "o", "no latency hiding"), (2, "^", "latency hiding (2 vthreads)")):
        pts = [r for r in results if r["vthreads"] == vt]
        ax.scatter([r["intensity"] for r in pts], [r["gops"] for r in pts], marker=marker,
                   label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (ops / DRAM byte)")
    ax.set_ylabel("throughput (GOPS)")
    ax.set_title(f"ResNet-18 convolutions on simulated VDLA ({config.clock_mhz:g} MHz)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", nargs="+", default=list(LAYERS), choices=list(LAYERS))
    p.add_argument("--png", default="vdla_roofline.png")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    config = VDLAConfig()
    print(f"VDLA {config.block_in}x{config.block_out} GEMM, {config.dram_bytes_per_cycle} B/cycle "
          f"DRAM, {config.clock_mhz:g} MHz (peak {config.peak_gops:.1f} GOPS); simulated cycles")
    print(f"{'layer':>5} {'tile':>10} {'ops/B':>6} {'GOPS 1vt':>9} {'util 1vt':>9} "
          f"{'GOPS 2vt':>9} {'util 2vt':>9} {'exact':>6}")
    rng = np.random.default_rng(0)
    results = []
    for name in args.layers:
        size, cin, cout, k, stride = LAYERS[name]
        tiles = default_tiling(cin, size, size, cout, k, stride, k // 2)
        one, two = (run_layer(name, vt, tiles, rng) for vt in (1, 2))
        results += [one, two]
        print(f"{name:>5} {'x'.join(map(str, tiles[:3])) + tiles[3][0]:>10} "
              f"{one['intensity']:>6.1f} "
              f"{one['gops']:>9.2f} {one['utilization']:>8.1%} {two['gops']:>9.2f} "
              f"{two['utilization']:>8.1%} {str(one['exact'] and two['exact']):>6}", flush=True)
    mean1 = np.mean([r["utilization"] for r in results if r["vthreads"] == 1])
    mean2 = np.mean([r["utilization"] for r in results if r["vthreads"] == 2])
    print(f"mean GEMM utilization: {mean1:.1%} without, {mean2:.1%} with latency hiding "
          f"(+{(mean2 - mean1) * 100:.1f} points)")
    plot(results, args.png, config)
    print(f"roofline: {args.png}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    if not all(r["exact"] for r in results):
        raise SystemExit("a layer's result differs from numpy's")
    return results


if __name__ == "__main__":
    main()

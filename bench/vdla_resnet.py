"""ResNet-18 with its convolutions offloaded to the simulated VDLA (the TVM paper's Fig. 21),
against the same int8 graph on this CPU.

The model is kiln.testing.int8_resnet: ResNet-18's layers in int8 with power-of-two
requantization (random seeded weights). Two compiled models:
- CPU: kiln.compile of the int8 graph (every layer a kiln kernel on this CPU);
- VDLA + CPU: the graph partitioned for VDLA (partition_for_vdla): every convolution whose
  channels fill VDLA's 16-channel blocks runs on VDLA through the graph executor (simulated),
  the rest — the 7x7 stem with its 3 input channels, pooling, residual additions, the
  classifier — stays on the CPU.
Both outputs must equal numpy's reference (and so each other). Per layer the bench prints
VDLA's simulated time (cycles at the simulator's clock) and the CPU's conv kernels' measured
times (kiln.runtime.profile, medians); the totals split convolutions and other layers as
Fig. 21 does. VDLA's times are the cycle model's, not a measured FPGA; packing NCHW tensors
into VDLA's channel blocks (done in Python by the simulator's host side) is not counted. The
VDLA programs use the template's default tiling (no tuning log). Compiling the VDLA model
takes minutes: the VDLA code generator runs the loops in Python.

    python bench/vdla_resnet.py --png vdla_resnet.png --json vdla_resnet.json
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

import kiln
from kiln.accel.vdla import VDLAConfig
from kiln.accel.vdla.external import VDLAExternalModule
from kiln.accel.vdla.partition import partition_for_vdla
from kiln.runtime import GraphExecutor
from kiln.runtime.external import external_modules
from kiln.testing.int8_resnet import int8_resnet18


def _run(lib, x):
    m = GraphExecutor(lib)
    m.set_input("data", x)
    m.run()
    return m, m.get_output(0).numpy()


def _is_conv(name: str) -> bool:
    return "conv2d" in name


def plot(totals, path, clock_mhz):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.8, 3.6))
    names = list(totals)
    left = [0.0] * len(names)
    for key, label in (("vdla_conv_ms", f"conv on VDLA (simulated, {clock_mhz:g} MHz)"),
                       ("cpu_conv_ms", "conv on the CPU"),
                       ("other_ms", "other layers (CPU)")):
        widths = [totals[n][key] for n in names]
        ax.barh(names, widths, left=left, label=label)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel("time per inference (ms)")
    ax.set_title("int8 ResNet-18: CPU only vs VDLA + CPU", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--png", default="vdla_resnet.png")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    config = VDLAConfig()
    mod, x, reference = int8_resnet18(width=args.width, image_size=args.image_size,
                                      num_classes=1000)
    want = reference(x)

    t0 = time.perf_counter()
    cpu_lib = kiln.compile(mod)
    cpu_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    vdla_lib = kiln.compile(partition_for_vdla(mod))
    vdla_compile = time.perf_counter() - t0
    print(f"compiled: CPU {cpu_compile:.1f} s, VDLA + CPU {vdla_compile:.1f} s")

    cpu_m, cpu_out = _run(cpu_lib, x)
    time.sleep(0.05)
    vdla_m, vdla_out = _run(vdla_lib, x)
    scale = float(np.abs(want).max())
    err_cpu = float(np.abs(cpu_out - want).max())
    err_vdla = float(np.abs(vdla_out - want).max())
    same = bool(np.array_equal(cpu_out, vdla_out))
    print(f"outputs: max|CPU - numpy| {err_cpu:.2e}, max|VDLA - numpy| {err_vdla:.2e} "
          f"(max|numpy| {scale:.1f}); VDLA output equals the CPU's: {same}")

    cpu_prof = kiln.runtime.profile(cpu_m, number=10, repeat=5)
    time.sleep(0.05)
    # (each run simulates every VDLA layer in Python, tens of seconds: few runs)
    vdla_prof = kiln.runtime.profile(vdla_m, number=1, repeat=3)
    externals = [e for e in external_modules(vdla_lib) if isinstance(e, VDLAExternalModule)]
    vdla_names = {n for e in externals for n in e.function_names()}
    vdla_m.run()              # one more run: last_stats are this run's simulated times
    sim_layers = [(label, stats.seconds) for e in externals for n in e.function_names()
                  for label, stats in e.last_stats[n]]

    cpu_convs = sorted(((k.name, k.seconds) for k in cpu_prof.kernels if _is_conv(k.name)),
                       key=lambda kv: int(kv[0].rsplit("_", 1)[1]))
    def ms(kernels):
        return 1e3 * sum(k.seconds for k in kernels)

    vdla_cpu = [k for k in vdla_prof.kernels if k.name not in vdla_names]
    totals = {
        "CPU (kiln int8)": {
            "vdla_conv_ms": 0.0,
            "cpu_conv_ms": ms(k for k in cpu_prof.kernels if _is_conv(k.name)),
            "other_ms": ms(k for k in cpu_prof.kernels if not _is_conv(k.name))},
        "VDLA + CPU": {
            "vdla_conv_ms": 1e3 * sum(s for _, s in sim_layers),
            "cpu_conv_ms": ms(k for k in vdla_cpu if _is_conv(k.name)),
            "other_ms": ms(k for k in vdla_cpu if not _is_conv(k.name))},
    }
    print(f"\nVDLA {config.block_in}x{config.block_out} GEMM at {config.clock_mhz:g} MHz "
          f"(simulated cycles); CPU kernels measured on this machine, medians")
    print(f"{'layer on VDLA':<34} {'VDLA (ms, sim.)':>16}")
    for label, seconds in sim_layers:
        print(f"{label:<34} {seconds * 1e3:>16.3f}")
    print(f"\n{'CPU conv kernel':<58} {'CPU (ms)':>9}")
    for name, seconds in cpu_convs:
        print(f"{name:<58} {seconds * 1e3:>9.3f}")
    print()
    for name, t in totals.items():
        print(f"{name:<16} conv on VDLA {t['vdla_conv_ms']:6.2f} ms (simulated) + conv on the "
              f"CPU {t['cpu_conv_ms']:6.2f} ms + other {t['other_ms']:5.2f} ms = "
              f"{sum(t.values()):6.2f} ms")
    plot(totals, args.png, config.clock_mhz)
    print(f"figure: {args.png}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"clock_mhz": config.clock_mhz, "totals": totals,
                       "vdla_layers_ms": [(label, s * 1e3) for label, s in sim_layers],
                       "cpu_conv_kernels_ms": [(n, s * 1e3) for n, s in cpu_convs],
                       "max_abs_err_cpu": err_cpu, "max_abs_err_vdla": err_vdla,
                       "outputs_equal": same, "compile_s": {"cpu": cpu_compile,
                                                            "vdla": vdla_compile}},
                      fh, indent=2)
    if not same or err_cpu > 1e-3 * scale:
        raise SystemExit("the VDLA model's output differs from the CPU's or numpy's")


if __name__ == "__main__":
    main()

"""Bit-serial conv2d (kiln/topi/nn/bitserial.py) against kiln's int8 and float32 convolutions on
the ResNet-18 layers of the TVM paper (Fig. 18), batch 1, one process, interleaved.

    python bench/bitserial.py [--layers C2 C6 C12] [--quick] [--json out.json]

Systems, each the kernel kiln.compile picks for a one-convolution graph, called directly (the
graph's layout transforms around the int8 and float32 kernels are not timed; the bit-serial
kernel's own data packing is; a float 1x1 convolution is kiln's batch_matmul):
    bitserial A1W1, A2W1   nn.bitserial_conv2d, NHWC uint8 data, 1-bit weights packed in uint32
                           words, 1- or 2-bit activations (packed inside the kernel)
    int8                   nn.conv2d uint8 x int8 → int32, which ConvertConvLayout makes
                           nn.contrib_conv2d_nchwc_int8 (7-bit weights, so AVX2's vpmaddubsw)
    float32                nn.conv2d float32 (blocked NCHWc, or Winograd where kiln picks it)

Median of rounds x runs samples (each at least 2 ms of calls), 2 threads.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

THREADS = peers.configure_threads(int(os.environ.get("BENCH_THREADS", "2")))

import numpy as np  # noqa: E402

# name: (H = W, C_in, C_out, kernel, stride), the paper's Table 2 / Fig. 18 layers.
LAYERS = {
    "C2": (56, 64, 64, 3, 1),
    "C3": (56, 64, 64, 1, 1),
    "C4": (56, 64, 128, 3, 2),
    "C5": (56, 64, 128, 1, 2),
    "C6": (28, 128, 128, 3, 1),
    "C7": (28, 128, 256, 3, 2),
    "C8": (28, 128, 256, 1, 2),
    "C9": (14, 256, 256, 3, 1),
    "C10": (14, 256, 512, 3, 2),
    "C11": (14, 256, 512, 1, 2),
    "C12": (7, 512, 512, 3, 1),
}
QUICK_LAYERS = ("C2", "C6", "C12")
SYSTEMS = ("bitserial A1W1", "bitserial A2W1", "int8", "float32")


def _kernel_call(func, candidates: list):
    """A no-argument call of the heaviest kernel (most flops) of a compiled one-convolution
    graph, with the graph's constants; its other inputs are the first of `candidates` (the
    same data in the layouts the graph may hand it on: blocked, NCHW) of its shape, or of its
    size reshaped (a 1x1 convolution that kiln runs as a batch_matmul reads NCHW as
    (1, C, H*W)). Returns (call, kernel name)."""
    import kiln
    from kiln.graph import IRModule
    lib = kiln.compile(IRModule.from_expr(func))
    graph = json.loads(lib.graph_json)
    kernel = max(graph["kernels"], key=lambda k: graph["flops"].get(k["func"], 0))
    params = {p: np.asarray(v.numpy() if hasattr(v, "numpy") else v)
              for p, v in lib.params.items()}
    by_entry = {c["entry"]: params[c["name"]] for c in graph["constants"]}

    def data_for(entry):
        shape = tuple(graph["entries"][entry]["shape"])
        same = [a for a in candidates if a.shape == shape]
        sized = [a.reshape(shape) for a in candidates if a.size == int(np.prod(shape))]
        if not same + sized:
            raise RuntimeError(f"{kernel['func']}: no input array fits entry {entry} {shape}")
        return (same + sized)[0]

    args = [by_entry[e] if e in by_entry else data_for(e) for e in kernel["inputs"]]
    spec = graph["entries"][kernel["outputs"][0]]
    out = np.zeros(spec["shape"], spec["dtype"])
    fn = lib.get_function(kernel["func"])
    return (lambda: fn(*args, out)), kernel["func"]


def _bitserial(x_nhwc, w_hwio, stride, pad, abits):
    from kiln.graph import Function, call, const, var
    from kiln.topi.nn.bitserial import pack_conv_kernel_numpy
    X = var("x", x_nhwc.shape, "uint8")
    y = call("nn.bitserial_conv2d", X, const(pack_conv_kernel_numpy(w_hwio, 1)),
             strides=(stride, stride), padding=(pad, pad), activation_bits=abits, weight_bits=1)
    return _kernel_call(Function([X], y), [x_nhwc])


def _blocked_conv(x_nchw, w_oihw, stride, pad, out_dtype=None):
    """kiln's own convolution of NCHW data through a graph whose input arrives blocked
    (NCHW8c), so the kernel reads the array we pass."""
    from kiln.graph import Function, call, const, var
    from kiln.topi.nn.conv2d_nchwc import nchw_to_nchwc
    block = 8
    xb = nchw_to_nchwc(x_nchw, block)
    X = var("x", xb.shape, str(x_nchw.dtype))
    x = call("layout_transform", X, src_layout=f"NCHW{block}c", dst_layout="NCHW")
    kw = {"out_dtype": out_dtype} if out_dtype else {}
    y = call("nn.conv2d", x, const(w_oihw), strides=(stride, stride),
             padding=(pad, pad, pad, pad), **kw)
    # A strided 1x1 convolution is a slice, then the batch_matmul.
    strided = np.ascontiguousarray(x_nchw[:, :, ::stride, ::stride])
    return _kernel_call(Function([X], y), [xb, x_nchw, strided])


def prepare(layer: str) -> tuple:
    h, c, o, k, stride = LAYERS[layer]
    pad = k // 2
    rng = np.random.default_rng(0)
    calls, kernels = {}, {}
    w1 = rng.integers(0, 2, (k, k, c, o)).astype("uint8")
    for abits in (1, 2):
        x = rng.integers(0, 1 << abits, (1, h, h, c)).astype("uint8")
        calls[f"bitserial A{abits}W1"], kernels[f"A{abits}W1"] = _bitserial(x, w1, stride, pad,
                                                                           abits)
    x8 = rng.integers(0, 256, (1, c, h, h)).astype("uint8")
    w8 = rng.integers(-64, 64, (o, c, k, k)).astype("int8")
    calls["int8"], kernels["int8"] = _blocked_conv(x8, w8, stride, pad, "int32")
    xf = rng.standard_normal((1, c, h, h)).astype("float32")
    wf = rng.standard_normal((o, c, k, k)).astype("float32")
    calls["float32"], kernels["float32"] = _blocked_conv(xf, wf, stride, pad)
    oh = (h + 2 * pad - k) // stride + 1
    info = {"shape": {"hw": h, "in": c, "out": o, "kernel": k, "stride": stride},
            "macs": oh * oh * o * c * k * k, "kernels": kernels}
    return calls, info


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", nargs="+", choices=sorted(LAYERS), default=None)
    peers.add_sampling_args(p)
    args = p.parse_args(argv)
    layers = args.layers or (QUICK_LAYERS if args.quick else tuple(LAYERS))
    if args.quick:
        args.rounds, args.runs = 2, 2
    peers.warn_if_busy()
    from kiln.target import Target
    target = Target("llvm")
    print(f"bit-serial vs int8 vs float32 conv2d, batch 1, {THREADS} threads, target "
          f"{target} ({target.vector_width_bits}-bit vectors); median of "
          f"{args.rounds}x{args.runs} interleaved samples")
    results = {}
    for layer in layers:
        calls, info = prepare(layer)
        results[layer] = peers.time_case(calls, info, args)
        print(f"  {layer}: done", file=sys.stderr, flush=True)

    rows = []
    for layer, r in results.items():
        ms = r["median_ms"]
        s = r["shape"]
        rows.append([layer, f"{s['hw']}x{s['hw']} {s['in']}->{s['out']} {s['kernel']}x"
                            f"{s['kernel']} s{s['stride']}",
                     *(peers.fmt(ms[name], ".3f") for name in SYSTEMS),
                     peers.fmt(ms["int8"] / ms["bitserial A1W1"]),
                     peers.fmt(ms["int8"] / ms["bitserial A2W1"]),
                     peers.fmt(ms["float32"] / ms["bitserial A1W1"]),
                     peers.fmt(ms["float32"] / ms["bitserial A2W1"])])
    print(peers.format_table(["layer", "shape", *(f"{n} ms" for n in SYSTEMS),
                              "int8/A1W1", "int8/A2W1", "f32/A1W1", "f32/A2W1"], rows))
    print("ratios > 1: the bit-serial kernel is faster")
    if args.json:
        peers.write_json(args.json, {"machine": peers.machine_info(THREADS),
                                     "rounds": args.rounds, "runs": args.runs,
                                     "layers": results})
    return results


if __name__ == "__main__":
    main()

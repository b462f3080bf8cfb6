"""`make demo`: import a ResNet-18 (plain torch.nn, seeded weights) from PyTorch, compile it with
kiln, run it, and print the agreement with PyTorch and both latencies (medians, 2 threads,
same process, systems interleaved with a pause between them)."""
from __future__ import annotations

import os
import statistics
import time

THREADS = os.environ.setdefault("KILN_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend import from_pytorch  # noqa: E402
from kiln.testing.models import example_input, resnet18  # noqa: E402


def _median_ms(fn, runs=15):
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main():
    torch.set_num_threads(int(THREADS))
    model = resnet18(seed=0)
    (x,) = example_input(model)
    t0 = time.perf_counter()
    mod, params = from_pytorch(model, (x,))
    lib = kiln.compile(mod, target="llvm", params=params)
    compile_s = time.perf_counter() - t0
    m = kiln.runtime.GraphExecutor(lib)
    m.set_input(m.get_input_names()[0], x.numpy())
    m.run()
    with torch.no_grad():
        ref = model(x).numpy()
    out = m.get_output(0).numpy()
    err = np.abs(out - ref).max() / np.abs(ref).max()
    kiln_ms, torch_ms = [], []
    with torch.no_grad():
        for _ in range(3):
            kiln_ms.append(_median_ms(m.run))
            time.sleep(0.05)
            torch_ms.append(_median_ms(lambda: model(x)))
            time.sleep(0.05)
    k, t = statistics.median(kiln_ms), statistics.median(torch_ms)
    print(f"ResNet-18, 1x3x224x224, float32, {THREADS} threads")
    print(f"  import + compile: {compile_s:.1f} s ({len(lib.graph['kernels'])} kernel calls)")
    print(f"  agreement with PyTorch: max |kiln - torch| / max |torch| = {err:.1e}; "
          f"top-1 class {'matches' if out.argmax() == ref.argmax() else 'DIFFERS'}")
    print(f"  latency: kiln {k:.1f} ms, PyTorch eager {t:.1f} ms (PyTorch / kiln = {t / k:.2f}x)")


if __name__ == "__main__":
    main()

"""Compile time of whole models: import from PyTorch, kiln.compile cold and warm, and check.

    python bench/compile_time.py [--models resnet18 densenet121 mobilenet_v2 bert] [--json out.json]

Each model is compiled in fresh processes, with an empty kernel cache of its own ("cold": every
kernel is lowered and compiled by LLVM, in worker processes) and then again in a new process
with that cache filled ("warm"), as a user compiling the same model a second time. Prints the
import time, both compile times (passes + fusion + kernels + link), the number of kernel calls
and distinct kernels, the agreement with PyTorch and whether the warm build's outputs equal the
cold build's bit for bit; then where the cold compile's time went (kiln.compile_timings; --phases
N shows the N costliest phases, 0 none; CPU seconds in build workers are listed apart).
KILN_BUILD_JOBS sets the number of build workers (default: the cores).

kiln's own modules are byte-compiled first (into the __pycache__ folders git ignores), as an
installed package's are and as `make test` does: this machine sets PYTHONDONTWRITEBYTECODE, under
which every process compiled kiln's sources again, 0.1-0.2 s of each compile (which imports the
compiler lazily).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KILN_NUM_THREADS", "2")

MODELS = ("resnet18", "densenet121", "mobilenet_v2", "bert")
LIMITS_S = {"resnet18": 4.0, "mobilenet_v2": 4.0, "bert": 4.0, "densenet121": 10.0}   # issue 33
WARM_LIMITS_S = {"resnet18": 0.5}


def measure(name: str) -> dict:
    """Import and compile model `name` in this process (its kernel cache as the environment
    says), run it, and compare with PyTorch."""
    import numpy as np
    import torch

    import kiln
    from kiln.frontend import from_pytorch
    from kiln.testing import models

    model = getattr(models, name)()
    inputs = models.example_input(model)
    with kiln.compile_timings() as timings:
        t0 = time.perf_counter()
        mod, params = from_pytorch(model, inputs)
        t1 = time.perf_counter()
        lib = kiln.compile(mod, target="llvm", params=params)
        t2 = time.perf_counter()
    m = kiln.runtime.GraphExecutor(lib)
    for input_name, value in zip(m.get_input_names(), inputs):
        m.set_input(input_name, value.numpy())
    m.run()
    out = m.get_output(0).numpy()
    with torch.no_grad():
        ref = model(*inputs)
    ref = (ref[0] if isinstance(ref, tuple) else ref).numpy()
    return {"model": name, "import_s": t1 - t0, "compile_s": t2 - t1,
            "kernel_calls": len(lib.graph["kernels"]), "distinct_kernels": len(lib.prim_funcs),
            "max_err_rel": float(np.abs(out - ref).max() / np.abs(ref).max()),
            "output_sha256": __import__("hashlib").sha256(out.tobytes()).hexdigest(),
            "timings": timings.to_json()}


def _child(name: str, cache: str) -> dict:
    env = {**os.environ, "KILN_KERNEL_CACHE_DIR": cache}
    result = subprocess.run([sys.executable, __file__, "--child", name], env=env,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"compiling {name} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _byte_compile() -> None:
    import kiln     # compileall writes bytecode whatever PYTHONDONTWRITEBYTECODE says
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.dirname(kiln.__file__)],
                   check=True, stdout=subprocess.DEVNULL)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--json")
    p.add_argument("--phases", type=int, default=12, metavar="N",
                   help="show each model's N costliest phases (default 12; 0: none)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child)))
        return None
    print(f"{'model':>14} {'import':>8} {'cold':>7} {'warm':>7} {'limits':>11} {'calls':>6} "
          f"{'kernels':>8} {'max err/max|y|':>15} {'warm = cold':>12}")
    rows = []
    _byte_compile()
    for name in args.models:
        with tempfile.TemporaryDirectory(prefix="kiln_bench_cache_") as cache:
            cold = _child(name, cache)
            time.sleep(0.05)
            warm = _child(name, cache)
        r = {**cold, "warm_compile_s": warm["compile_s"], "warm_timings": warm["timings"],
             "warm_identical": warm["output_sha256"] == cold["output_sha256"],
             "limit_s": LIMITS_S.get(name), "warm_limit_s": WARM_LIMITS_S.get(name)}
        rows.append(r)
        limits = f"{r['limit_s'] or 0:.0f}/{r['warm_limit_s'] or 0:.1f}s"
        print(f"{name:>14} {r['import_s']:>7.2f}s {r['compile_s']:>6.2f}s "
              f"{r['warm_compile_s']:>6.2f}s {limits:>11} {r['kernel_calls']:>6} "
              f"{r['distinct_kernels']:>8} {r['max_err_rel']:>15.2e} "
              f"{str(r['warm_identical']):>12}", flush=True)
        if args.phases:
            t = r["timings"]
            groups = ", ".join(f"{g} {s:.2f}" for g, s in sorted(t["groups"].items(),
                                                                  key=lambda kv: -kv[1]))
            print(f"{'':>14} cold, seconds by stage: {groups}")
            for phase, seconds in sorted(t["phases"].items(), key=lambda kv: -kv[1])[:args.phases]:
                print(f"{'':>16} {phase:<34} {seconds:7.3f}s")
            work = t.get("worker_phases", {})
            if work:
                print(f"{'':>14} in build workers, CPU seconds: {sum(work.values()):.2f}")
                for phase, seconds in list(work.items())[:args.phases]:
                    print(f"{'':>16} {phase:<34} {seconds:7.3f}s")
            warm_phases = sorted(r["warm_timings"]["phases"].items(), key=lambda kv: -kv[1])
            print(f"{'':>14} warm: " + ", ".join(f"{n} {s:.3f}" for n, s in warm_phases[:6]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return rows


if __name__ == "__main__":
    main()

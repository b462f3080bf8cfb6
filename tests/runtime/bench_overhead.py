"""Measure the runtime's fixed costs (not a test; run by hand, with the machine otherwise idle):

    .venv/bin/python tests/runtime/bench_overhead.py

Prints the per-call overhead of a PackedFunction (an empty native function with 3 buffers,
numpy and NDArray arguments) and the cost of one kiln_parallel_launch of empty tasks, timed
from C so that ctypes is not part of the figure.
"""
import ctypes
import sys
import tempfile
import timeit
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE), str(HERE.parent)]       # test_module, and tests/helpers_native

import kiln.runtime as rt                           # noqa: E402
from helpers_native import address_of, compile_c    # noqa: E402
from test_module import INFOS                       # noqa: E402


def best_of(stmt, number, repeat=7) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number


def main():
    out = Path(tempfile.mkdtemp(prefix="kiln-bench-"))
    kernels, tasks = compile_c(HERE / "kernels.c", out), compile_c(HERE / "tasks.c", out)
    mod = rt.Module(INFOS, lambda name: address_of(kernels, name), {}, "vadd", kernels)
    f = mod["empty3"]
    a, b, c = (np.zeros(1024, "float32") for _ in range(3))
    na, nb, nc = (rt.array(x) for x in (a, b, c))
    raw = f._native
    print(f"ctypes call alone:               {best_of(lambda: raw(0, 0), 20000) * 1e6:6.2f} us")
    print(f"empty3(numpy x3):                {best_of(lambda: f(a, b, c), 20000) * 1e6:6.2f} us")
    print(f"empty3(NDArray x3):              {best_of(lambda: f(na, nb, nc), 20000) * 1e6:6.2f} us")
    timer = mod.time_evaluator("empty3", number=100000, repeat=5)
    print(f"time_evaluator(empty3) per call: {timer(a, b, c).min * 1e9:6.1f} ns")

    tasks.time_launches.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32]
    tasks.time_launches.restype = ctypes.c_double
    launch = rt.parallel_launch_address()
    for threads in sorted({1, 2, rt.num_threads()}):
        rt.set_num_threads(threads)
        for num_tasks in (0, 64):
            seconds = min(tasks.time_launches(launch, 20000, num_tasks) for _ in range(5))
            print(f"parallel launch, {threads} thread(s), num_tasks={num_tasks:2d}: "
                  f"{seconds * 1e6:6.2f} us")


if __name__ == "__main__":
    main()

"""Shared helpers of the peer benchmarks (bench/models.py, bench/ops.py): thread set-up, the
interleaved timing loop, the systems compared (kiln, PyTorch eager, torch.compile, ONNX Runtime),
peak RSS, child processes for the memory column, tables and JSON.

Call `configure_threads()` before importing kiln or torch: the pool sizes are read at import.

    >>> import peers; THREADS = peers.configure_threads(2)   # doctest: +SKIP
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable

PAUSE_S = 0.05        # between systems: one runtime's spinning workers slow the next one
NOT_AVAILABLE = "n/a"


def configure_threads(threads: int = 2) -> int:
    """Fix every runtime's thread count through the environment (kiln's pool, OpenMP, MKL).

    Example:
        >>> configure_threads(2)
        2
    """
    imported = "torch" in sys.modules or "kiln" in sys.modules
    if imported and os.environ.get("KILN_NUM_THREADS") != str(threads):
        raise RuntimeError("configure_threads() must run before torch and kiln are imported; "
                           "their thread pools read the environment at import")
    os.environ["KILN_NUM_THREADS"] = str(threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))
    return threads


# ---------------------------------------------------------------------------------- timing
def calibrate_number(fn: Callable, min_sample_s: float) -> int:
    """Calls per timed sample so that one sample lasts at least `min_sample_s` (timer noise and
    per-call overheads of a few µs would otherwise dominate microsecond kernels).

    Example:
        >>> calibrate_number(lambda: None, 1e-4) >= 1
        True
    """
    number = 1
    while number < 1 << 14:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        if time.perf_counter() - t0 >= min_sample_s:
            break
        number *= 2
    return number


def interleave(systems: dict, rounds: int, runs: int, warmup: int = 2,
               min_sample_s: float = 0.0, pause_s: float = PAUSE_S) -> dict:
    """Time several systems in rounds: each round runs every system `runs` times (one untimed call
    first), pausing `pause_s` between systems. Returns {name: [seconds per call, ...]} with
    rounds * runs samples each; take the median.

    Example:
        >>> t = interleave({"a": lambda: None, "b": lambda: None}, rounds=2, runs=3, pause_s=0)
        >>> sorted(t), len(t["a"])
        (['a', 'b'], 6)
    """
    numbers = {}
    for name, fn in systems.items():
        for _ in range(warmup):
            fn()
        numbers[name] = calibrate_number(fn, min_sample_s) if min_sample_s > 0 else 1
        time.sleep(pause_s)
    samples = {name: [] for name in systems}
    for _ in range(rounds):
        for name, fn in systems.items():
            fn()
            number = numbers[name]
            for _ in range(runs):
                t0 = time.perf_counter()
                for _ in range(number):
                    fn()
                samples[name].append((time.perf_counter() - t0) / number)
            time.sleep(pause_s)
    return samples


def add_sampling_args(parser) -> None:
    """The options every single-op bench shares: --rounds, --runs, --quick (the caller sets
    2 rounds x 2 runs), --json.

    Example:
        >>> import argparse; p = argparse.ArgumentParser(); add_sampling_args(p)
        >>> p.parse_args(["--quick"]).rounds
        5
    """
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5,
                        help="timed samples per system per round")
    parser.add_argument("--quick", action="store_true",
                        help="2 rounds x 2 samples, for smoke testing")
    parser.add_argument("--json", help="write the results to this file")


def time_case(calls: dict, info: dict, args) -> dict:
    """Time one case's systems interleaved, args.rounds x args.runs samples of >= 2 ms (1 ms
    with --quick), and add to `info` each system's median_ms, min_ms and, with
    info["flops"], gflops.

    Example:
        >>> info = time_case({"a": lambda: None}, {"flops": 1e6}, args)   # doctest: +SKIP
    """
    samples = interleave(calls, args.rounds, args.runs,
                         min_sample_s=1e-3 if args.quick else 2e-3)
    info["median_ms"] = {s: median_ms(v) for s, v in samples.items()}
    info["min_ms"] = {s: min(v) * 1e3 for s, v in samples.items()}
    if info.get("flops"):
        info["gflops"] = {s: info["flops"] / (ms * 1e-3) / 1e9
                          for s, ms in info["median_ms"].items()}
    return info


def median_ms(samples: list) -> float:
    """Median of samples in seconds, in milliseconds.

    Example:
        >>> median_ms([0.001, 0.003, 0.002])
        2.0
    """
    return statistics.median(samples) * 1e3


def warn_if_busy(limit: float = 0.5) -> float:
    """Warn on stderr when the machine is already loaded (other processes skew every figure, and
    spinning thread pools collapse under contention). Returns the 1-minute load average.

    Example:
        >>> warn_if_busy(limit=1e9) >= 0
        True
    """
    load = os.getloadavg()[0]
    if load > limit:
        print(f"warning: 1-minute load average is {load:.1f} before the bench; other processes "
              f"share these {os.cpu_count()} cores, so treat the figures as rough", file=sys.stderr)
    return load


# ---------------------------------------------------------------------------------- memory
def peak_rss_mb() -> float:
    """This process's peak resident set size (VmHWM) in MiB.

    Example:
        >>> peak_rss_mb() > 0
        True
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(argv: list, timeout_s: float = 900) -> dict:
    """Run `python argv...` in a fresh process and parse the JSON object on its last stdout line;
    failures come back as {"error": ...} rather than raising, so one system cannot stop a bench.

    Example:
        >>> run_child(["-c", "print('{\\"x\\": 1}')"])
        {'x': 1}
    """
    try:
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                              timeout=timeout_s, env=os.environ.copy())
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {proc.returncode}: {tail[0][:200]}"}
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"unreadable child output: {lines[-1][:200]}"}


# ---------------------------------------------------------------------------------- systems
def kiln_compile(model, inputs, tuning_log: str | None = None) -> tuple:
    """Import a torch model with kiln.frontend.from_pytorch and kiln.compile it (with the best
    configs of `tuning_log` when given). Returns (executor with the inputs set, library,
    import seconds, compile seconds).

    Example:
        >>> ex, lib, import_s, compile_s = kiln_compile(model, (x,))   # doctest: +SKIP
    """
    import kiln
    from kiln.frontend import from_pytorch
    t0 = time.perf_counter()
    mod, params = from_pytorch(model, inputs)
    t1 = time.perf_counter()
    if tuning_log is None:
        lib = kiln.compile(mod, target="llvm", params=params)
    else:
        from kiln.autotvm import apply_history_best
        with apply_history_best(tuning_log):
            lib = kiln.compile(mod, target="llvm", params=params)
    t2 = time.perf_counter()
    ex = kiln_executor(lib, [x.numpy() for x in inputs])
    return ex, lib, t1 - t0, t2 - t1


def kiln_executor(lib, arrays: list):
    """A kiln GraphExecutor for a compiled library with its inputs set (numpy arrays, in order).

    Example:
        >>> ex = kiln_executor(lib, [x]); ex.run()                     # doctest: +SKIP
    """
    import kiln
    ex = kiln.runtime.GraphExecutor(lib)
    for name, value in zip(ex.get_input_names(), arrays):
        ex.set_input(name, value)
    return ex


def torch_eager(model, inputs) -> Callable:
    """A no-argument call of the model in inference mode.

    Example:
        >>> fn = torch_eager(model, (x,)); fn()                         # doctest: +SKIP
    """
    import torch

    def call():
        with torch.inference_mode():
            return model(*inputs)
    return call


def torch_compiled(model, inputs) -> tuple:
    """torch.compile(model) (mode "default"), compiled by a first call. Returns (call, seconds to
    compile); raises whatever torch raises when it cannot compile on this machine.

    Example:
        >>> fn, compile_s = torch_compiled(model, (x,))                 # doctest: +SKIP
    """
    import torch
    compiled = torch.compile(model, mode="default")

    def call():
        with torch.inference_mode():
            return compiled(*inputs)
    t0 = time.perf_counter()
    call()
    return call, time.perf_counter() - t0


def onnx_export(model, inputs, path: str, input_names=None) -> str:
    """Export with the TorchScript exporter (dynamo=False), opset 17.

    Example:
        >>> onnx_export(model, (x,), "/tmp/m.onnx")                    # doctest: +SKIP
    """
    import torch
    names = input_names or [f"input{i}" for i in range(len(inputs))]
    with torch.no_grad():
        torch.onnx.export(model, tuple(inputs), path, dynamo=False, opset_version=17,
                          input_names=names, output_names=["output"])
    return path


def onnxruntime_call(path: str, arrays: list, threads: int) -> Callable:
    """An ONNX Runtime session (intra-op `threads`, inter-op 1, sequential, all graph
    optimizations) bound once to the inputs and an output through IOBinding, so a call costs
    what kiln's pre-set executor.run() costs: no per-call argument conversion.

    Example:
        >>> fn = onnxruntime_call("/tmp/m.onnx", [x], 2); fn()          # doctest: +SKIP
    """
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    binding = sess.io_binding()
    for meta, value in zip(sess.get_inputs(), arrays):
        binding.bind_cpu_input(meta.name, value)
    for meta in sess.get_outputs():
        binding.bind_output(meta.name, "cpu")

    def call():
        sess.run_with_iobinding(binding)
    call.session = sess
    call.binding = binding
    return call


def short_error(exc: BaseException) -> str:
    """One line naming an exception, for a table cell's footnote and the JSON.

    Example:
        >>> short_error(ValueError("bad\\nmore"))
        'ValueError: bad'
    """
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:240] if text else ''}"


# ---------------------------------------------------------------------------------- output
def machine_info(threads: int) -> dict:
    """Versions and the thread count, recorded with every JSON result.

    Example:
        >>> machine_info(2)["threads"]
        2
    """
    info = {"threads": threads, "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            "loadavg_1min": os.getloadavg()[0]}
    for mod in ("torch", "onnxruntime", "numpy", "llvmlite"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing peer is reported, not fatal
            info[mod] = None
    try:
        with open("/proc/cpuinfo") as fh:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in fh
                                if ln.startswith("model name")), None)
    except OSError:
        info["cpu"] = None
    return info


def format_table(headers: list, rows: list) -> str:
    """Right-aligned text table; cells are strings already.

    Example:
        >>> print(format_table(["op", "ms"], [["C1", "10.5"]]))
        op   ms
        C1 10.5
    """
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    lines = [" ".join(str(h).rjust(w) for h, w in zip(headers, widths))]
    lines += [" ".join(str(c).rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def fmt(value, spec: str = ".2f") -> str:
    """A number formatted, or "n/a" for a missing one.

    Example:
        >>> fmt(None), fmt(1.234)
        ('n/a', '1.23')
    """
    return NOT_AVAILABLE if value is None else format(value, spec)


def spread_notes(results: dict, limit: float = 1.5) -> list:
    """Lines naming each (case, system) whose median is more than `limit` times its fastest
    sample: a sign that other processes disturbed that measurement.

    Example:
        >>> spread_notes({"C1": {"median_ms": {"kiln": 4.0}, "min_ms": {"kiln": 1.0}}})
        ['  note: C1 / kiln: median 4.0x its fastest sample (machine busy?)']
    """
    lines = []
    for case, r in results.items():
        for system, med in r["median_ms"].items():
            best = r["min_ms"].get(system)
            if best and med / best > limit:
                lines.append(f"  note: {case} / {system}: median {med / best:.1f}x its fastest "
                             f"sample (machine busy?)")
    return lines


def write_json(path: str, obj) -> None:
    """Write results as indented JSON.

    Example:
        >>> write_json("/tmp/out.json", {"a": 1})                       # doctest: +SKIP
    """
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=2)
        fh.write("\n")

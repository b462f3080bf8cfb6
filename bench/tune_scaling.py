"""Tuning throughput on a dask cluster as devices are added (issue 29), without a fleet.

    python bench/tune_scaling.py [--devices 1 2 4 8 16] [--build-seconds 1.0]
                                 [--trials-per-device 16] [--tuner random] [--real]
                                 [--json out.json] [--png out.png]

Simulated part: for each N, a LocalCluster of N worker processes (one thread each), every one
a simulated device (kiln.autotvm.cluster.simulate): a build holds a worker for
--build-seconds, a measurement holds a device for 50 ms plus its calls at the cost a fixed
table gives the config. The tuner, dask's scheduler and workers and the log are real, so the
figure shows what the tuning client and dask add to the devices' own time. --tasks test.matmul
tasks (default 4) are tuned with --trials-per-device x N trials each (so every run takes about
as long), --parallel-tasks at a time (default 3, as ClusterRunner's). Throughput counts every logged measurement
(trials and the re-measurements of each task's best) per second of wall time; the ideal is
N / (build + hold) per second, and `efficiency` is rate(N) / (N x rate(1)).

Real part (--real): the same two tasks tuned through a LocalCluster of two workers with this
machine's CPU as their device, and with the local builder and runner, real compiles (the
kernel cache off) and timings both. On a 2-core machine the two workers share the cores with
each other and with the client, so this shows the path works and what it costs, not a
speed-up.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

SHAPES = [(32, 32, 32), (48, 64, 32), (64, 64, 64), (96, 64, 48),
          (32, 96, 64), (64, 32, 96), (80, 48, 32), (48, 80, 64)]
HOLD = 0.05


def _tasks(shapes):
    import kiln.autotvm.testing  # noqa: F401  (registers test.matmul)
    from kiln import autotvm
    return [autotvm.create_task("test.matmul", (*s, "float32")) for s in shapes]


def _count(log: str) -> int:
    from kiln.autotvm import load_records
    return sum(1 for _ in load_records(log))


def _cluster(n: int, resources: dict):
    from distributed import LocalCluster
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                           resources=resources, dashboard_address=None,
                           worker_dashboard_address=None, silence_logs=50)
    from kiln.autotvm.cluster import connect
    client = connect(cluster)
    client.wait_for_workers(n, timeout=300)
    # Import kiln's job module in every worker before timing (a real fleet's workers have
    # long been up when a tuning run starts).
    client.run(__import__, "kiln.autotvm.cluster.jobs")
    return cluster


def simulated(n: int, args) -> dict:
    from kiln import autotvm
    from kiln.autotvm.cluster import close_connections
    from kiln.autotvm.cluster.simulate import (SIMULATED_RESOURCE, SimulatedBuilder,
                                               SimulatedRunner)
    cluster = _cluster(n, {SIMULATED_RESOURCE: 1})
    try:
        option = autotvm.measure_option(
            builder=SimulatedBuilder(cluster, build_seconds=args.build_seconds),
            runner=SimulatedRunner(cluster, hold_seconds=HOLD,
                                   parallel_tasks=args.parallel_tasks))
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "sim.jsonl")
            start = time.perf_counter()
            autotvm.tune_tasks(_tasks(SHAPES[:args.tasks]), args.trials_per_device * n,
                               log_file=log,
                               tuner=args.tuner, seed=0, measure_option=option, progress=None)
            wall = time.perf_counter() - start
            records = _count(log)
    finally:
        close_connections()
        cluster.close()
    return {"devices": n, "records": records, "seconds": wall, "rate": records / wall,
            "ideal": n / (args.build_seconds + HOLD)}


def real(args) -> dict:
    from kiln import autotvm
    from kiln.autotvm.cluster import (ClusterBuilder, ClusterRunner, close_connections,
                                      device_resource)
    # Every candidate compiled, not taken from the kernel cache: both runs try the same
    # configs (same seed), and the second would find the first one's builds there.
    os.environ["KILN_KERNEL_CACHE"] = "0"
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "local.jsonl")
        start = time.perf_counter()
        autotvm.tune_tasks(_tasks(SHAPES[:2]), args.real_trials, log_file=log,
                           tuner=args.tuner, seed=0, progress=None)
        wall = time.perf_counter() - start
        out["local"] = {"records": _count(log), "seconds": wall, "rate": _count(log) / wall}
        time.sleep(0.05)
        cluster = _cluster(2, {device_resource("llvm"): 1})
        try:
            option = autotvm.measure_option(builder=ClusterBuilder(cluster),
                                            runner=ClusterRunner(cluster))
            log = os.path.join(tmp, "cluster.jsonl")
            start = time.perf_counter()
            autotvm.tune_tasks(_tasks(SHAPES[:2]), args.real_trials, log_file=log,
                               tuner=args.tuner, seed=0, measure_option=option,
                               progress=None)
            wall = time.perf_counter() - start
            out["cluster2"] = {"records": _count(log), "seconds": wall,
                               "rate": _count(log) / wall,
                               "measured_on": option.runner.measured_on}
        finally:
            close_connections()
            cluster.close()
    return out


def _plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = [r["devices"] for r in rows]
    base = rows[0]["rate"] / rows[0]["devices"]
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.plot(n, [r["rate"] for r in rows], "o-", label="measured")
    ax.plot(n, [base * k for k in n], "--", label="linear from 1 device")
    ax.plot(n, [0.8 * base * k for k in n], ":", label="0.8 x linear")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(n, [str(k) for k in n])
    ax.set_xlabel("simulated devices (dask workers)")
    ax.set_ylabel("measurements per second")
    ax.set_title("kiln tuning throughput on a dask cluster")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--build-seconds", type=float, default=1.0)
    parser.add_argument("--trials-per-device", type=int, default=16)
    parser.add_argument("--tuner", default="random", choices=["random", "xgb", "ga", "grid"])
    parser.add_argument("--tasks", type=int, default=4, choices=range(1, len(SHAPES) + 1),
                        metavar=f"1..{len(SHAPES)}", help="test.matmul tasks (default 4)")
    parser.add_argument("--parallel-tasks", type=int, default=3,
                        help="tasks tuned at once (default 3)")
    parser.add_argument("--real", action="store_true", help="also tune through a real "
                        "2-worker LocalCluster and locally")
    parser.add_argument("--real-trials", type=int, default=24)
    parser.add_argument("--json")
    parser.add_argument("--png")
    args = parser.parse_args()

    rows = []
    print(f"simulated devices: build {args.build_seconds:g} s, hold {HOLD:g} s + calls, "
          f"tuner {args.tuner}, {args.tasks} tasks x {args.trials_per_device} x N trials, "
          f"{args.parallel_tasks} at once")
    print(f"{'N':>3} {'records':>8} {'wall s':>8} {'rate/s':>8} {'ideal/s':>8} "
          f"{'of ideal':>9} {'efficiency':>10}")
    for n in args.devices:
        row = simulated(n, args)
        rows.append(row)
        row["efficiency"] = row["rate"] / (n * rows[0]["rate"] / rows[0]["devices"])
        print(f"{n:>3} {row['records']:>8} {row['seconds']:>8.1f} {row['rate']:>8.2f} "
              f"{row['ideal']:>8.2f} {row['rate'] / row['ideal']:>9.2f} "
              f"{row['efficiency']:>10.2f}", flush=True)
        time.sleep(0.05)
    result = {"simulated": rows, "tuner": args.tuner, "build_seconds": args.build_seconds}
    if args.real:
        result["real"] = real(args)
        local, cl = result["real"]["local"], result["real"]["cluster2"]
        print(f"real, {args.real_trials} trials x 2 tasks: local builder+runner "
              f"{local['rate']:.2f} measurements/s ({local['seconds']:.1f} s); LocalCluster of 2 "
              f"workers {cl['rate']:.2f}/s ({cl['seconds']:.1f} s), measured on "
              f"{sorted(cl['measured_on'].values())}")
    linear = [r for r in rows if r["devices"] <= 8]
    worst = min(r["efficiency"] for r in linear)
    print(f"up to 8 devices, throughput is at least {worst:.2f} x linear "
          f"(median efficiency {statistics.median(r['efficiency'] for r in rows):.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.png:
        _plot(rows, args.png)


if __name__ == "__main__":
    main()

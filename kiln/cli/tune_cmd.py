"""`kiln tune MODEL -o tune.jsonl`: auto-tune a model's kernels, logging every measurement.

    kiln tune resnet18.onnx --budget 30m -o tune.jsonl
    kiln compile resnet18.onnx --tuning-log tune.jsonl -o resnet18.so

Resumable: an existing log is appended to, never overwritten, and the trials it holds are not
measured again, so running the same command after an interruption (or with a larger budget)
carries on where it stopped. A progress bar goes to stderr.

On a dask cluster (docs/tune_cluster.md): candidates are built on its workers and measured on
those declaring the target's device (`kiln device-key`), several tasks at once:

    kiln tune resnet18.onnx -o tune.jsonl --cluster tls://head:8786 \
        --tls-ca-file ca.pem --tls-cert tuner.pem --tls-key tuner.key

For another kind of CPU (docs/deploy_arm.md), candidates are timed on it through kiln's C
runtime: under QEMU here, or on a board reached by a login command:

    kiln tune resnet18.onnx --target rasp4b -o arm.jsonl [--device-login "ssh pi@board"]
"""
from __future__ import annotations

import sys

from .common import (add_model_arguments, load_model, output_path, parse_input_shapes,
                     parse_target, positive_int, seed_int)
from .errors import EXIT_INTERRUPTED, CLIError

HELP = "auto-tune a model's kernels into a tuning log (resumable)"

DEFAULT_TRIALS = 128        # tune_model's default: a ResNet-18 in about 40 minutes on 2 cores


def _tuners():
    from kiln.autotvm.tune_model import TUNERS
    return TUNERS


def add_arguments(parser) -> None:
    """The options of `kiln tune`.

    Example:
        >>> add_arguments(argparse.ArgumentParser())          # doctest: +SKIP
    """
    parser.add_argument("model", help="the model: an .onnx file or a .pt2 (saved torch.export "
                                      "program)")
    parser.add_argument("-o", "--output", required=True, metavar="LOG.jsonl",
                        help="the tuning log (JSON lines); an existing one is resumed")
    add_model_arguments(parser)
    parser.add_argument("--budget", metavar="TIME",
                        help="stop after this long, e.g. 90s, 30m, 1.5h (default: no limit)")
    parser.add_argument("--trials", type=positive_int, default=DEFAULT_TRIALS, metavar="N",
                        help=f"trials per task (default {DEFAULT_TRIALS})")
    parser.add_argument("--tuner", default=None, choices=_tuners(),
                        help="search strategy of the templates (default xgb: the cost-model "
                             "tuner); not with --auto")
    parser.add_argument("--seed", type=seed_int, default=None, help="seed of the search")
    parser.add_argument("--auto", action="store_true",
                        help="template-free auto-scheduling of every kernel (docs/"
                             "auto_schedule.md): --trials per kernel on average, allocated "
                             "by expected gain, searched by its own evolutionary search")
    cluster = parser.add_argument_group("tuning on a dask cluster")
    cluster.add_argument("--cluster", metavar="ADDRESS",
                         help="the dask scheduler, e.g. tls://head:8786: build on its workers, "
                              "measure on those with the target's device")
    cluster.add_argument("--tls-ca-file", metavar="PEM", help="the cluster's CA certificate")
    cluster.add_argument("--tls-cert", metavar="PEM", help="this client's certificate")
    cluster.add_argument("--tls-key", metavar="PEM", help="this client's private key")
    cluster.add_argument("--parallel-tasks", type=positive_int, default=None, metavar="N",
                         help="tasks tuned at once on the cluster (default 3)")
    device = parser.add_argument_group("tuning on a device (another kind of CPU)")
    device.add_argument("--device-login", metavar="COMMAND",
                        help="a command that runs a shell line on the device, e.g. 'ssh "
                             "pi@board'; candidates are timed there through kiln's C runtime "
                             "(default for a --target of another CPU: under QEMU here)")


def cluster_connection(args):
    """(address, security) of --cluster, connected (an unreachable scheduler fails before any
    work), or None without it; a CLIError for TLS options given in part or without --cluster.

    Example:
        >>> import argparse
        >>> cluster_connection(argparse.Namespace(cluster=None, tls_ca_file=None,
        ...                    tls_cert=None, tls_key=None, parallel_tasks=None)) is None
        True
    """
    tls = (args.tls_ca_file, args.tls_cert, args.tls_key)
    if args.cluster is None:
        if any(tls) or args.parallel_tasks is not None:
            raise CLIError("--tls-ca-file / --tls-cert / --tls-key / --parallel-tasks need "
                           "--cluster")
        return None
    if any(tls) and not all(tls):
        raise CLIError("TLS needs all three of --tls-ca-file, --tls-cert and --tls-key")
    from kiln.autotvm.cluster import connect, tls_security
    security = tls_security(*tls) if all(tls) else None
    connect(args.cluster, security)
    return args.cluster, security


def cluster_measure_option(connection, parallel_tasks: int, params):
    """The measure option for a cluster connection: builds on its workers, measurements on
    those with the target's device, candidates' weights evicted from the caches before each
    timed call when the model outgrows them (as tune_model's local default does).

    Example:
        >>> cluster_measure_option(("tcp://head:8786", None), 3, params)  # doctest: +SKIP
    """
    from kiln.autotvm import measure_option
    from kiln.autotvm.cluster import ClusterBuilder, ClusterRunner
    from kiln.autotvm.tune_model import flush_for

    address, security = connection
    return measure_option(builder=ClusterBuilder(address, security=security),
                          runner=ClusterRunner(address, security=security,
                                               parallel_tasks=parallel_tasks,
                                               enable_cpu_cache_flush=flush_for(params)))


def device_measure_option(target, login: str | None, params):
    """The measure option that times candidates on the target's device through kiln's C
    runtime (autotvm.DeviceRunner): on a board reached by `login` (a shell-quoted command),
    else here, under QEMU for another instruction set.

    Example:
        >>> device_measure_option(Target("rasp4b"), None, params).runner.triple  # doctest: +SKIP
        'aarch64-linux-gnu'
    """
    import shlex

    from kiln.autotvm import DeviceRunner, measure_option
    from kiln.autotvm.tune_model import flush_for
    return measure_option(runner=DeviceRunner(
        target.mtriple, login=shlex.split(login) if login else None,
        enable_cpu_cache_flush=flush_for(params)))


def parse_budget(text):
    """Seconds from a --budget value (None: no limit); a CLIError naming the bad value.

    Example:
        >>> parse_budget("30m"), parse_budget(None)
        (1800.0, None)
    """
    from kiln.autotvm.tune_model import parse_duration
    try:
        return parse_duration(text)
    except ValueError as err:
        raise CLIError(f"bad --budget: {err}") from None


def check_appendable_log(path) -> None:
    """A CLIError unless `path` is missing, empty, or text whose first line is a JSON object:
    kiln tune appends to its log, and appending to another kind of file would damage it.

    Example:
        >>> check_appendable_log("no-such-log.jsonl")
    """
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except FileNotFoundError:
        return
    first = next((line.strip() for line in head.splitlines() if line.strip()), b"")
    try:
        head.decode("utf-8")
        looks_like_log = not first or first.startswith(b"{")
    except UnicodeDecodeError as err:
        # a multi-byte character cut by the 64 KiB read is not a sign of a binary file
        looks_like_log = err.start >= len(head) - 3 and first.startswith(b"{")
    if not looks_like_log:
        raise CLIError(f"-o {path}: the file exists and is not a tuning log (JSON lines); "
                       f"kiln tune appends to its log, so choose another file")


def count_records(path) -> int:
    """How many tuning records a log holds (0 for a log that does not exist yet).

    Example:
        >>> count_records("no-such-log.jsonl")
        0
    """
    from kiln.autotvm import load_records
    try:
        return sum(1 for _ in load_records(str(path)))
    except FileNotFoundError:
        return 0


def run(args) -> int:
    """Tune args.model into args.output; say what was resumed and what was added.

    Example:
        >>> run(build_parser("tune").parse_args(["tune", "m.onnx", "-o", "t.jsonl"]))  # doctest: +SKIP
        0
    """
    if args.auto and args.tuner is not None:
        raise CLIError("--tuner chooses the templates' search strategy: --auto searches with "
                       "the auto-scheduler's own")
    budget = parse_budget(args.budget)
    target = parse_target(args.target)
    shapes = parse_input_shapes(args.input_shape)
    # The log is appended to: pointed at the model, it would corrupt it.
    log = output_path(args.output, "tuning log", inputs={"the model": args.model})
    check_appendable_log(log)
    on_device = args.device_login is not None or target.is_cross
    if on_device and args.cluster is not None:
        raise CLIError("--cluster measures on its workers: it does not go with "
                       "--device-login or a --target of another CPU")
    cluster = cluster_connection(args)
    mod, params = load_model(args.model, shapes, trust=args.trust, fallback=args.fallback)
    option = None if cluster is None else \
        cluster_measure_option(cluster, args.parallel_tasks or 3, params)
    if on_device:
        option = device_measure_option(target, args.device_login, params)

    from kiln.autotvm import tune_model
    before = count_records(log)
    if before:
        print(f"resuming from {before} records in {log}", file=sys.stderr)
    try:
        tasks = tune_model(mod, params, target=target, trials_per_task=args.trials,
                           time_budget=budget, log_file=str(log), tuner=args.tuner,
                           seed=args.seed, progress=sys.stderr, measure_option=option,
                           method="auto" if args.auto else "template")
    except KeyboardInterrupt:
        # Records are appended batch by batch: what was measured is kept.
        print(f"kiln: interrupted; {log} holds {count_records(log)} records: run the same "
              f"command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if cluster is not None:
            from kiln.autotvm.cluster import close_connections
            close_connections()
    if not tasks:
        print(f"nothing to tune: {args.model} has no kernel the auto-scheduler can schedule"
              if args.auto else
              f"nothing to tune: {args.model} has no operator with a tunable template")
        return 0
    after = count_records(log)
    print(f"tuned {len(tasks)} task{'s' if len(tasks) != 1 else ''}: {after - before} new "
          f"records, {after} in {log}; use it with: kiln compile {args.model} --tuning-log "
          f"{log} -o MODEL.so")
    return 0

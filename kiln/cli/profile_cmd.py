"""`kiln profile LIB.so`: time each fused kernel of a compiled model inside its runs.

    kiln profile model.so [--inputs inputs.npz] [--number N] [--repeat R] [--json OUT]

Prints one row per kernel (calls per run, median time per run, share of the total, GFLOPS and
the fraction of this machine's peak, measured once and cached), then the sum of the kernel
times against the end-to-end latency. Without --inputs the model runs on seeded random inputs
of the right shapes and dtypes (kiln.runtime.profiler.random_inputs).
"""
from __future__ import annotations

from .common import load_library, out_of_memory, output_path, positive_int, read_inputs
from .errors import CLIError

HELP = "time each fused kernel of a compiled model against this machine's peak"


def add_arguments(parser) -> None:
    """The options of `kiln profile`.

    Example:
        >>> add_arguments(argparse.ArgumentParser())      # doctest: +SKIP
    """
    parser.add_argument("library", metavar="LIB.so",
                        help="a model library written by 'kiln compile'")
    parser.add_argument("--inputs", metavar="FILE.npz",
                        help="input arrays keyed by input name (default: seeded random inputs "
                             "of the model's shapes and dtypes)")
    parser.add_argument("--number", type=positive_int, default=10, metavar="N",
                        help="runs per timed batch (default: 10)")
    parser.add_argument("--repeat", type=positive_int, default=5, metavar="R",
                        help="timed batches; each kernel's time is their median (default: 5)")
    parser.add_argument("--json", metavar="OUT", help="also write the table to OUT as JSON")


def run(args) -> int:
    """Profile the library and print the table (and write it as JSON with --json).

    Example:
        >>> run(build_parser("profile").parse_args(["profile", "model.so"]))  # doctest: +SKIP
        0
    """
    from kiln.runtime import profile

    json_path = (output_path(args.json, "JSON table", option="--json",
                             inputs={"the library": args.library,
                                     "the --inputs file": args.inputs})
                 if args.json else None)
    lib = load_library(args.library)
    # No --inputs: profile() runs the model on seeded random inputs.
    inputs = read_inputs(args.inputs, lib) if args.inputs is not None else None
    try:
        report = profile(lib, inputs=inputs, number=args.number, repeat=args.repeat)
    except MemoryError as err:
        raise out_of_memory(err, args.library, lib) from None
    print(report)
    if json_path is not None:
        try:
            json_path.write_text(report.to_json() + "\n")
        except OSError as err:
            raise CLIError(f"cannot write {json_path}: {err.strerror or err}") from None
    return 0

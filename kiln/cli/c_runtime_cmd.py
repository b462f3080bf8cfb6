"""`kiln c-runtime`: write kiln's C runtime for a target into a directory, to run exported
models from C programs without Python.

    kiln compile model.onnx --target rasp4b -o model.so
    kiln c-runtime --target rasp4b -o build/
    # build/: kiln_runtime.h, libkiln_runtime.so, run_model.c and run_model (built from it)

Without --target it is for this machine; --print-cc prints the C compiler that builds for the
target (examples/c_deploy/Makefile uses it). run_model runs an exported model on inputs from raw
files (`run_model model.so data=x.bin -o out/`); copy model.so, libkiln_runtime.so and
run_model to the device (or run them here under qemu-aarch64 -L /usr/aarch64-linux-gnu).
"""
from __future__ import annotations

import shlex

from .common import parse_target

HELP = "write kiln's C runtime (header, library, an example program) for a target"


def add_arguments(parser) -> None:
    """The options of `kiln c-runtime`.

    Example:
        >>> add_arguments(argparse.ArgumentParser())          # doctest: +SKIP
    """
    parser.add_argument("-o", "--output", metavar="DIR",
                        help="the directory to write into (made if missing)")
    parser.add_argument("--print-cc", action="store_true",
                        help="print the C compiler command that builds for the target, and "
                             "stop (for Makefiles: examples/c_deploy)")
    parser.add_argument("--target", default="llvm",
                        help="the CPU target the models were compiled for (default: this "
                             "machine), e.g. rasp4b or 'llvm -mtriple=aarch64-linux-gnu'")


def run(args) -> int:
    """Build the runtime and the example program into the directory.

    Example:
        >>> run(build_parser("c-runtime").parse_args(["c-runtime", "-o", "b"]))  # doctest: +SKIP
        0
    """
    from kiln.runtime.c import build_program
    from .errors import CLIError

    target = parse_target(args.target)
    if target.is_device:
        raise CLIError(f"--target {target}: the C runtime runs CPU models only")
    if args.print_cc:
        from kiln.runtime.toolchain import compiler_for
        print(shlex.join(compiler_for(target.mtriple)))
        return 0
    if not args.output:
        raise CLIError("kiln c-runtime needs -o DIR (or --print-cc)")
    program = build_program(args.output, target.mtriple)
    print(f"wrote {program.parent}/: kiln_runtime.h, libkiln_runtime.so, run_model.c, "
          f"run_model (for {target.mtriple})")
    return 0

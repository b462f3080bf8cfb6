"""`kiln compile MODEL -o OUT.so`: import a model file, compile it, export one shared library.

    kiln compile resnet18.onnx --input-shape data:1x3x224x224 -o resnet18.so
    kiln compile model.pt2 --tuning-log tune.jsonl -o model.so
    kiln compile model.onnx -o model.so --timings      # where the compile's time went

With --tuning-log the kernels use the best configs the log holds (kiln tune writes it);
tasks the log does not cover keep their default schedules, and one line says how many.
"""
from __future__ import annotations

import sys
import time

from .common import (add_model_arguments, existing_file, file_size, load_model, model_inputs,
                     output_path, parse_input_shapes, parse_target)

HELP = "compile an ONNX or .pt2 model into a shared library"


def add_arguments(parser) -> None:
    """The options of `kiln compile`.

    Example:
        >>> add_arguments(argparse.ArgumentParser())          # doctest: +SKIP
    """
    parser.add_argument("model", help="the model: an .onnx file or a .pt2 (saved torch.export "
                                      "program)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.so",
                        help="the shared library to write (load it with kiln run / "
                             "kiln.runtime.load_module)")
    add_model_arguments(parser)
    parser.add_argument("--tuning-log", metavar="LOG",
                        help="use the best configs from this tuning log (from kiln tune)")
    parser.add_argument("--opt-level", type=int, choices=range(4), default=None, metavar="N",
                        help="graph optimization level 0-3 (default 3)")
    parser.add_argument("--timings", action="store_true",
                        help="print where the time went (import, each graph and lowering pass, "
                             "LLVM, link; the slowest kernels) to standard error")


def run(args) -> int:
    """Compile args.model into args.output and print one line about it.

    Example:
        >>> run(build_parser("compile").parse_args(["compile", "m.onnx", "-o", "m.so"]))  # doctest: +SKIP
        0
    """
    if not args.timings:
        return _compile(args)
    from kiln.timings import CompileTimings
    with CompileTimings() as timings:
        status = _compile(args)
    print(timings.report(), file=sys.stderr)
    return status


def _compile(args) -> int:
    start = time.perf_counter()
    target = parse_target(args.target)
    shapes = parse_input_shapes(args.input_shape)
    out = output_path(args.output, "library", inputs={"the model": args.model,
                                                      "the --tuning-log": args.tuning_log})
    log = existing_file(args.tuning_log, "tuning log") if args.tuning_log else None
    mod, params = load_model(args.model, shapes, trust=args.trust, fallback=args.fallback)

    from kiln.driver.compile import compile_with_log
    lib = compile_with_log(mod, params, target, log, args.opt_level)
    lib.export_library(str(out))
    inputs = ", ".join(str(s) for s in model_inputs(mod, params)) or "none"
    print(f"wrote {out} ({file_size(out)}, {len(lib.graph['kernels'])} kernel calls); inputs "
          f"{inputs}; compiled in {time.perf_counter() - start:.1f} s")
    return 0

"""`kiln inspect`: a model file's graph IR at a stage of compilation (text, or a drawing), or a
compiled library's inputs, outputs and kernels.

    kiln inspect model.onnx --stage fused
    kiln inspect model.onnx --stage fused --format png -o fused.png
    kiln inspect model.onnx --format cuda        (the kernels as CUDA C; opencl: OpenCL C)
    kiln inspect model.so

Example:
    >>> from kiln.cli.main import main
    >>> main(["inspect", "model.so"])          # doctest: +SKIP
    0
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from kiln.runtime.describe import byte_text

from .common import (add_model_arguments, existing_file, file_size, load_library, load_model,
                     output_path, parse_input_shapes)
from .errors import CLIError

HELP = ("print or draw a model's graph IR, or list a compiled model's inputs, outputs and "
        "kernels")

DEFAULT_STAGE = "imported"
# --format -> whether the result is binary (must go to a file)
FORMATS = {"text": False, "dot": False, "svg": False, "png": True, "cuda": False,
           "opencl": False, "ptx": False}
# Kernel source formats: --format -> (target kind, the module's source format)
KERNEL_SOURCES = {"cuda": ("cuda", "cuda"), "opencl": ("opencl", "cl"), "ptx": ("cuda", "ptx")}


def add_arguments(parser) -> None:
    """The options of `kiln inspect`.

    Example:
        >>> add_arguments(argparse.ArgumentParser())    # doctest: +SKIP
    """
    parser.add_argument("model", metavar="FILE",
                        help="a model file (.onnx, .pt2) or a compiled model library (.so)")
    parser.add_argument("--stage", metavar="STAGE",
                        help="for a model file: imported (default: as the frontend reads it), "
                             "optimized (after the graph passes) or fused (kernels as primitive "
                             "functions)")
    parser.add_argument("--format", default="text", metavar="FORMAT",
                        help="text (default), dot (Graphviz source), svg or png (drawn with "
                             "Graphviz's dot; fused kernels are coloured clusters), or the "
                             "kernels' source for a GPU target: cuda, ptx, opencl")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="write to OUT instead of standard output (required for png)")
    add_model_arguments(parser)


class _View:
    """What inspect shows of one file: its text and, lazily, its DOT drawing."""

    def __init__(self, text, dot):
        self.text, self.dot = text, dot


def _library_text(path: Path, lib) -> str:
    g = lib.graph
    lines = [f"{path}: kiln model library, {file_size(path)}", "inputs:"]
    lines += [f"  {spec}" for spec in lib.input_specs()]
    lines += ["outputs:"] + [f"  {spec}" for spec in lib.output_specs()]
    nbytes = sum(int(a.nbytes) for a in lib.params.values())
    lines.append(f"constants: {len(lib.params)} ({byte_text(nbytes)})")
    calls = Counter(k["func"] for k in g["kernels"])          # in order of first call
    lines.append(f"kernels: {len(calls)} functions, {len(g['kernels'])} calls")
    width = max((len(name) for name in calls), default=0)
    lines += [f"  {name:<{width}}  x{count}" for name, count in calls.items()]
    return "\n".join(lines) + "\n"


def _inspect_library(path: Path, args) -> _View:
    from kiln.viz.model_dot import model_to_dot

    for option, value in (("--stage", args.stage), ("--input-shape", args.input_shape),
                          ("--trust", args.trust)):
        if value:
            raise CLIError(f"{option} applies to model files (.onnx, .pt2); {path} is a "
                           f"compiled library")
    lib = load_library(path)
    return _View(_library_text(path, lib), lambda: model_to_dot(lib))


def _kernel_source(path: Path, args) -> str:
    """The model's kernels compiled for --format's GPU target, as its source (a compiled
    GPU library: the source it holds)."""
    kind, fmt = KERNEL_SOURCES[args.format]
    if path.suffix.lower() == ".so":
        module = load_library(path).module
        if getattr(module, "type_key", None) != kind:
            raise CLIError(f"{path} holds no {kind} kernels (it was compiled for another "
                           f"target); compile the model with --target {kind}")
        return module.get_source(fmt)
    from kiln.driver.compile import compile as compile_model
    from .common import parse_target
    target = parse_target(args.target)
    if target.kind != kind:
        if args.target != "llvm":
            raise CLIError(f"--format {args.format} shows {kind} kernels, but --target is "
                           f"{args.target!r}")
        target = parse_target(kind)
    mod, params = load_model(path, parse_input_shapes(args.input_shape), trust=args.trust,
                             fallback=args.fallback)
    return compile_model(mod, target=target, params=params).module.get_source(fmt)


def _inspect_model(path: Path, args) -> _View:
    from kiln.driver.stages import STAGES, module_at_stage
    from kiln.viz.graph_dot import graph_to_dot

    stage = args.stage or DEFAULT_STAGE
    if stage not in STAGES:
        raise CLIError(f"unknown --stage {stage!r}; the stages are {', '.join(STAGES)}")
    mod, params = load_model(path, parse_input_shapes(args.input_shape), trust=args.trust,
                             fallback=args.fallback)
    mod = module_at_stage(mod, stage, target=args.target, params=params)
    return _View(f"{mod}\n", lambda: graph_to_dot(mod, params=params))


# File suffix -> what inspect reads it as; anything else is a model file (load_model names
# the suffixes it takes).
INSPECTORS = {".so": _inspect_library}


def _check_graphviz(fmt: str) -> None:
    # before reading the model: a missing `dot` should not cost the user an import first
    from kiln.viz.render import GraphvizNotFoundError, find_dot, needs_dot

    if fmt == "text" or fmt in KERNEL_SOURCES or not needs_dot(fmt):
        return
    try:
        find_dot(fmt)
    except GraphvizNotFoundError:
        raise CLIError(f"--format {fmt} needs Graphviz's `dot` program, which is not on PATH: "
                       f"install it with `apt-get install graphviz`, or use --format dot for "
                       f"the DOT text", status=1) from None


def _render(view: _View, fmt: str):
    from kiln.viz.render import render

    return view.text if fmt == "text" else render(view.dot(), fmt)


def run(args) -> int:
    """Print or write what `kiln inspect` shows of args.model; returns the exit status.

    Example:
        >>> run(build_parser("inspect").parse_args(["inspect", "m.onnx"]))   # doctest: +SKIP
        0
    """
    fmt = args.format
    if fmt not in FORMATS:
        raise CLIError(f"unknown --format {fmt!r}; the formats are {', '.join(FORMATS)}")
    if FORMATS[fmt] and not args.output:
        raise CLIError(f"--format {fmt} writes binary data: give -o FILE")
    out = (output_path(args.output, f"{fmt} file", inputs={"the inspected file": args.model})
           if args.output else None)
    _check_graphviz(fmt)
    path = existing_file(args.model)
    if fmt in KERNEL_SOURCES:
        data = _kernel_source(path, args)
    else:
        view = INSPECTORS.get(path.suffix.lower(), _inspect_model)(path, args)
        data = _render(view, fmt)
    if out is None:
        sys.stdout.write(data)
        return 0
    if isinstance(data, str):
        out.write_text(data)
    else:
        out.write_bytes(data)
    print(f"wrote {out} ({fmt}, {file_size(out)})")
    return 0

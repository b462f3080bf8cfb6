"""`kiln run LIB.so --inputs inputs.npz`: run a compiled model on arrays from an .npz file.

    kiln run model.so --inputs inputs.npz --outputs out.npz
    kiln run model.so --inputs inputs.npz --benchmark --number 20 --repeat 5

The .npz holds one array per model input, keyed by input name, each of exactly the input's
shape and dtype (nothing is converted silently). Outputs are saved as output0, output1, ...
(a compiled model keeps no output names), or summarized when --outputs is not given. Only the
runtime is loaded: running needs no compiler.
"""
from __future__ import annotations

import numpy as np

from kiln.runtime.describe import tensor_text

from .common import load_library, out_of_memory, output_path, positive_int, read_inputs

HELP = "run a compiled model on inputs from an .npz file"

_SHOWN_VALUES = 6        # values printed per output in the summary


def add_arguments(parser) -> None:
    """The options of `kiln run`.

    Example:
        >>> add_arguments(argparse.ArgumentParser())          # doctest: +SKIP
    """
    parser.add_argument("library", metavar="LIB.so", help="a model library from kiln compile")
    parser.add_argument("--inputs", metavar="FILE.npz",
                        help="the model's inputs, one array per input name")
    parser.add_argument("--outputs", metavar="FILE.npz",
                        help="save the outputs here (output0, output1, ...) instead of printing "
                             "a summary")
    parser.add_argument("--benchmark", action="store_true",
                        help="also time the model and print the median latency")
    parser.add_argument("--number", type=positive_int, default=10, metavar="N",
                        help="runs per timed batch (default 10)")
    parser.add_argument("--repeat", type=positive_int, default=3, metavar="R",
                        help="timed batches; the median is reported (default 3)")


def summarize(name: str, array: np.ndarray) -> str:
    """One line about an output: name, dtype and shape, its first values, min and max.

    Example:
        >>> summarize("output0", np.arange(3, dtype="float32"))
        'output0: float32[3] [0, 1, 2] min 0 max 2'
    """
    flat = array.reshape(-1)
    first = ", ".join(f"{v:.6g}" for v in flat[:_SHOWN_VALUES].tolist())
    more = ", ..." if flat.size > _SHOWN_VALUES else ""
    stats = f" min {flat.min():.6g} max {flat.max():.6g}" if flat.size else ""
    return f"{name}: {tensor_text(array.dtype, array.shape)} [{first}{more}]{stats}"


def _outputs_file(args):
    # savez adds ".npz" to a name without it: check, and report, the file actually written.
    name = str(args.outputs)
    written = name if name.endswith(".npz") else name + ".npz"
    return output_path(written, "outputs", option="--outputs",
                       inputs={"the library": args.library, "the --inputs file": args.inputs})


def run(args) -> int:
    """Run args.library on args.inputs; save or summarize the outputs; optionally benchmark.

    Example:
        >>> run(build_parser("run").parse_args(["run", "m.so", "--inputs", "x.npz"]))  # doctest: +SKIP
        0
    """
    out = _outputs_file(args) if args.outputs else None
    lib = load_library(args.library)
    inputs = read_inputs(args.inputs, lib)

    from kiln.runtime import GraphExecutor
    try:
        executor = GraphExecutor(lib)
        for name, array in inputs.items():
            executor.set_input(name, array)
        executor.run()
        outputs = {spec.name: executor.get_output(k).numpy()
                   for k, spec in enumerate(lib.output_specs())}
    except MemoryError as err:
        raise out_of_memory(err, args.library, lib) from None
    if out is not None:
        np.savez(str(out), **outputs)
        shown = ", ".join(f"{n} {tensor_text(a.dtype, a.shape)}" for n, a in outputs.items())
        print(f"wrote {out}: {shown}")
    else:
        for name, array in outputs.items():
            print(summarize(name, array))
    if args.benchmark:
        from kiln.runtime import num_threads
        timing = executor.benchmark(number=args.number, repeat=args.repeat)
        print(f"median {timing.median * 1e3:.4g} ms per run ({args.repeat} x {args.number} runs,"
              f" {num_threads()} threads)")
    return 0

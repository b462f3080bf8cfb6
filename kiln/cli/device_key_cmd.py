"""`kiln device-key`: the dask resource a tuning worker declares for its device.

    dask worker tls://head:8786 --nthreads 1 --resources "$(kiln device-key)=1" ...

Without --target it names this machine's CPU (its LLVM name and enabled features); with
--target it names that target's device (a worker that measures for it, e.g. a GPU's target).
`kiln tune --cluster` measures a task only on workers declaring its target's resource.
"""
from __future__ import annotations

from .common import parse_target

HELP = "print the dask resource naming this machine's device, for tuning workers"


def add_arguments(parser) -> None:
    """The options of `kiln device-key`.

    Example:
        >>> add_arguments(argparse.ArgumentParser())          # doctest: +SKIP
    """
    parser.add_argument("--target", default="llvm",
                        help="the target whose device to name (default: llvm, this CPU)")


def run(args) -> int:
    """Print the resource name.

    Example:
        >>> run(build_parser("device-key").parse_args(["device-key"]))  # doctest: +SKIP
        0
    """
    from kiln.autotvm.cluster.device import device_resource
    print(device_resource(parse_target(args.target)))
    return 0

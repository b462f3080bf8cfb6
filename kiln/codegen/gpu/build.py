"""The GPU build driver: lowered PrimFuncs → kernels source → a program → a DeviceModule."""
from __future__ import annotations

from typing import Callable

from ...tir import dtype as dt
from ...tir.expr import IntImm
from ...tir.functor import post_order_visit
from ...tir.stmt import Allocate
from ...te.schedule import ScheduleError
from ..common import CodegenError, check_function, function_info
from .split import split_host_device


def check_kernel_limits(kernels, target) -> None:
    """Reject kernels the target cannot launch: more threads per block, or more shared
    memory per block, than its limits (a ScheduleError naming the kernel, its stages and the
    limit).

    Example:
        >>> check_kernel_limits(split.kernels, Target("cuda"))   # doctest: +SKIP
    """
    for k in kernels:
        threads = k.threads_per_block
        if threads > target.max_num_threads:
            raise ScheduleError(f"kernel {k.name!r} has {threads} threads per block; target "
                               f"{target} allows {target.max_num_threads} (-max_num_threads)")
        shared = {}

        def fn(n):
            if isinstance(n, Allocate) and n.buffer.scope == "shared":
                if not isinstance(n.extent, IntImm):
                    raise CodegenError(f"kernel {k.name!r}: shared buffer {n.buffer.name!r} "
                                       f"has size `{n.extent}`, which is not a constant")
                shared[n.buffer.data] = (n.buffer.name, n.extent.value * dt.bytes_of(n.buffer.dtype))

        post_order_visit(k.body, fn)
        total = sum(b for _, b in shared.values())
        if total > target.max_shared_memory_per_block:
            listing = ", ".join(f"stage '{name}' {b} B" for name, b in shared.values())
            raise ScheduleError(f"kernel {k.name!r} uses {total} bytes of shared memory "
                               f"({listing}); target {target} allows "
                               f"{target.max_shared_memory_per_block} "
                               "(-max_shared_memory_per_block)")


def build_gpu(funcs, target, entry, emit: Callable, compile_program: Callable,
              source_format: str):
    """Split, check and emit every function, then compile all kernels as one program.

    `emit(kernels) -> source`; `compile_program(source, target) -> (program, {fmt: text})`
    gives what the device loads (OpenCL C source, or PTX) and extra source formats.

    Example:
        >>> mod = build_gpu(funcs, Target("opencl"), "f", emit, compile_cl, "cl")  # doctest: +SKIP
    """
    from ...runtime.gpu import DeviceModule
    kernels, functions = [], {}
    for f in funcs:
        check_function(f, target)
        split = split_host_device(f)
        check_kernel_limits(split.kernels, target)
        kernels.extend(split.kernels)
        functions[f.name] = (function_info(f), split.plan)
    source = emit(kernels)
    program, extra = compile_program(source, target)
    return DeviceModule(target.kind, functions, program, {source_format: source, **extra},
                        entry, target.kind)

"""build for target="opencl": kernels → OpenCL C; each device's driver compiles it on load."""
from __future__ import annotations

from ..gpu.build import build_gpu
from .source import OpenCLModuleEmitter


def _compile(source: str, target):
    return source, {}


def build_opencl(funcs, target, entry):
    """A DeviceModule of OpenCL kernels; get_source() is the OpenCL C.

    Example:
        >>> mod = build_opencl([f], Target("opencl"), "f")   # doctest: +SKIP
    """
    return build_gpu(funcs, target, entry, OpenCLModuleEmitter.emit_kernels, _compile, "cl")

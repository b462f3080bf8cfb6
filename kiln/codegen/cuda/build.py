"""build for target="cuda": kernels → CUDA C → PTX (NVRTC); the driver loads the PTX."""
from __future__ import annotations

from ..gpu.build import build_gpu
from .nvrtc import compile_ptx
from .source import CudaModuleEmitter


def _compile(source: str, target):
    ptx = compile_ptx(source, target.arch)
    return ptx, {"ptx": ptx}


def build_cuda(funcs, target, entry):
    """A DeviceModule of CUDA kernels; get_source() is the CUDA C, get_source("ptx") the PTX.

    Example:
        >>> mod = build_cuda([f], Target("cuda -arch=sm_80"), "f")   # doctest: +SKIP
    """
    return build_gpu(funcs, target, entry, CudaModuleEmitter.emit_kernels, _compile, "cuda")

"""target="opencl": kernels as OpenCL C, built by the device's OpenCL driver when loaded."""
from .build import build_opencl

__all__ = ["build_opencl"]

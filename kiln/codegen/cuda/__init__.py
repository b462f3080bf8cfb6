"""target="cuda": kernels as CUDA C, compiled to PTX by NVRTC (kiln/codegen/cuda/nvrtc.py)."""
from .build import build_cuda

__all__ = ["build_cuda"]

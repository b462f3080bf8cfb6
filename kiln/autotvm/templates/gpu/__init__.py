"""GPU templates (target key "gpu": cuda and opencl) of kiln.topi.gpu's tiled schedules: the
GEMM anchors (dense.py) and the NCHW convolutions (conv2d.py), with the knobs of the TVM paper's GPU
templates — block / virtual thread / thread / per-thread tiles, reduction steps per
shared-memory fetch, unrolling. Each module registers its templates for the "gpu" key.

Example:
    >>> from kiln.autotvm import Task
    >>> Task("conv2d_nchw.gpu", [[1, 64, 56, 56], [64, 64, 3, 3], [1, 1], [1, 1, 1, 1],
    ...                          [1, 1], "float32"], "opencl").name
    'conv2d_nchw.gpu'
"""
from . import conv2d, dense  # noqa: F401  (each registers its templates)
from .conv2d import (CONV2D_NCHW_GPU_TEMPLATE, DEPTHWISE_CONV2D_NCHW_GPU_TEMPLATE,
                     GROUP_CONV2D_NCHW_GPU_TEMPLATE)
from .dense import BATCH_MATMUL_GPU_TEMPLATE, DENSE_GPU_TEMPLATE, MATMUL_GPU_TEMPLATE

__all__ = ["CONV2D_NCHW_GPU_TEMPLATE", "GROUP_CONV2D_NCHW_GPU_TEMPLATE",
           "DEPTHWISE_CONV2D_NCHW_GPU_TEMPLATE", "DENSE_GPU_TEMPLATE", "MATMUL_GPU_TEMPLATE",
           "BATCH_MATMUL_GPU_TEMPLATE"]

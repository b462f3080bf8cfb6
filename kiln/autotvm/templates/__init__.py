"""Schedule templates of kiln.topi's anchor ops — x86 ones here, one module per op family, GPU
ones in gpu/, VDLA's in vdla.py — and the registry (registry.py) through which task extraction
and kiln.compile's topi schedules find them for the target at hand.

Example:
    >>> from kiln.autotvm.templates import anchor_task_args
    >>> anchor_task_args(conv.op)[0]  # doctest: +SKIP
    'conv2d_nchwc.x86'
"""
# each module registers its templates
from . import (conv2d_nchw, conv2d_nchwc, depthwise_nchwc, gemm, gpu, int8, vdla,  # noqa: F401
               winograd)
from .conv2d_nchwc import CONV2D_NCHWC_TEMPLATE, conv2d_nchwc_args
from .gemm import (BATCH_MATMUL_TEMPLATE, DENSE_PACK_TEMPLATE, MATMUL_TEMPLATE, dense_pack_args,
                   matmul_args)
from .registry import anchor_task_args, dispatched, register_anchor

__all__ = ["anchor_task_args", "dispatched", "register_anchor", "CONV2D_NCHWC_TEMPLATE",
           "DENSE_PACK_TEMPLATE", "MATMUL_TEMPLATE", "BATCH_MATMUL_TEMPLATE",
           "conv2d_nchwc_args", "dense_pack_args", "matmul_args"]

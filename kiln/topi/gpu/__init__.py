"""GPU schedules (target keys "gpu": cuda and opencl) for fused groups of operators.

schedule_generic is the default of every operator without a GPU schedule of its own: correct
for any group of computes, one thread per output element. Reductions, softmax and layer_norm
share the elements of a row among a block's threads (cross-thread reductions). dense / matmul
tile through shared memory; conv2d does when a tuning log gives its tile.

Example:
    >>> s = topi.gpu.schedule_generic([y])   # doctest: +SKIP
"""
from .conv2d import schedule_conv2d_nchw
from .dense import schedule_dense
from .generic import schedule_generic
from .reduction import schedule_reduce
from .row import schedule_layer_norm, schedule_softmax

__all__ = ["schedule_conv2d_nchw", "schedule_dense", "schedule_generic", "schedule_layer_norm",
           "schedule_reduce", "schedule_softmax"]

"""GPU schedules (target keys "gpu": cuda and opencl) for fused groups of operators.

schedule_generic is the default of every operator without a GPU schedule of its own: correct
for any group of computes, one thread per output element.

Example:
    >>> s = topi.gpu.schedule_generic([y])   # doctest: +SKIP
"""
from .dense import schedule_dense
from .generic import schedule_generic

__all__ = ["schedule_dense", "schedule_generic"]

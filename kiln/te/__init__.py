"""kiln.te: the tensor expression language and its schedules (TVM paper §4).

Example:
    >>> from kiln import te
    >>> n = te.var("n")
    >>> A = te.placeholder((n,), name="A")
    >>> B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    >>> s = te.create_schedule(B.op)
"""
from ..tir.expr import CommReducer, IterVar, PrimExpr, Range, Reduce, Var
from ..tir.op import (abs_ as abs, all_ as all, any_ as any, cast, ceil, comm_reducer, const,
                      cos, erf, exp, exp2, floor, floordiv, floormod, fmod, if_then_else, log,
                      log2, max_value, min_value, pow_ as pow, prod, reinterpret, round_ as round,
                      rsqrt, select, sigmoid, sin, sqrt, sum_ as sum, tanh, te_max as max,
                      te_min as min, trunc, truncdiv, truncmod)
from .operation import compute, placeholder, reduce_axis, size_var, thread_axis, var
from .schedule import Schedule, ScheduleError, Stage, create_schedule
from .tensor_intrin import BoundBuffer, DeclBuffer, TensorIntrin, decl_buffer, decl_tensor_intrin
from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor, TensorError

__all__ = [n for n in dir() if not n.startswith("_")]

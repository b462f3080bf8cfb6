"""Operation counts of tensor expressions: the arithmetic one evaluation of a compute graph does.

One walk, two ways to weigh a node:
- compute_flop counts every arithmetic node (comparisons, selects and index-free integer math
  included), the measure the auto-tuner files its GFLOPS under;
- float_flop counts floating-point arithmetic only, so a kernel that copies, pads or changes a
  layout does 0 operations; it is what the profiler divides a kernel's time by. The one
  integer operation it counts is the multiply-add of a quantized product (int8 data widened
  and multiplied in int32, summed by a reduction): 2, as a float multiply-add, so an int8
  kernel's rate reads in operations per second beside the float ones.

Both count a compute's body once per point of its iteration domain (output shape times
reduction extents); tensor indices (address arithmetic) are never counted; of a guarded choice
(if_then_else) only the costlier branch, since only one runs. A sum reduction
costs its source's operations plus the combiner's add: 2 per multiply-add; one whose condition
reads a tensor (a scatter's index test) costs only the test, since how many terms pass depends
on the data.

Example:
    >>> from kiln import te
    >>> A = te.placeholder((8, 8), name="A")
    >>> k = te.reduce_axis((0, 8), name="k")
    >>> C = te.compute((8,), lambda i: te.sum(A[i, k] * A[k, i], axis=k), name="C")
    >>> compute_flop([C]), float_flop([C])
    (128, 128)
"""
from __future__ import annotations

from ..tir import dtype as dt
from ..tir import expr as E
from ..tir.functor import post_order_visit
from .tensor import ComputeOp, PlaceholderOp

__all__ = ["compute_flop", "float_flop"]

_ARITH = (E.Add, E.Sub, E.Mul, E.Div, E.Mod, E.FloorDiv, E.FloorMod, E.Min, E.Max, E.CmpOp,
          E.And, E.Or, E.Not, E.Select, E.Call)
_FLOAT_ARITH = (E.Add, E.Sub, E.Mul, E.Div, E.Mod, E.FloorDiv, E.FloorMod, E.Min, E.Max)

# Intrinsic calls that choose, hint or reinterpret bits rather than compute (weight 0), and
# those that do more than one operation; any other float call (exp, tanh, sqrt...) weighs 1.
_FLOAT_CALL_WEIGHT = {"if_then_else": 0, "likely": 0, "reinterpret": 0, "fma": 2}


def _any_arith(n) -> int:
    if isinstance(n, E.Call) and n.op == "likely":
        return 0
    return int(isinstance(n, _ARITH))


def _float_arith(n) -> int:
    if isinstance(n, E.CmpOp):          # its own dtype is bool: look at what it compares
        return int(dt.is_float(n.a.dtype))
    if (isinstance(n, E.Mul) and dt.is_integral(n.dtype) and isinstance(n.a, E.Cast)
            and isinstance(n.b, E.Cast)):
        return 2    # a quantized product of widened 8- or 16-bit values: one multiply-add
    if isinstance(n, E.Call):
        return _FLOAT_CALL_WEIGHT.get(n.op, 1) if dt.is_float(n.dtype) else 0
    return int(isinstance(n, _FLOAT_ARITH) and dt.is_float(n.dtype))


def _reads_data(expr) -> bool:
    found = []
    post_order_visit(expr, lambda n: found.append(n) if isinstance(n, E.ProducerLoad) else None)
    return bool(found)


def _count_ops(expr, weight) -> int:
    """Weighted arithmetic nodes of a value expression, each occurrence counted."""
    count = 0

    def visit(n):
        nonlocal count
        count += weight(n)

    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, E.ProducerLoad):
            continue
        if isinstance(e, E.Reduce):
            if _reads_data(e.condition):
                # which terms the reduction takes depends on data (a scatter's or index_add's
                # index test): only the test is sure to run, once per point
                stack.append(e.condition)
                continue
            stack.extend(e.source)
            for res in e.combiner.result:
                post_order_visit(res, visit)
            continue
        if isinstance(e, E.Call) and e.op == "if_then_else":
            # A guarded choice runs one branch: count the costlier (Winograd's transforms pick
            # one of tile x tile values per point; summing the branches counted them all).
            cond, then, other = e.args
            count += (weight(e) + _count_ops(cond, weight)
                      + max(_count_ops(then, weight), _count_ops(other, weight)))
            continue
        visit(e)
        if isinstance(e, E.PrimExpr) and not isinstance(e, E.Var):
            for name in e._fields:
                v = getattr(e, name)
                if isinstance(v, E.PrimExpr):
                    stack.append(v)
                elif isinstance(v, tuple):
                    stack.extend(x for x in v if isinstance(x, E.PrimExpr))
    return count


def _count(tensors, weight, who: str) -> int:
    seen, todo, total = set(), [t.op for t in tensors], 0
    while todo:
        op = todo.pop()
        if op in seen:
            continue
        seen.add(op)
        if isinstance(op, PlaceholderOp):
            continue
        if not isinstance(op, ComputeOp):
            raise ValueError(f"{who}: cannot count operation '{op.name}' ({type(op).__name__})")
        domain = 1
        for iv in list(op.axis) + list(op.reduce_axis):
            if not isinstance(iv.dom.extent, E.IntImm):
                raise ValueError(f"{who}: '{op.name}' has the non-constant extent "
                                 f"{iv.dom.extent} on axis '{iv.var.name}'")
            domain *= int(iv.dom.extent.value)
        body = op.body[0] if isinstance(op.body[0], E.Reduce) else None
        ops = (_count_ops(body, weight) if body is not None
               else sum(_count_ops(b, weight) for b in op.body))
        total += domain * ops
        todo.extend(t.op for t in op.input_tensors())
    return total


def compute_flop(tensors) -> int:
    """Operations of the computes that produce `tensors`: per compute, the arithmetic nodes of
    its body (for a sum reduction: the source's plus the combiner's add, so 2 per
    multiply-add) times its iteration domain (output shape x reduction extents).

    Example:
        >>> compute_flop([C])  # doctest: +SKIP
        65536
    """
    return _count(tensors, _any_arith, "compute_flop")


def float_flop(tensors) -> int:
    """Floating-point operations of the computes that produce `tensors`, counted as
    compute_flop does but only for arithmetic on floats: a copy, a padding select or a layout
    change is 0, a float comparison 1, fma 2.

    Example:
        >>> B = te.compute((4,), lambda i: te.max(A[i, 0], 0.0), name="B")   # doctest: +SKIP
        >>> float_flop([B])                                                 # doctest: +SKIP
        4
    """
    return _count(tensors, _float_arith, "float_flop")

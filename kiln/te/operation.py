"""Building tensor expressions: placeholder, compute, reduce_axis, var."""
from __future__ import annotations

import inspect

from ..tir import dtype as dt
from ..tir.expr import IterVar, PrimExpr, Range, Reduce, SizeVar, Var
from ..tir.functor import post_order_visit
from ..tir.op import convert
from .tensor import ComputeOp, PlaceholderOp, Tensor, TensorError


def var(name: str = "tindex", dtype: str = "int32") -> Var:
    """A symbolic scalar, e.g. a size: n = te.var("n")."""
    return Var(name, dtype)


def size_var(name: str = "size", dtype: str = "int32") -> SizeVar:
    """A symbolic size known to be non-negative."""
    return SizeVar(name, dtype)


def _shape(shape) -> tuple:
    if isinstance(shape, (int, PrimExpr)):
        shape = (shape,)
    out = []
    for k, s in enumerate(shape):
        e = convert(s)
        if not dt.is_integral(e.dtype):
            raise TensorError(f"shape dimension {k} must be an integer, got `{e}`")
        if hasattr(e, "value") and e.value < 0:
            raise TensorError(f"shape dimension {k} is negative ({e.value})")
        out.append(e)
    return tuple(out)


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor.

    Example:
        >>> A = placeholder((n, 16), "float32", name="A")  # doctest: +SKIP
    """
    return PlaceholderOp(name, _shape(shape), dt.normalize(dtype)).output(0)


def _range(dom) -> Range:
    if isinstance(dom, Range):
        return dom
    if isinstance(dom, (tuple, list)) and len(dom) == 2:
        lo, hi = convert(dom[0]), convert(dom[1])
        return Range(lo, hi - lo)
    raise TensorError(f"an axis domain is (min, max_exclusive) or a Range, got {dom!r}")


def reduce_axis(dom, name: str = "rv") -> IterVar:
    """A reduction axis over [min, max): k = te.reduce_axis((0, n), name="k")."""
    return IterVar(_range(dom), Var(name), "reduce")


def thread_axis(dom=None, tag: str = "", name: str = "") -> IterVar:
    """A GPU thread axis for `bind`, e.g. te.thread_axis("threadIdx.x")."""
    if isinstance(dom, str):
        tag, dom = dom, None
    return IterVar(None if dom is None else _range(dom), Var(name or tag or "thread"), "thread", tag)


def compute(shape, fcompute, name: str = "compute", tag: str = "", attrs=None):
    """A tensor defined elementwise by fcompute over its indices; several outputs when
    fcompute returns a list.

    Example:
        >>> A = placeholder((8,), name="A")
        >>> B = compute((8,), lambda i: A[i] * 2, name="B")
    """
    shape = _shape(shape)
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        names = [f"i{k}" for k in range(len(shape))]
    else:
        # Parameters with defaults (lambda i, f=f: ...) are closures, not indices.
        names = [p.name for p in params if p.default is inspect.Parameter.empty
                 and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(names) != len(shape):
            raise TensorError(f"compute {name!r}: fcompute takes {len(names)} indices but the "
                              f"shape has {len(shape)} dimensions")
    axis = tuple(IterVar(Range(convert(0, s.dtype), s), Var(n, s.dtype), "data_par")
                 for n, s in zip(names, shape))
    result = fcompute(*[iv.var for iv in axis])
    bodies = list(result) if isinstance(result, (list, tuple)) else [result]
    bodies = [convert(b) for b in bodies]
    reduce_axes = _check_reductions(name, bodies)
    op = ComputeOp(name, tag, attrs, axis, reduce_axes, bodies)
    return op.output(0) if op.num_outputs == 1 else list(op.outputs)


def _check_reductions(name, bodies) -> tuple:
    tops = [b for b in bodies if isinstance(b, Reduce)]
    for b in bodies:
        def fn(n, top=b):
            if isinstance(n, Reduce) and n is not top:
                raise TensorError(f"compute {name!r}: a reduction must be the whole expression "
                                  f"of the compute, not part of `{top}`; compute it as its own "
                                  f"tensor first")
        post_order_visit(b, fn)
    if not tops:
        return ()
    if len(tops) != len(bodies):
        raise TensorError(f"compute {name!r}: either every output is a reduction or none is")
    first = tops[0]
    for t in tops[1:]:
        if t.combiner is not first.combiner or t.axis != first.axis or t.source != first.source:
            raise TensorError(f"compute {name!r}: several reduction outputs must come from one "
                              f"tuple reduction")
    return first.axis

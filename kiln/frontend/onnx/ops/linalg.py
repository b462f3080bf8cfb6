"""Matrix ONNX ops: Gemm, MatMul (batched, broadcasting) and Einsum, as nn.dense / nn.matmul /
nn.batch_matmul. A product with a weight becomes nn.dense (the fusion anchor and the op the
parallel-dense combiner looks for); a product of activations becomes (batch_)matmul."""
from __future__ import annotations

import math

import numpy as np

from ..context import is_static, shape_of
from ..registry import converter
from .tensor import reshape_to


@converter("Gemm")
def _gemm(ctx):
    a, b = ctx.input(0), ctx.input(1)
    trans_a, trans_b = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    if trans_a:
        y = ctx.op("nn.matmul", a, b, transpose_a=True, transpose_b=trans_b)
    elif trans_b:
        y = ctx.op("nn.dense", a, b)
    elif ctx.is_weight(1):
        y = ctx.op("nn.dense", a, ctx.op("transpose", b, axes=(1, 0)))
    else:
        y = ctx.op("nn.matmul", a, b, transpose_a=False, transpose_b=False)
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha != 1.0:
        y = ctx.op("multiply", y, ctx.scalar(alpha, y))
    if not ctx.has_input(2):
        return y
    c = ctx.input(2)
    beta = float(ctx.attr("beta", 1.0))
    if beta != 1.0:
        c = ctx.op("multiply", c, ctx.scalar(beta, c))
    n = shape_of(y)[1]
    cshape = tuple(shape_of(c))
    if cshape in ((n,), (1, n)):
        return ctx.op("nn.bias_add", y, reshape_to(ctx, c, (n,)), axis=1)
    return ctx.op("add", y, c)


def _swapped_last_two(value):
    """The input of a transpose that only swaps the last two axes, or None."""
    op = getattr(value, "op", None)
    if getattr(op, "name", None) != "transpose":
        return None
    axes = value.attrs.axes
    n = len(shape_of(value))
    if axes is not None and tuple(axes) == tuple(range(n - 2)) + (n - 1, n - 2):
        return value.args[0]
    return None


def batch_matmul(ctx, a, b, b_is_weight=False):
    """numpy.matmul of two values of rank >= 1 with broadcasting batch dimensions: nn.dense
    for a 2-d weight, nn.matmul / nn.batch_matmul (batch 1 broadcasts) for activations.

    Example:
        >>> y = batch_matmul(ctx, q, k_t)     # (2, 4, 8, 16) @ (2, 4, 16, 8)  # doctest: +SKIP
    """
    sa, sb = tuple(shape_of(a)), tuple(shape_of(b))
    squeeze_m, squeeze_n = len(sa) == 1, len(sb) == 1
    if squeeze_m:
        a, sa = reshape_to(ctx, a, (1,) + sa), (1,) + sa
    if squeeze_n:
        b, sb = reshape_to(ctx, b, sb + (1,)), sb + (1,)
    m, k = sa[-2:]
    n = sb[-1]
    if sb[-2] != k:
        ctx.error(f"cannot multiply shapes {sa} and {sb}")
    if len(sb) == 2:
        if b_is_weight:
            y = ctx.op("nn.dense", a, ctx.op("transpose", b, axes=(1, 0)))
        else:
            flat = reshape_to(ctx, a, (math.prod(sa[:-1]), k))
            y = reshape_to(ctx, ctx.op("nn.matmul", flat, b, transpose_a=False,
                                       transpose_b=False), sa[:-1] + (n,))
        batch = sa[:-2]
    else:
        batch = _broadcast(ctx, sa[:-2], sb[:-2])
        a3 = _as_batch3(ctx, a, sa, batch)
        inner = _swapped_last_two(b)
        if inner is not None:
            b3, trans_b = _as_batch3(ctx, inner, tuple(shape_of(inner)), batch), True
        else:
            b3, trans_b = _as_batch3(ctx, b, sb, batch), False
        y = ctx.op("nn.batch_matmul", a3, b3, transpose_a=False, transpose_b=trans_b)
        y = reshape_to(ctx, y, batch + (m, n))
    final = batch + ((m,) if not squeeze_m else ()) + ((n,) if not squeeze_n else ())
    return reshape_to(ctx, y, final)


def _broadcast(ctx, x, y):
    rank = max(len(x), len(y))
    x, y = (1,) * (rank - len(x)) + tuple(x), (1,) * (rank - len(y)) + tuple(y)
    out = []
    for p, q in zip(x, y):
        if p != q and 1 not in (p, q):
            ctx.error(f"batch dimensions {x} and {y} do not broadcast")
        out.append(q if p == 1 else p)
    return tuple(out)


def _as_batch3(ctx, x, shape, batch):
    """x (..., r, c) as (B, r, c): B is 1 when x has no batch extent (batch_matmul broadcasts
    a batch of 1), else the full broadcast batch."""
    rows, cols = shape[-2:]
    own = (1,) * (len(batch) - len(shape) + 2) + tuple(shape[:-2])
    if math.prod(own) == 1:
        return reshape_to(ctx, x, (1, rows, cols))
    if own != batch:
        x = ctx.op("broadcast_to", reshape_to(ctx, x, own + (rows, cols)),
                   shape=batch + (rows, cols))
    return reshape_to(ctx, x, (math.prod(batch), rows, cols))


@converter("MatMul")
def _matmul(ctx):
    return batch_matmul(ctx, ctx.input(0), ctx.input(1), b_is_weight=ctx.is_weight(1))


# -- Einsum ----------------------------------------------------------------------------------

def _einsum_terms(ctx, equation: str, ranks):
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        ctx.error(f"equation {equation!r} has {len(terms)} operands, the node {len(ranks)}")
    ell_rank = 0
    for t, r in zip(terms, ranks):
        if "..." in t:
            ell_rank = max(ell_rank, r - (len(t) - 3))
    ell = [chr(0x100 + k) for k in range(ell_rank)]     # letters no equation uses
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            own = r - (len(t) - 3)
            t = t.replace("...", "".join(ell[ell_rank - own:]))
        if len(t) != r:
            ctx.error(f"term {t!r} of {equation!r} does not match an operand of rank {r}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", "".join(ell))
    else:
        counts = {}
        for t in out_terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = "".join(ell) + "".join(sorted(c for c, n in counts.items()
                                            if n == 1 and c not in ell))
    return out_terms, out


def _einsum_reduce(ctx, x, term, keep):
    """Sum out the letters of term not in keep; repeated letters (diagonals) are unsupported."""
    if len(set(term)) != len(term):
        ctx.unsupported("repeated index in one operand")
    drop = [k for k, c in enumerate(term) if c not in keep]
    if drop:
        x = ctx.op("sum", x, axis=tuple(drop), keepdims=False)
        term = "".join(c for c in term if c in keep)
    return x, term


def _einsum_permute(ctx, x, term, order):
    if term == order:
        return x
    return ctx.op("transpose", x, axes=tuple(term.index(c) for c in order))


def _einsum_pair(ctx, a, ta, b, tb, keep):
    sizes = {}
    for x, t in ((a, ta), (b, tb)):
        for c, d in zip(t, shape_of(x)):
            if sizes.setdefault(c, d) != d:
                ctx.unsupported(f"index {c!r} with sizes {sizes[c]} and {d} (broadcasting)")
    batch = "".join(c for c in ta if c in tb and c in keep)
    contract = "".join(c for c in ta if c in tb and c not in keep)
    a_only = "".join(c for c in ta if c not in tb)
    b_only = "".join(c for c in tb if c not in ta)
    dims = lambda s: math.prod(sizes[c] for c in s)   # noqa: E731
    a3 = reshape_to(ctx, _einsum_permute(ctx, a, ta, batch + a_only + contract),
                    (dims(batch), dims(a_only), dims(contract)))
    b3 = reshape_to(ctx, _einsum_permute(ctx, b, tb, batch + contract + b_only),
                    (dims(batch), dims(contract), dims(b_only)))
    y = ctx.op("nn.batch_matmul", a3, b3, transpose_a=False, transpose_b=False)
    term = batch + a_only + b_only
    return reshape_to(ctx, y, tuple(sizes[c] for c in term)), term


@converter("Einsum")
def _einsum(ctx):
    values = [ctx.input(i) for i in range(ctx.num_inputs)]
    terms, out = _einsum_terms(ctx, ctx.attr("equation"), [len(shape_of(v)) for v in values])
    if all(is_static(v) for v in values):
        return np.einsum(ctx.attr("equation"), *values)
    acc, term = None, None
    for k, (v, t) in enumerate(zip(values, terms)):
        later = set(out).union(*[set(x) for x in terms[k + 1:]])
        if acc is None:
            acc, term = _einsum_reduce(ctx, v, t, later)
            continue
        v, t = _einsum_reduce(ctx, v, t, later | set(term))
        acc, term = _einsum_pair(ctx, acc, term, v, t, later)
    acc, term = _einsum_reduce(ctx, acc, term, set(out))
    return _einsum_permute(ctx, acc, term, out)

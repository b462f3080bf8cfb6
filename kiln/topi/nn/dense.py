"""Dense (PyTorch Linear), matmul and batch_matmul computes.

The x86 micro-kernel reads a tile of 16 or 32 consecutive output columns from one operand,
so an operand laid out (columns, k) — the weight of dense, b of matmul with transpose_b —
is first packed into panels `packed[j // NR, k, j % NR]` (zero-filled past the last column):
a stage of the compute tagged "dense_pack". So is a 2-d matmul's untransposed b (k, columns)
when 16 rows or more reuse its panels (a gradient's products). At the graph level the weight
is a constant: AlterOpLayout (kiln/graph/transform/alter_op_layout.py) makes the packing an op
of its own, which FoldConstant evaluates at compile time, and the dense then takes the panels
with units=.

Bias: `dense(x, w, bias)` returns a separate broadcast stage (tag "broadcast") adding the
bias to the "dense" stage; the dense schedule treats it like any fused epilogue.
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..utils import TopiError, get_const_tuple, is_const_int

PACK_TAG = tags.DENSE_PACK


def pack_width(n, dtype: str = "float32") -> int:
    """Columns per packed panel, chosen from the number of columns n and the element type:
    two vector registers of the current target (AVX-512: 32 float32 / 16 float64 lanes; an
    8-row tile then keeps 16 zmm accumulators; AVX2: 16 / 8) — unless n is at most one
    register wide, or one-register panels would waste fewer padded columns on a narrow
    operand (n < 8 registers: the padding is then a visible share of the work).

    Example:
        >>> pack_width(1000), pack_width(10), pack_width(48), pack_width(64, "float64")
        (32, 16, 16, 16)
    """
    from ...target import current_target
    # narrow types accumulate in (at least) 32 bits: 16 lanes per register, not 64
    lanes = current_target().vector_width_bits // max(32, _bits(dtype))
    wide = 2 * lanes
    if not is_const_int(n):
        return wide
    n = int(n)
    if n <= lanes:
        return lanes

    def waste(w):
        return -(-n // w) * w - n
    if n >= 8 * lanes or waste(wide) <= waste(lanes):
        return wide
    return lanes


def _bits(dtype) -> int:
    from ...tir import dtype as dt
    return dt.bits_of(str(dtype))


def pack_columns(b, transposed: bool, name: str = "packed", nr: int | None = None):
    """Pack the (.., k, n) operand b — or (.., n, k) when `transposed` — into panels
    [.., ceil(n / NR), k, NR], zero past column n. NR is `nr`, or pack_width(n, dtype).

    Example:
        >>> p = pack_columns(w, transposed=True)  # doctest: +SKIP
        >>> p.shape   # w (100, 64): 4 panels of 32 columns  # doctest: +SKIP
        (4, 64, 32)
    """
    shape = get_const_tuple(b.shape)
    batch = shape[:-2]
    n, k = (shape[-2], shape[-1]) if transposed else (shape[-1], shape[-2])
    if nr is None:
        nr = pack_width(n, b.dtype)
    elif not (isinstance(nr, int) and nr > 0):
        raise TopiError(f"pack_columns: pack width must be a positive int, got {nr!r}")
    nb = (n + nr - 1) // nr
    zero = te.const(0, b.dtype)

    def fcompute(*idx):
        bi, (jb, kk, jj) = idx[:-3], idx[-3:]
        j = jb * nr + jj
        src = (*bi, j, kk) if transposed else (*bi, kk, j)
        if is_const_int(n) and int(n) % nr == 0:
            return b[src]
        return te.if_then_else(j < n, b[src], zero)

    return te.compute((*batch, nb, k, nr), fcompute, name=name, tag=PACK_TAG,
                      attrs={"pack_width": nr})


def dense(data, weight, bias=None, out_dtype=None, units=None):
    """y = data @ weight.T (+ bias) as torch.nn.functional.linear: data (..., in), weight
    (out, in), bias (out,). The product is tagged "dense"; a bias adds a broadcast stage.

    The weight may also come already packed, as `pack_columns(weight, transposed=True)`
    computes it — (ceil(out / NR), in, NR) — with `units=out`: the graph layer can fold the
    packing of a constant weight once instead of at every call.

    Example:
        >>> y = dense(x, w, b)  # doctest: +SKIP
    """
    if data.ndim < 1 or weight.ndim not in (2, 3):
        raise TopiError(f"dense: weight must be 2-D (out, in) or packed 3-D, and data at least "
                        f"1-D, got data {tuple(data.shape)} and weight {tuple(weight.shape)}")
    dshape = get_const_tuple(data.shape)
    if weight.ndim == 3:
        nb, k, nr = get_const_tuple(weight.shape)
        if units is None:
            raise TopiError("dense: a packed (3-D) weight needs units= (the number of outputs)")
        n = units
        if is_const_int(nb) and is_const_int(nr) and not (int(nb) - 1) * int(nr) < n <= int(nb) * int(nr):
            raise TopiError(f"dense: packed weight {tuple(weight.shape)} cannot hold {n} units")
        packed = weight
    else:
        n, k = get_const_tuple(weight.shape)
        if units is not None and units != n:
            raise TopiError(f"dense: units={units} but weight {tuple(weight.shape)} has {n} rows")
        packed = pack_columns(weight, transposed=True, name=f"{weight.op.name}_packed")
        nr = packed.op.attrs["pack_width"]
    if is_const_int(dshape[-1]) and is_const_int(k) and int(dshape[-1]) != int(k):
        raise TopiError(f"dense: data has {dshape[-1]} input features but weight "
                        f"{tuple(weight.shape)} expects {k}")
    if bias is not None and (bias.ndim != 1 or get_const_tuple(bias.shape)[0] != n):
        raise TopiError(f"dense: bias must have shape ({n},), got {tuple(bias.shape)}")
    out_dtype = out_dtype or data.dtype
    r = te.reduce_axis((0, k), name="k")
    lead = dshape[:-1]

    def fcompute(*idx):
        i, j = idx[:-1], idx[-1]
        return te.sum(te.cast(data[(*i, r)], out_dtype)
                      * te.cast(packed[j // nr, r, j % nr], out_dtype), axis=r)

    out = te.compute((*lead, n), fcompute, name="dense", tag=tags.DENSE,
                     attrs={"pack_width": nr})
    if bias is None:
        return out
    return te.compute(out.shape, lambda *idx: out[idx] + te.cast(bias[idx[-1]], out_dtype),
                      name="dense_bias", tag=tags.BROADCAST)


def pack_weight_numpy(weight, nr: int | None = None, transposed: bool = True):
    """The packed panels `pack_columns(w, transposed, nr=nr)` computes, for a constant numpy
    weight — (out, in) when transposed (dense), (in, out) otherwise (matmul's b): what the
    graph layer can fold once and pass to dense(..., units=out).

    Example:
        >>> import numpy as np
        >>> pack_weight_numpy(np.ones((40, 3), "float32")).shape
        (3, 3, 16)
        >>> pack_weight_numpy(np.ones((3, 200), "float32"), transposed=False).shape
        (7, 3, 32)
    """
    import numpy as np
    if weight.ndim != 2:
        raise TopiError(f"pack_weight_numpy: weight must be 2-D, got shape {weight.shape}")
    if not transposed:
        weight = weight.T
    n, k = weight.shape
    nr = pack_width(n, str(weight.dtype)) if nr is None else nr
    # Written straight into the one result array: a padded intermediate doubled the fresh
    # memory, and first touches of fresh memory are most of the cost for a BERT's weights.
    full, rest = divmod(n, nr)
    packed = np.empty((full + (rest > 0), k, nr), dtype=weight.dtype)
    packed[:full] = weight[:full * nr].reshape(full, nr, k).transpose(0, 2, 1)
    if rest:
        packed[full, :, :rest] = weight[full * nr:].T
        packed[full, :, rest:] = 0
    return packed


def _mm_dims(a, b, ta, tb, op):
    sa, sb = get_const_tuple(a.shape), get_const_tuple(b.shape)
    m, ka = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
    kb, n = (sb[-1], sb[-2]) if tb else (sb[-2], sb[-1])
    if is_const_int(ka) and is_const_int(kb) and int(ka) != int(kb):
        raise TopiError(f"{op}: inner dimensions differ: a {sa} (transpose_a={ta}) and b {sb} "
                        f"(transpose_b={tb}) give k = {ka} and {kb}")
    return m, n, ka


PACK_MIN_ROWS = 16     # rows of an untransposed product from which its b is packed


def _product(a, b, ta, tb, a_batch, b_batch, out_batch, m, n, k, out_dtype, name, tag):
    """out[.., i, j] = sum_k op(a)[.., i, k] * op(b)[.., k, j]; b is packed (see below).
    a_batch / b_batch map the output's batch indices to each operand's (broadcasting)."""
    # b is packed into panels when transposed (its columns are strided) and, untransposed in
    # a 2-d matmul, when enough rows of a reuse each panel (a gradient's g @ W: 27 ms where
    # reading b's rows in place took 60); a product of a few rows, or a batch_matmul (a 1x1
    # convolution's W @ x, whose column tiles go to the threads), reads b in place
    pack = tb or (not out_batch and is_const_int(m) and int(m) >= PACK_MIN_ROWS)
    packed = pack_columns(b, transposed=tb, name=f"{b.op.name}_packed") if pack else None
    nr = packed.op.attrs["pack_width"] if pack else None
    r = te.reduce_axis((0, k), name="k")

    def fcompute(*idx):
        bi, i, j = idx[:-2], idx[-2], idx[-1]
        av = a[(*a_batch(bi), r, i)] if ta else a[(*a_batch(bi), i, r)]
        if packed is not None:
            bv = packed[(*b_batch(bi), j // nr, r, j % nr)]
        else:
            bv = b[(*b_batch(bi), r, j)]
        return te.sum(te.cast(av, out_dtype) * te.cast(bv, out_dtype), axis=r)

    attrs = {"transpose_a": bool(ta), "transpose_b": bool(tb)}
    if pack:
        attrs["pack_width"] = nr
    return te.compute((*out_batch, m, n), fcompute, name=name, tag=tag, attrs=attrs)


def matmul(a, b, transpose_a=False, transpose_b=False, out_dtype=None):
    """2-D matrix product op(a) @ op(b), op = transpose when asked; tagged "matmul".

    Example:
        >>> c = matmul(a, b, transpose_b=True)  # doctest: +SKIP
    """
    if a.ndim != 2 or b.ndim != 2:
        raise TopiError(f"matmul: a and b must be 2-D, got {tuple(a.shape)} and {tuple(b.shape)}")
    m, n, k = _mm_dims(a, b, transpose_a, transpose_b, "matmul")
    return _product(a, b, transpose_a, transpose_b, lambda bi: (), lambda bi: (), (), m, n, k,
                    out_dtype or a.dtype, "matmul", tags.MATMUL)


def batch_matmul(a, b, transpose_a=False, transpose_b=False, out_dtype=None):
    """Batched product of 3-D tensors (batch, m, k) @ (batch, k, n) (transposes as asked);
    a batch of 1 on either side broadcasts. Tagged "batch_matmul".

    Example:
        >>> c = batch_matmul(a, b)   # (8, 4, 5) @ (1, 5, 6) -> (8, 4, 6)  # doctest: +SKIP
    """
    if a.ndim != 3 or b.ndim != 3:
        raise TopiError(f"batch_matmul: a and b must be 3-D, got {tuple(a.shape)} and "
                        f"{tuple(b.shape)}")
    m, n, k = _mm_dims(a, b, transpose_a, transpose_b, "batch_matmul")
    ba, bb = get_const_tuple(a.shape)[0], get_const_tuple(b.shape)[0]
    if is_const_int(ba) and is_const_int(bb) and int(ba) != int(bb) and 1 not in (int(ba), int(bb)):
        raise TopiError(f"batch_matmul: batch sizes {ba} and {bb} differ and neither is 1")
    one_a = is_const_int(ba) and int(ba) == 1
    one_b = is_const_int(bb) and int(bb) == 1
    batch = bb if one_a else ba
    return _product(a, b, transpose_a, transpose_b,
                    (lambda bi: (0,)) if one_a else (lambda bi: bi),
                    (lambda bi: (0,)) if one_b else (lambda bi: bi),
                    (batch,), m, n, k, out_dtype or a.dtype, "batch_matmul", tags.BATCH_MATMUL)

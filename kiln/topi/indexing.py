"""Data-dependent indexing: sorting, top-k, gather_nd with batch dimensions, scatters,
reverse_sequence, nonzero, unique and max_unpool2d.

te has no loop whose trip count or store address depends on data, so every compute here pulls:
each output element finds what lands on it.
- Sorting is a bitonic network over positions: log2(P) * (log2(P) + 1) / 2 stages (P is n
  rounded up to a power of two), each an O(P) compute that puts pairs of positions in order
  with a comparator. That is O(n log^2 n) work and no data-dependent control flow. Ties go to
  the lower position, so every sort here is stable.
- A sorted array is searched by a binary search unrolled into log2(n) + 1 stages, and prefix
  counts are a Hillis-Steele scan (log2(n) stages).
- scatter_elements and scatter_nd reduce, per output element, over the updates that can land
  on it (one row along the axis; the index tuples). max_unpool2d's indices may point anywhere,
  so it sorts them and searches.

Intermediate stages are tagged tags.INDEXING: the schedule (x86.utils.schedule_stages_at_root)
computes each at the root instead of inlining it, which would repeat a whole network per read.

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((3, 10), name="x")
    >>> values, indices = topi.indexing.topk(x, k=4, axis=1)
"""
from __future__ import annotations

import math

from .. import te
from ..tir import dtype as dt
from . import tags
from .elemwise import check_tensor
from .transform import normalize_axis, ravel_index, unravel_index
from .utils import TopiError, get_const_int

SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _shape(x, op_name) -> tuple:
    check_tensor(x, op_name)
    return tuple(get_const_int(d, f"{op_name}: dimension {k} of {x.name}")
                 for k, d in enumerate(x.shape))


def _stage(shape, fcompute, name, tag=tags.INDEXING):
    return te.compute(tuple(shape), fcompute, name=name, tag=tag)


def _check_integral(t, op_name, what):
    check_tensor(t, op_name, what)
    if not dt.is_integral(t.dtype):
        raise TopiError(f"{op_name}: {what} must have an integer dtype, got {t.dtype}")


def _position(idx, n: int):
    """An index tensor's value as an int32 position in [0, n): negative values count from the
    end; out-of-range ones are clamped (memory safety, not semantics: callers that must not
    act on them compare with `_in_range`)."""
    if not dt.is_uint(idx.dtype):
        idx = te.select(idx < te.const(0, idx.dtype), idx + te.const(n, idx.dtype), idx)
    idx = te.min(te.max(idx, te.const(0, idx.dtype)), te.const(n - 1, idx.dtype))
    return te.cast(idx, "int32") if idx.dtype != "int32" else idx


def _wrapped(idx, n: int):
    """An index tensor's value with negative values counted from the end, as int64 (not
    clamped: compared against positions, an out-of-range index matches none)."""
    idx = te.cast(idx, "int64") if idx.dtype != "int64" else idx
    return te.select(idx < te.const(0, "int64"), idx + te.const(n, "int64"), idx)


def _clamp(i, n: int):
    """A data-dependent int32 position clamped into [0, n): memory safety, and bound inference
    needs both ends of a read's range."""
    return te.min(te.max(i, 0), n - 1)


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _ordered_before(less, n):
    """The bitonic network's comparator: strict total order on positions 0..size-1 where
    positions >= n (padding) go last and equal items keep their position order."""
    def before(b, a, c):
        ra, rc = _clamp(a, n), _clamp(c, n)
        ordered = less(b, ra, rc) | (~less(b, rc, ra) & (a < c))
        return (a < n) & ((c >= n) | ordered)
    return before


def _bitonic_step(perm, block: int, dist: int, size: int, before, name: str):
    """One layer of the network: position i and its partner i ^ dist swap their items when
    they are out of order for the direction of i's block of `block` positions."""
    def fcompute(*idx):
        b, i = idx[:-1], idx[-1]
        lower = te.floormod(te.floordiv(i, dist), 2) == 0
        partner = te.select(lower, i + dist, i - dist)
        mine, other = perm[b + (i,)], perm[b + (partner,)]
        if block == size:
            keep_first = lower
        else:
            ascending = te.floormod(te.floordiv(i, block), 2) == 0
            keep_first = lower == ascending
        return te.select(before(b, mine, other) == keep_first, mine, other)

    return _stage(perm.shape, fcompute, f"{name}_{block}_{dist}")


def sort_permutation(batch_shape, n: int, less, name: str = "sort"):
    """The stable sorting permutation of n items per batch index: an int32 tensor of shape
    batch_shape + (n,) whose row lists positions 0..n-1 so that item order[t] comes before
    order[t + 1]. `less(batch, i, j)` (te boolean expression; i, j int32 positions in [0, n))
    is a strict weak order: "item i goes before item j"; equal items keep their order.

    Example:
        >>> x = te.placeholder((5,), name="x")
        >>> order = sort_permutation((), 5, lambda b, i, j: x[i] < x[j])   # argsort, stable
    """
    if n < 1:
        raise TopiError(f"{name}: nothing to sort (n = {n})")
    batch_shape = tuple(batch_shape)
    size = _pow2_at_least(n)
    before = _ordered_before(less, n)
    perm = _stage(batch_shape + (size,), lambda *i: te.cast(i[-1], "int32"), f"{name}_iota")
    block = 2
    while block <= size:
        dist = block // 2
        while dist >= 1:
            perm = _bitonic_step(perm, block, dist, size, before, name)
            dist //= 2
        block *= 2
    if size == n:
        return perm
    return _stage(batch_shape + (n,), lambda *i: perm[i], f"{name}_order", tags.INJECTIVE)


def inverse_permutation(perm, name: str = "inverse"):
    """inv[perm[t]] = t for a 1-D int32 permutation tensor (by sorting its values).

    Example:
        >>> order = sort_permutation((), 5, lambda b, i, j: x[i] < x[j])   # doctest: +SKIP
        >>> rank = inverse_permutation(order)                              # doctest: +SKIP
    """
    (n,) = _shape(perm, name)
    return sort_permutation((), n, lambda b, a, c: perm[a] < perm[c], name)


def _inclusive_count(flag, n: int, name: str):
    """int32 tensor (n,): the number of t' <= t with flag(t') true (a Hillis-Steele scan)."""
    total = _stage((n,), lambda t: te.cast(flag(t), "int32"), f"{name}_0")
    step = 1
    while step < n:
        prev = total
        total = _stage((n,), lambda t, prev=prev, step=step: prev[t] + te.select(
            t >= step, prev[te.max(t - step, 0)], 0), f"{name}_{step}")
        step *= 2
    return total


def _count_at_most(sorted_value, n: int, target, shape, name: str):
    """int32 tensor of `shape`: per output index o, how many of the n ascending values
    sorted_value(t) are <= target(o) (a branchless binary search, one stage per step)."""
    top = _pow2_at_least(n + 1) // 2
    pos = None
    step = top
    while step >= 1:
        def fcompute(*o, prev=pos, step=step):
            base = prev[o] if prev is not None else te.const(0, "int32")
            probe = _clamp(base + step - 1, n)
            take = (base + step <= n) & (sorted_value(probe) <= target(o))
            return te.select(take, base + step, base)
        pos = _stage(shape, fcompute, f"{name}_{step}")
        step //= 2
    return pos


# ------------------------------------------------------------------------------ top-k
def _value_less(a, b, descending: bool):
    """a goes before b when sorting values: NaN counts as the largest value (as in
    torch.topk), so it comes first in a descending sort and last in an ascending one."""
    if descending:
        a, b = b, a
    if not dt.is_float(a.dtype):
        return a < b
    return (a < b) | ((b != b) & (a == a))


def topk(x, k: int, axis: int = -1, largest: bool = True, index_dtype: str = "int64"):
    """The k largest (or smallest) entries of x along `axis`, sorted, with their indices;
    ties go to the lower index (ONNX TopK). Returns [values, indices].

    Example:
        >>> values, indices = topk(te.placeholder((3, 10), name="x"), 4, axis=1)
    """
    shape = _shape(x, "topk")
    if not shape:
        raise TopiError("topk: x must have at least one dimension")
    axis = normalize_axis(axis, len(shape), "topk")
    n = shape[axis]
    if not 1 <= k <= n:
        raise TopiError(f"topk: k = {k} is out of range [1, {n}] for axis {axis}")
    batch = shape[:axis] + shape[axis + 1:]

    def at(b, j):
        return x[b[:axis] + (j,) + b[axis:]]

    order = sort_permutation(batch, n, lambda b, i, j: _value_less(at(b, i), at(b, j), largest),
                             "topk_sort")
    out_shape = shape[:axis] + (k,) + shape[axis + 1:]

    def picked(o):
        return order[o[:axis] + o[axis + 1:] + (o[axis],)]

    values = _stage(out_shape, lambda *o: x[o[:axis] + (picked(o),) + o[axis + 1:]],
                    "topk_values")
    indices = _stage(out_shape, lambda *o: te.cast(picked(o), index_dtype), "topk_indices")
    return [values, indices]


# ------------------------------------------------------------------------------ gathers
def gather_nd(data, indices, batch_dims: int = 0):
    """ONNX GatherND: the last axis of `indices` (length k) indexes data's axes
    batch_dims .. batch_dims + k - 1, the leading batch_dims axes are shared;
    out shape = indices.shape[:-1] + data.shape[batch_dims + k:]. Negative indices count from
    the end; out-of-range ones are clamped.

    Example:
        >>> y = gather_nd(te.placeholder((2, 4, 5), name="x"),
        ...               te.placeholder((2, 3, 1), "int64", name="i"), batch_dims=1)
    """
    ds = _shape(data, "gather_nd")
    _check_integral(indices, "gather_nd", "indices")
    ish = _shape(indices, "gather_nd")
    b = batch_dims
    if not ish or not 0 <= b < min(len(ish), len(ds)):
        raise TopiError(f"gather_nd: batch_dims {b} must be below the ranks of data "
                        f"({len(ds)}) and indices ({len(ish)})")
    if ds[:b] != ish[:b]:
        raise TopiError(f"gather_nd: the batch dimensions of data {ds[:b]} and indices "
                        f"{ish[:b]} differ")
    k = ish[-1]
    if not 1 <= k <= len(ds) - b:
        raise TopiError(f"gather_nd: the last dimension of indices ({k}) must be between 1 and "
                        f"{len(ds) - b} (data's rank minus batch_dims)")
    m = len(ish) - 1

    def fcompute(*o):
        lead = tuple(_position(indices[o[:m] + (j,)], ds[b + j]) for j in range(k))
        return data[o[:b] + lead + o[m:]]

    return te.compute(ish[:-1] + ds[b + k:], fcompute, name="gather_nd", tag=tags.INJECTIVE)


def reverse_sequence(x, seq_lengths, batch_axis: int = 1, time_axis: int = 0):
    """Reverse the first seq_lengths[b] entries along time_axis of every batch b (ONNX
    ReverseSequence); lengths are clamped to [0, time steps].

    Example:
        >>> y = reverse_sequence(te.placeholder((5, 3), name="x"),
        ...                      te.placeholder((3,), "int64", name="lens"))
    """
    shape = _shape(x, "reverse_sequence")
    _check_integral(seq_lengths, "reverse_sequence", "seq_lengths")
    batch = normalize_axis(batch_axis, len(shape), "reverse_sequence", "batch_axis")
    time = normalize_axis(time_axis, len(shape), "reverse_sequence", "time_axis")
    if batch == time:
        raise TopiError("reverse_sequence: batch_axis and time_axis must differ")
    if _shape(seq_lengths, "reverse_sequence") != (shape[batch],):
        raise TopiError(f"reverse_sequence: seq_lengths must have shape ({shape[batch]},), "
                        f"got {tuple(seq_lengths.shape)}")
    steps = shape[time]

    def fcompute(*o):
        length = seq_lengths[o[batch]]
        length = te.cast(te.min(te.max(length, te.const(0, length.dtype)),
                                te.const(steps, length.dtype)), "int32")
        t = o[time]
        src = te.select(t < length, length - 1 - t, t)
        return x[o[:time] + (src,) + o[time + 1:]]

    return te.compute(shape, fcompute, name="reverse_sequence", tag=tags.INJECTIVE)


# ------------------------------------------------------------------------------ scatters
def _check_reduction(reduction, op_name):
    if reduction not in SCATTER_REDUCTIONS:
        raise TopiError(f"{op_name}: reduction must be one of {SCATTER_REDUCTIONS}, got "
                        f"{reduction!r}")


def _combine(reduction, source, axis, where, init):
    """init combined with every source value where `where` holds, in reduction-axis order."""
    reducer = {"add": te.sum, "mul": te.prod, "max": te.max, "min": te.min}[reduction]
    return reducer(source, axis=axis, where=where, init=init)


def scatter_elements(data, indices, updates, axis: int = 0, reduction: str = "none"):
    """ONNX ScatterElements: a copy of data where out[i with i[axis] = indices[j]] takes
    updates[j] (j with j[axis] replaced); "add" / "mul" / "max" / "min" combine instead, in
    order. With repeated indices and reduction "none", the last update wins. Negative indices
    count from the end; out-of-range ones update nothing.

    Example:
        >>> y = scatter_elements(te.placeholder((3, 5), name="d"),
        ...                      te.placeholder((3, 2), "int64", name="i"),
        ...                      te.placeholder((3, 2), name="u"), axis=1, reduction="add")
    """
    op = "scatter_elements"
    ds = _shape(data, op)
    _check_integral(indices, op, "indices")
    us = _shape(updates, op)
    _check_reduction(reduction, op)
    axis = normalize_axis(axis, len(ds), op)
    if _shape(indices, op) != us or len(us) != len(ds):
        raise TopiError(f"{op}: indices {tuple(indices.shape)} and updates {us} must have one "
                        f"shape, of data's rank {len(ds)}")
    if any(u > d for k, (u, d) in enumerate(zip(us, ds)) if k != axis):
        raise TopiError(f"{op}: updates {us} exceed data {ds} on an axis other than {axis}")
    if updates.dtype != data.dtype:
        raise TopiError(f"{op}: updates ({updates.dtype}) and data ({data.dtype}) differ in dtype")
    n, rows = ds[axis], us[axis]
    r = te.reduce_axis((0, rows), "r")

    def source(o, j):
        return tuple(j if d == axis else te.min(o[d], us[d] - 1) for d in range(len(ds)))

    def match(o, j):
        inside = [o[d] < us[d] for d in range(len(ds)) if d != axis and us[d] < ds[d]]
        hit = _wrapped(indices[source(o, j)], n) == te.cast(o[axis], "int64")
        return te.all(*inside, hit) if inside else hit

    if reduction != "none":
        return te.compute(ds, lambda *o: _combine(reduction, updates[source(o, r)], r,
                                                  match(o, r), data[o]),
                          name=op, tag=tags.INDEXING)
    last = _stage(ds, lambda *o: te.max(te.select(match(o, r.var), r.var, -1), axis=r),
                  f"{op}_last")
    return _stage(ds, lambda *o: te.select(last[o] >= 0, updates[source(o, _clamp(last[o], rows))],
                                           data[o]), op)


def index_add(data, indices, updates, axis: int = 0):
    """torch.index_add: a copy of data where each slice updates[..., j, ...] (j along `axis`)
    is added to the slice data[..., indices[j], ...]; repeated indices add up, in order.
    Negative indices count from the end; out-of-range ones add nothing. The gradient of an
    embedding lookup (take along axis 0) is index_add into zeros.

    Example:
        >>> y = index_add(te.placeholder((30, 8), name="table"),
        ...               te.placeholder((5,), "int64", name="ids"),
        ...               te.placeholder((5, 8), name="rows"))
    """
    op = "index_add"
    ds = _shape(data, op)
    _check_integral(indices, op, "indices")
    us = _shape(updates, op)
    axis = normalize_axis(axis, len(ds), op)
    (rows,) = _shape(indices, op) if len(indices.shape) == 1 else (None,)
    if rows is None or len(us) != len(ds) or us[axis] != rows or any(
            u != d for k, (u, d) in enumerate(zip(us, ds)) if k != axis):
        raise TopiError(f"{op}: updates {us} must be data's shape {ds} with axis {axis} of "
                        f"indices' length ({tuple(indices.shape)}, one-dimensional)")
    if updates.dtype != data.dtype:
        raise TopiError(f"{op}: updates ({updates.dtype}) and data ({data.dtype}) differ in "
                        f"dtype")
    r = te.reduce_axis((0, rows), "r")
    n = ds[axis]

    def source(o):
        return tuple(r if d == axis else o[d] for d in range(len(ds)))
    # the condition reads only the output's position along `axis` and r: with r scheduled
    # outside the inner axes, each (position, r) pair is tested once per slice, not per element
    return te.compute(ds, lambda *o: te.sum(updates[source(o)], axis=r,
                                            where=_wrapped(indices[r], n)
                                            == te.cast(o[axis], "int64"), init=data[o]),
                      name=op, tag=tags.INDEXING, attrs={"axis": axis})


def scatter_nd(data, indices, updates, reduction: str = "none"):
    """ONNX ScatterND: a copy of data where the slice data[indices[q]] (indices' last axis
    holds k leading coordinates) takes updates[q]; "add" / "mul" / "max" / "min" combine
    instead, in order of q. With repeated index tuples and reduction "none", the last wins.
    Negative indices count from the end; out-of-range ones update nothing.

    Example:
        >>> y = scatter_nd(te.placeholder((4, 5), name="d"),
        ...                te.placeholder((2, 1), "int64", name="i"),
        ...                te.placeholder((2, 5), name="u"))
    """
    op = "scatter_nd"
    ds = _shape(data, op)
    _check_integral(indices, op, "indices")
    ish = _shape(indices, op)
    _check_reduction(reduction, op)
    if not ish or not 1 <= ish[-1] <= len(ds):
        raise TopiError(f"{op}: the last dimension of indices {ish} must be between 1 and "
                        f"{len(ds)} (data's rank)")
    k, qshape = ish[-1], ish[:-1]
    if _shape(updates, op) != qshape + ds[k:]:
        raise TopiError(f"{op}: updates must have shape {qshape + ds[k:]} "
                        f"(indices.shape[:-1] + data.shape[{k}:]), got {tuple(updates.shape)}")
    if updates.dtype != data.dtype:
        raise TopiError(f"{op}: updates ({updates.dtype}) and data ({data.dtype}) differ in dtype")
    # A single index tuple (indices of rank 1) still reduces over one (unit) axis.
    qaxes = [te.reduce_axis((0, q), f"q{j}") for j, q in enumerate(qshape or (1,))]

    def q_index(qs):
        return tuple(v.var if isinstance(v, te.IterVar) else v for v in qs)[:len(qshape)]

    def match(cell, qs):
        q = q_index(qs)
        return te.all(*[_wrapped(indices[q + (j,)], ds[j]) == te.cast(cell[j], "int64")
                        for j in range(k)])

    if reduction != "none":
        return te.compute(ds, lambda *o: _combine(reduction, updates[q_index(qaxes) + o[k:]],
                                                  qaxes, match(o, qaxes), data[o]),
                          name=op, tag=tags.INDEXING)
    flat = ravel_index(q_index(qaxes), qshape) if qshape else te.const(0, "int32")
    last = _stage(ds[:k], lambda *c: te.max(te.select(match(c, qaxes), flat, -1), axis=qaxes),
                  f"{op}_last")

    def fcompute(*o):
        w = last[o[:k]]
        q = unravel_index(_clamp(w, math.prod(qshape)), qshape) if qshape else ()
        return te.select(w >= 0, updates[q + o[k:]], data[o])

    return _stage(ds, fcompute, op)


def max_unpool2d(x, indices, pooled_shape, out_shape):
    """ONNX MaxUnpool (2-D): out[p] = x[i] where indices[i] == p, p counted row-major over
    `pooled_shape` (N, C, H, W: the shape MaxPool's indices refer to), zero elsewhere; that
    block is the top-left corner of `out_shape`. A repeated index takes the last x; indices
    outside the block place nothing.

    Example:
        >>> y = max_unpool2d(te.placeholder((1, 1, 2, 2), name="x"),
        ...                  te.placeholder((1, 1, 2, 2), "int64", name="i"),
        ...                  (1, 1, 4, 4), (1, 1, 4, 4))
    """
    op = "max_unpool2d"
    xs = _shape(x, op)
    _check_integral(indices, op, "indices")
    if _shape(indices, op) != xs:
        raise TopiError(f"{op}: indices {tuple(indices.shape)} and x {xs} differ in shape")
    pooled_shape, out_shape = tuple(pooled_shape), tuple(out_shape)
    if len(pooled_shape) != len(xs) or len(out_shape) != len(xs) or \
            any(o < p for o, p in zip(out_shape, pooled_shape)):
        raise TopiError(f"{op}: out_shape {out_shape} must hold pooled_shape {pooled_shape} "
                        f"(both of rank {len(xs)})")
    m = math.prod(xs)

    def key(i):
        return te.cast(indices[unravel_index(i, xs)], "int64")

    order = sort_permutation((), m, lambda b, i, j: key(i) < key(j), f"{op}_sort")
    sorted_key = _stage((m,), lambda t: key(order[t]), f"{op}_keys")

    def target(o):
        return te.cast(ravel_index(o, pooled_shape), "int64")

    count = _count_at_most(lambda t: sorted_key[t], m, target, pooled_shape, f"{op}_search")

    def fcompute(*o):
        inside = te.all(*[o[d] < pooled_shape[d] for d in range(len(xs))])
        p = tuple(te.min(o[d], pooled_shape[d] - 1) for d in range(len(xs)))
        last = _clamp(count[p] - 1, m)
        hit = inside & (count[p] >= 1) & (sorted_key[last] == target(p))
        return te.select(hit, x[unravel_index(order[last], xs)], te.const(0, x.dtype))

    return _stage(out_shape, fcompute, op)


# ------------------------------------------------------------------------------ value-shaped
def nonzero(x, count: int, index_dtype: str = "int64"):
    """ONNX NonZero / numpy.nonzero as one array: out[d, t] = coordinate d of the t-th nonzero
    entry of x (row-major). `count`, the number of nonzero entries, fixes the output shape, so
    it must be known when compiling.

    Example:
        >>> y = nonzero(te.placeholder((2, 3), name="x"), count=4)    # shape (2, 4)
    """
    shape = _shape(x, "nonzero")
    numel = math.prod(shape)
    if not shape or not 1 <= count <= numel:
        raise TopiError(f"nonzero: count {count} must be between 1 and the {numel} entries of "
                        f"a tensor of rank >= 1")

    def set_(i):
        return x[unravel_index(i, shape)] != te.const(0, x.dtype)

    order = sort_permutation((), numel, lambda b, i, j: set_(i) & ~set_(j), "nonzero_sort")

    def fcompute(d, t):
        coords = unravel_index(order[t], shape)
        value = coords[-1]
        for axis in range(len(shape) - 2, -1, -1):
            value = te.select(d == axis, coords[axis], value)
        return te.cast(value, index_dtype)

    return _stage((len(shape), count), fcompute, "nonzero")


def _rows(x, axis):
    """(n, m, element(r, k)): x as n rows of m entries, rows along `axis` (flattened x when
    None), each row's entries in row-major order of the other axes."""
    shape = _shape(x, "unique")
    if axis is None:
        return math.prod(shape), 1, lambda r, k: x[unravel_index(r, shape)]
    rest = shape[:axis] + shape[axis + 1:]

    def element(r, k):
        other = unravel_index(k, rest) if rest else ()
        return x[other[:axis] + (r,) + other[axis:]]

    return shape[axis], math.prod(rest), element


def _row_order(n, m, element):
    """(less(r, s), equal(r, s)) comparing rows lexicographically. Rows of several entries
    compare through the first entry where they differ, found for every pair (an n x n x m
    reduction)."""
    if m == 1:
        return (lambda r, s: _value_less(element(r, 0), element(s, 0), False),
                lambda r, s: element(r, 0) == element(s, 0))
    k = te.reduce_axis((0, m), "k")
    first_diff = _stage((n, n), lambda r, s: te.min(
        te.select(element(r, k.var) != element(s, k.var), k.var, m), axis=k), "unique_diff")

    def less(r, s):
        at = _clamp(first_diff[r, s], m)
        return (first_diff[r, s] < m) & _value_less(element(r, at), element(s, at), False)

    return less, lambda r, s: first_diff[r, s] == m


def _sorted_groups(n, count, less, equal):
    """The groups of equal rows, ascending: (first, tally, group_of) where first[g] is the
    lowest row of group g, tally[g] its size and group_of(r) the group of row r."""
    order = sort_permutation((), n, lambda b, r, s: less(r, s), "unique_sort")

    def starts_group(t):
        return (t == 0) | ~equal(order[te.max(t - 1, 0)], order[t])

    # The sorted positions where a group starts, in order (a stable sort on "starts").
    starts = sort_permutation((), n, lambda b, a, c: starts_group(a) & ~starts_group(c),
                              "unique_starts")
    first = _stage((count,), lambda g: order[starts[g]], "unique_first")
    tally = _stage((count,), lambda g: te.select(
        g + 1 < count, starts[te.min(g + 1, count - 1)], n) - starts[g], "unique_tally")
    started = _inclusive_count(starts_group, n, "unique_group")
    rank = inverse_permutation(order, "unique_rank")
    return first, tally, lambda r: started[rank[r]] - 1


def unique(x, count: int, axis=None, sorted: bool = True, index_dtype: str = "int64"):
    """ONNX Unique / numpy.unique: the `count` distinct entries of x (rows along `axis`, or of
    the flattened x when axis is None), ascending or in order of first occurrence, with the
    index of each one's first occurrence, each entry's (row's) slot in the result and how often
    each occurs. `count` fixes the output shape, so it must be known when compiling.
    Returns [unique, first_indices, inverse_indices, counts].

    Example:
        >>> y, first, inverse, counts = unique(te.placeholder((6,), name="x"), count=4)
    """
    shape = _shape(x, "unique")
    if axis is not None:
        axis = normalize_axis(axis, len(shape), "unique")
    n, m, element = _rows(x, axis)
    if not 1 <= count <= n:
        raise TopiError(f"unique: count {count} must be between 1 and the {n} entries")
    first, tally, group_of = _sorted_groups(n, count, *_row_order(n, m, element))
    if sorted:
        def group(u):
            return u

        def slot(r):
            return group_of(r)
    else:
        # Slots in order of first occurrence: sort the groups by their first row.
        by_first = sort_permutation((), count, lambda b, g, h: first[g] < first[h],
                                    "unique_appearance")
        slot_of = inverse_permutation(by_first, "unique_slots")

        def group(u):
            return by_first[u]

        def slot(r):
            return slot_of[group_of(r)]

    if axis is None:
        values = _stage((count,), lambda u: element(first[group(u)], 0), "unique_values")
    else:
        values = _stage(shape[:axis] + (count,) + shape[axis + 1:], lambda *o: x[
            o[:axis] + (first[group(o[axis])],) + o[axis + 1:]], "unique_values")
    firsts = _stage((count,), lambda u: te.cast(first[group(u)], index_dtype), "unique_indices")
    inverse = _stage((n,), lambda r: te.cast(slot(r), index_dtype), "unique_inverse")
    counts = _stage((count,), lambda u: te.cast(tally[group(u)], index_dtype), "unique_counts")
    return [values, firsts, inverse, counts]

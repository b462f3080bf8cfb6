"""kiln/topi/indexing.py with its x86 schedule against numpy: sorting networks (top-k, stable
order, NaN), gather_nd with batch dimensions, reverse_sequence, the scatters with repeated
indices and every reduction, max_unpool2d, nonzero and unique.

Tolerance: every result is exact (index remapping, comparisons, and reductions of a few
float32 terms combined in the same order as the numpy reference loops).
"""
import numpy as np
import pytest

from kiln import te
from kiln.topi import indexing as ix
from kiln.topi.utils import TopiError
from kiln.topi.x86.utils import schedule_stages_at_root

RNG = np.random.default_rng(7)


def ph(a, name):
    return te.placeholder(a.shape, str(a.dtype), name=name)


def run(build_run, fn, *arrays, **kwargs):
    ins = [ph(a, f"in{k}") for k, a in enumerate(arrays)]
    outs = fn(*ins, **kwargs)
    got = build_run(schedule_stages_at_root, outs, ins, list(arrays))
    return got if isinstance(got, list) else [got]


def stable_top(x, k, axis, largest):
    """numpy's stable argsort; NaN counts as the largest value."""
    key = np.where(np.isnan(x), np.inf, x) if x.dtype.kind == "f" else x
    if largest:
        key = -key.astype(np.float64)
    order = np.argsort(key, axis=axis, kind="stable")
    return np.take(order, np.arange(k), axis=axis)


@pytest.mark.parametrize("shape,axis,k,largest,dtype", [
    ((3, 9), 1, 4, True, "float32"),
    ((7, 2, 5), 0, 7, False, "int32"),
    ((2, 6, 3), -2, 2, True, "uint8"),
    ((5,), 0, 1, False, "float64"),
    ((1,), 0, 1, True, "int64"),
])
def test_topk_is_a_stable_sort(shape, axis, k, largest, dtype, build_run):
    x = RNG.integers(0, 4, shape).astype(dtype)       # many ties
    values, indices = run(build_run, ix.topk, x, k=k, axis=axis, largest=largest)
    want = stable_top(x, k, axis % len(shape), largest)
    np.testing.assert_array_equal(indices, want)
    np.testing.assert_array_equal(values, np.take_along_axis(x, want, axis))
    assert indices.dtype == np.int64


@pytest.mark.parametrize("largest", [True, False])
def test_topk_nan_is_the_largest_value(largest, build_run):
    x = np.array([[1.0, np.nan, 3.0, -np.inf, 3.0, np.nan]], "float32")
    _, indices = run(build_run, ix.topk, x, k=6, axis=1, largest=largest)
    np.testing.assert_array_equal(indices, stable_top(x, 6, 1, largest))


def test_gather_nd_batch_dims(build_run):
    data = RNG.standard_normal((2, 3, 4, 5)).astype("float32")
    idx = RNG.integers(-4, 4, (2, 3, 6, 1)).astype("int64")
    (got,) = run(build_run, ix.gather_nd, data, idx, batch_dims=2)
    want = np.stack([np.stack([data[a, b][idx[a, b, :, 0]] for b in range(3)])
                     for a in range(2)])
    np.testing.assert_array_equal(got, want)


def test_reverse_sequence_clamps_lengths(build_run):
    x = RNG.standard_normal((5, 3, 2)).astype("float32")
    lengths = np.array([0, 3, 9], "int32")          # 9 > 5 time steps: all of them
    (got,) = run(build_run, ix.reverse_sequence, x, lengths, batch_axis=1, time_axis=0)
    want = x.copy()
    for b, n in enumerate(np.minimum(lengths, 5)):
        want[:n, b] = x[:n, b][::-1]
    np.testing.assert_array_equal(got, want)


COMBINE = {"none": lambda a, b: b, "add": np.add, "mul": np.multiply, "max": np.maximum,
           "min": np.minimum}


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_in_order(reduction, build_run):
    data = RNG.standard_normal((4, 5)).astype("float32")
    idx = RNG.integers(-5, 5, (3, 4)).astype("int64")     # repeats, negatives; updates
    upd = RNG.standard_normal((3, 4)).astype("float32")   # narrower than data on axis 0
    (got,) = run(build_run, ix.scatter_elements, data, idx, upd, axis=1, reduction=reduction)
    want = data.copy()
    for i in range(3):
        for j in range(4):
            t = idx[i, j] % 5
            want[i, t] = COMBINE[reduction](want[i, t], upd[i, j])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_slices_in_order(reduction, build_run):
    data = RNG.standard_normal((4, 3, 2)).astype("float32")
    idx = np.array([[[1, 0]], [[-3, 0]], [[2, 2]]], "int64")     # (1, 0) twice
    upd = RNG.standard_normal((3, 1, 2)).astype("float32")
    (got,) = run(build_run, ix.scatter_nd, data, idx, upd, reduction=reduction)
    want = data.copy()
    for q in np.ndindex(3, 1):
        cell = tuple(idx[q])
        want[cell] = COMBINE[reduction](want[cell], upd[q])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape,axis", [((7, 32), 0), ((3, 6, 5), 1), ((40, 3), 0)])
def test_index_add_adds_slices_in_order(shape, axis, build_run):
    # repeated, negative and out-of-range indices (these add nothing), with index_add's own
    # schedule: inner slices vectorized (32 floats), not (5 and 3)
    from kiln.topi.x86.utils import schedule_index_add
    n = shape[axis]
    data = RNG.standard_normal(shape).astype("float32")
    idx = np.array([1, -1, n, 1, 0, -n - 1, 2], "int64")
    upd_shape = list(shape)
    upd_shape[axis] = len(idx)
    upd = RNG.standard_normal(upd_shape).astype("float32")
    ins = [ph(data, "d"), ph(idx, "i"), ph(upd, "u")]
    got = build_run(schedule_index_add, ix.index_add(*ins, axis=axis), ins, [data, idx, upd])
    want = np.moveaxis(data.copy(), axis, 0)
    moved = np.moveaxis(upd, axis, 0)
    for j, t in enumerate(idx):
        if -n <= t < n:
            want[t % n] += moved[j]
    np.testing.assert_array_equal(got, np.moveaxis(want, 0, axis))


def test_max_unpool_last_repeat_wins_and_pads(build_run):
    x = RNG.standard_normal((2, 2, 3, 3)).astype("float32")
    idx = RNG.integers(0, 2 * 2 * 6 * 6, x.shape).astype("int64")
    idx[0, 0, 0, :2] = 7                          # two values for position 7: the later wins
    (got,) = run(build_run, ix.max_unpool2d, x, idx, pooled_shape=(2, 2, 6, 6),
                 out_shape=(2, 2, 7, 8))
    flat = np.zeros(2 * 2 * 6 * 6, "float32")
    for i, v in zip(idx.reshape(-1), x.reshape(-1)):
        flat[i] = v
    want = np.zeros((2, 2, 7, 8), "float32")
    want[:, :, :6, :6] = flat.reshape(2, 2, 6, 6)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["bool", "float32", "int8"])
def test_nonzero(dtype, build_run):
    x = (RNG.integers(0, 3, (3, 1, 5)) - 1).astype(dtype)
    want = np.array(np.nonzero(x))
    (got,) = run(build_run, ix.nonzero, x, count=want.shape[1])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("shape,axis", [((11,), None), ((3, 4), None), ((2, 5, 3), 1),
                                        ((4, 2), 0)])
def test_unique_matches_numpy(shape, axis, sorted_, build_run):
    x = RNG.integers(0, 2, shape).astype("float32")
    y, first, inverse, counts = np.unique(x, True, True, True, axis=axis)
    inverse = inverse.reshape(-1)
    if not sorted_:
        by_first = np.argsort(first)
        slot = np.empty_like(by_first)
        slot[by_first] = np.arange(len(by_first))
        first, counts, inverse = first[by_first], counts[by_first], slot[inverse]
        y = np.take(x.reshape(-1) if axis is None else x, first, axis=axis or 0)
    got = run(build_run, ix.unique, x, count=len(first), axis=axis, sorted=sorted_)
    for g, w in zip(got, [y, first, inverse, counts]):
        np.testing.assert_array_equal(g, w)


def test_errors_name_the_operator_and_the_problem():
    x = te.placeholder((3, 4), name="x")
    i = te.placeholder((3, 4), "int64", name="i")
    with pytest.raises(TopiError, match=r"topk: k = 5 is out of range \[1, 4\]"):
        ix.topk(x, 5, axis=1)
    with pytest.raises(TopiError, match="scatter_elements: reduction must be one of"):
        ix.scatter_elements(x, i, x, reduction="sum")
    with pytest.raises(TopiError, match=r"index_add: updates \(3, 4\) must be data's shape"):
        ix.index_add(x, te.placeholder((2,), "int64", name="j"), x)
    with pytest.raises(TopiError, match="gather_nd: batch_dims 2 must be below"):
        ix.gather_nd(x, te.placeholder((3, 1), "int64", name="j"), batch_dims=2)
    with pytest.raises(TopiError, match="reverse_sequence: batch_axis and time_axis"):
        ix.reverse_sequence(x, te.placeholder((3,), "int64", name="n"), 0, 0)
    with pytest.raises(TopiError, match="unique: count 9 must be between 1 and the 4"):
        ix.unique(x, 9, axis=1)

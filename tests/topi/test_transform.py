"""Index-remapping operators against numpy / torch, built with the x86 injective schedule."""
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import te
from kiln.topi import broadcast as bc
from kiln.topi import elemwise as ew
from kiln.topi import transform as tf
from kiln.topi.utils import TopiError
from kiln.tir.expr import BufferLoad, Ramp
from kiln.tir.functor import post_order_visit
from kiln.tir.dtype import lanes_of
from kiln.topi.utils import get_const_int
from kiln.topi.x86.injective import contiguous_suffix, schedule_injective


def run(outs, ins, arrays):
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    f = kiln.build(schedule_injective(outs), list(ins) + list(outs), target="llvm")
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=o.dtype) for o in outs]
    f(*arrays, *results)
    return results if len(results) > 1 else results[0]


def data(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


# Pure data movement: results must be bit-exact, so every comparison is assert_array_equal.

@pytest.mark.parametrize("src,dst", [((2, 3, 4), (6, -1)), ((2, 3, 4), (4, 3, 2)), ((5, 7), (35,)),
                                     ((35,), (5, 1, 7)), ((1, 16, 3), (48,)), ((2, 3, 4), (2, 3, 4))])
def test_reshape(src, dst, rng):
    x = te.placeholder(src, name="x")
    a = data(rng, src)
    y = tf.reshape(x, dst)
    assert y.op.tag == "injective"
    np.testing.assert_array_equal(run(y, [x], [a]), a.reshape(dst))


def test_infer_reshape_onnx_semantics():
    assert tf.infer_reshape((2, 3, 4), (0, -1)) == (2, 12)
    assert tf.infer_reshape((2, 3, 4), (0, 0, 2, 2)) == (2, 3, 2, 2)
    assert tf.infer_reshape((0, 3), (0, 3), allow_zero=True) == (0, 3)
    with pytest.raises(TopiError, match="more than one -1"):
        tf.infer_reshape((2, 3), (-1, -1))
    with pytest.raises(TopiError, match="cannot reshape"):
        tf.reshape(te.placeholder((2, 3), name="x"), (4, -1))


@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (0, -1, 1)])
def test_transpose(axes, rng):
    x = te.placeholder((3, 5, 17), name="x")
    a = data(rng, (3, 5, 17))
    np.testing.assert_array_equal(run(tf.transpose(x, axes), [x], [a]), np.transpose(a, axes))
    with pytest.raises(TopiError, match="not a permutation"):
        tf.transpose(x, (0, 0, 1))


@pytest.mark.parametrize("shape,axes", [((50, 37), None), ((2, 20, 33), (0, 2, 1)), ((17, 3, 40), (2, 1, 0))])
def test_transpose_tiled_schedule(shape, axes, rng):
    """Transposes large enough for 16 x 16 tiles (strided vector loads), fused with a relu."""
    x = te.placeholder(shape, name="x")
    y = ew.relu(tf.transpose(x, axes))
    text = str(kiln.lower(schedule_injective(y), [x, y]))
    assert ".inner" in text and "ramp(" in text and "transpose[" not in text
    a = data(rng, shape)
    np.testing.assert_array_equal(run(y, [x], [a]), np.maximum(np.transpose(a, axes), 0))


def test_expand_squeeze_flatten(rng):
    x = te.placeholder((3, 1, 4, 1), name="x")
    a = data(rng, (3, 1, 4, 1))
    outs = run([tf.expand_dims(x, 0), tf.expand_dims(x, -1, 2), tf.squeeze(x), tf.squeeze(x, [1]),
                tf.flatten(x), tf.flatten(x, 0, 2), tf.flatten(x, start_dim=2)], [x], [a])
    t = torch.from_numpy(a)
    refs = [a[None], a[..., None, None], a.squeeze(), a.squeeze(1), t.flatten(1).numpy(),
            t.flatten(0, 2).numpy(), t.flatten(2).numpy()]
    for got, want in zip(outs, refs):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TopiError, match="has size 4, not 1"):
        tf.squeeze(x, 2)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate(axis, rng):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [tuple(s[:axis % 3]) + (k + 1,) + tuple(s[axis % 3 + 1:]) for k, s in enumerate(shapes)]
    xs = [te.placeholder(s, name=f"x{k}") for k, s in enumerate(shapes)]
    arrays = [data(rng, s) for s in shapes]
    np.testing.assert_array_equal(run(tf.concatenate(xs, axis), xs, arrays),
                                  np.concatenate(arrays, axis))


def test_concatenate_fused_with_producers_and_stack(rng):
    a, b = te.placeholder((4, 19), name="a"), te.placeholder((4, 13), name="b")
    out = ew.relu(tf.concatenate([ew.negative(a), b], axis=1))
    av, bv = data(rng, (4, 19)), data(rng, (4, 13))
    np.testing.assert_array_equal(run(out, [a, b], [av, bv]), np.maximum(np.concatenate([-av, bv], 1), 0))
    st = tf.stack([a, ew.negative(a)], axis=1)
    np.testing.assert_array_equal(run(st, [a], [av]), np.stack([av, -av], 1))
    with pytest.raises(TopiError, match="does not match"):
        tf.concatenate([a, te.placeholder((3, 19), name="c")], axis=1)


SLICES = [
    ([1, 2], [8, 7], [1, 1], None),
    ([1, -1], [8, 0], [2, -3], None),
    ([-100], [100], [1], [1]),
    ([9], [-sys.maxsize], [-1], [0]),            # reverse the whole axis (ONNX idiom)
    ([-3], [-1], [1], [-1]),
    ([5], [2], [1], [0]),                        # empty
    ([0, 0], [10, 9], [4, 5], [0, 1]),
]


@pytest.mark.parametrize("begin,end,strides,axes", SLICES)
def test_strided_slice(begin, end, strides, axes, rng):
    x = te.placeholder((10, 9), name="x")
    a = data(rng, (10, 9))
    index = [slice(None)] * 2
    for b, e, s, ax in zip(begin, end, strides, axes or range(len(begin))):
        index[ax] = slice(b, e, s)
    want = a[tuple(index)]
    y = tf.strided_slice(x, begin, end, strides, axes)
    assert y.shape == want.shape
    if want.size:
        np.testing.assert_array_equal(run(y, [x], [a]), want)


def _gathered_loads(func) -> list:
    """The vector loads of a lowered function whose lanes are not one contiguous run."""
    found = []

    def visit(n):
        if isinstance(n, BufferLoad) and lanes_of(n.dtype) > 1 and not (
                isinstance(n.index, Ramp) and get_const_int(n.index.stride) == 1):
            found.append(n)

    post_order_visit(func.body, visit)
    return found


@pytest.mark.parametrize("channels,size", [(116, 14), (48, 7), (24, 28)])
def test_channel_shuffle_vectorizes_each_channel(channels, size, rng):
    """ShuffleNet-v2's concat -> reshape -> transpose -> reshape -> split: fused into one loop,
    16-lane vectors straddle channels taken from different inputs (one gather per lane); the
    pixels of one channel are a contiguous run in its input, so only they are vectorized."""
    shape = (1, channels // 2, size, size)
    x, y = te.placeholder(shape, name="x"), te.placeholder(shape, name="y")
    both = tf.concatenate([x, y], axis=1)
    shuffled = tf.reshape(tf.transpose(tf.reshape(both, (1, 2, channels // 2, size, size)),
                                       (0, 2, 1, 3, 4)), (1, channels, size, size))
    parts = tf.split(shuffled, 2, axis=1)
    s = schedule_injective(parts)
    assert [contiguous_suffix(s, p) for p in parts] == [2, 2]
    assert _gathered_loads(kiln.lower(s, [x, y, *parts])) == []
    a, b = data(rng, shape), data(rng, shape)
    want = np.concatenate([a, b], 1).reshape(1, 2, channels // 2, size, size)
    want = want.transpose(0, 2, 1, 3, 4).reshape(1, channels, size, size)
    for got, w in zip(run(parts, [x, y], [a, b]), np.split(want, 2, axis=1)):
        np.testing.assert_array_equal(got, w)


def test_contiguous_suffix_keeps_whole_elementwise_loops():
    x = te.placeholder((3, 5, 17), name="x")
    y = ew.relu(tf.reshape(x, (15, 17)))
    s = schedule_injective(y)
    assert contiguous_suffix(s, y) == 2 and _gathered_loads(kiln.lower(s, [x, y])) == []
    z = tf.transpose(x, (1, 0, 2))                       # only the last axis stays contiguous
    assert contiguous_suffix(schedule_injective(z), z) == 1


@pytest.mark.parametrize("seed", range(20))
def test_random_reshape_transpose_concat_chains(seed):
    """Property: random chains of reshapes, transposes, concatenations and splits, whichever
    axes the schedule vectorizes, equal numpy exactly."""
    r = np.random.default_rng(seed)
    dims = [int(d) for d in r.choice([1, 2, 3, 4, 5, 7, 8, 12, 16], size=r.integers(2, 5))]
    x = te.placeholder(tuple(dims), name="x")
    a = data(r, tuple(dims))
    t, want = x, a
    for _ in range(3):
        kind = r.choice(["reshape", "transpose", "concat"])
        if kind == "reshape":
            n = int(np.prod(want.shape))
            first = int(r.choice([d for d in range(1, n + 1) if n % d == 0]))
            t, want = tf.reshape(t, (first, -1)), want.reshape(first, -1)
            if r.random() < 0.5 and want.shape[1] % 2 == 0:
                new = (first, 2, want.shape[1] // 2)
                t, want = tf.reshape(t, new), want.reshape(new)
        elif kind == "transpose":
            axes = tuple(int(k) for k in r.permutation(want.ndim))
            t, want = tf.transpose(t, axes), want.transpose(axes)
        else:
            axis = int(r.integers(want.ndim))
            t, want = ew.relu(tf.concatenate([t, bc.multiply(t, -2.0)], axis)), np.maximum(
                np.concatenate([want, -2 * want], axis), 0)
    outs = tf.split(t, 2, axis=0) if want.shape[0] % 2 == 0 else [t]
    wants = np.split(want, 2, axis=0) if len(outs) == 2 else [want]
    got = run(outs, [x], [a])
    for g, w in zip(got if len(outs) > 1 else [got], wants):
        np.testing.assert_array_equal(g, w)


def test_split_multi_output_group(rng):
    x = te.placeholder((6, 10), name="x")
    a = data(rng, (6, 10))
    parts = tf.split(x, 3, axis=0)
    assert [p.shape for p in parts] == [(2, 10)] * 3
    outs = run(parts, [x], [a])
    for got, want in zip(outs, np.split(a, 3, axis=0)):
        np.testing.assert_array_equal(got, want)
    parts = tf.split(ew.relu(x), [3, 7], axis=1)      # a fused producer shared by three outputs
    for got, want in zip(run(parts, [x], [a]), np.split(np.maximum(a, 0), [3, 7], axis=1)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(run(tf.split_sizes(x, [1, 4, 5], -1), [x], [a]),
                         torch.from_numpy(a).split([1, 4, 5], -1)):
        np.testing.assert_array_equal(got, want.numpy())
    with pytest.raises(TopiError, match="cannot be cut into 4"):
        tf.split(x, 4)


@pytest.mark.parametrize("mode", ["clip", "wrap"])
@pytest.mark.parametrize("axis", [0, 1, None])
def test_take(mode, axis, rng):
    x = te.placeholder((5, 7), name="x")
    idx = te.placeholder((2, 3), "int64", name="idx")
    a = data(rng, (5, 7))
    i = np.array([[0, -1, 3], [4, 9, -8]], "int64")
    want = np.take(a, i, axis=axis, mode=mode)
    if mode == "clip":    # negative indices count from the end first, then out-of-range clamps
        n = a.size if axis is None else a.shape[axis]
        want = np.take(a, np.clip(np.where(i < 0, i + n, i), 0, n - 1), axis=axis)
    np.testing.assert_array_equal(run(tf.take(x, idx, axis, mode), [x, idx], [a, i]), want)


def test_take_scalar_and_embedding(rng):
    x = te.placeholder((5, 7), name="x")
    a = data(rng, (5, 7))
    np.testing.assert_array_equal(run(tf.take(x, -2, axis=1), [x], [a]), a[:, -2])
    w, ids = te.placeholder((10, 6), name="w"), te.placeholder((3, 4), "int32", name="ids")
    wv, iv = data(rng, (10, 6)), rng.integers(0, 10, (3, 4)).astype("int32")
    np.testing.assert_array_equal(run(tf.embedding(w, ids), [w, ids], [wv, iv]),
                                  F.embedding(torch.from_numpy(iv).long(), torch.from_numpy(wv)).numpy())
    with pytest.raises(TopiError, match="out of range"):
        tf.take(x, 7, axis=1)
    with pytest.raises(TopiError, match="integer dtype"):
        tf.take(x, te.placeholder((2,), name="f"))


def test_gather_elements(rng):
    x = te.placeholder((4, 6), name="x")
    idx = te.placeholder((4, 3), "int64", name="idx")
    a = data(rng, (4, 6))
    i = rng.integers(-6, 6, (4, 3)).astype("int64")
    want = np.take_along_axis(a, np.where(i < 0, i + 6, i), axis=1)
    np.testing.assert_array_equal(run(tf.gather(x, 1, idx), [x, idx], [a, i]), want)
    i0 = rng.integers(0, 4, (2, 6)).astype("int64")
    idx0 = te.placeholder((2, 6), "int64", name="idx0")
    want0 = torch.gather(torch.from_numpy(a), 0, torch.from_numpy(i0)).numpy()
    np.testing.assert_array_equal(run(tf.gather(x, 0, idx0), [x, idx0], [a, i0]), want0)


def test_gather_nd(rng):
    x = te.placeholder((4, 5, 6), name="x")
    idx = te.placeholder((3, 2), "int32", name="idx")
    a = data(rng, (4, 5, 6))
    i = np.array([[0, 1], [3, -1], [2, 4]], "int32")
    want = np.stack([a[tuple(r)] for r in i])
    np.testing.assert_array_equal(run(tf.gather_nd(x, idx), [x, idx], [a, i]), want)
    idx3 = te.placeholder((2, 2, 3), "int64", name="idx3")
    i3 = rng.integers(0, 4, (2, 2, 3)).astype("int64")
    want3 = a[i3[..., 0], i3[..., 1], i3[..., 2]]
    np.testing.assert_array_equal(run(tf.gather_nd(x, idx3), [x, idx3], [a, i3]), want3)


@pytest.mark.parametrize("mode,torch_mode", [("constant", "constant"), ("reflect", "reflect"),
                                             ("edge", "replicate")])
def test_pad_modes(mode, torch_mode, rng):
    x = te.placeholder((2, 3, 5, 6), name="x")
    a = data(rng, (2, 3, 5, 6))
    y = tf.pad(x, (0, 0, 1, 3), (0, 0, 2, 4), pad_value=-1.5, mode=mode)
    kw = {"value": -1.5} if mode == "constant" else {}
    want = F.pad(torch.from_numpy(a), (3, 4, 1, 2), mode=torch_mode, **kw).numpy()
    np.testing.assert_array_equal(run(y, [x], [a]), want)


def test_pad_errors_and_int(rng):
    x = te.placeholder((3, 4), "int32", name="x")
    a = rng.integers(-9, 9, (3, 4)).astype("int32")
    np.testing.assert_array_equal(run(tf.pad(x, (1, 0), (2, 3), 7), [x], [a]),
                                  np.pad(a, ((1, 2), (0, 3)), constant_values=7))
    with pytest.raises(TopiError, match="must be smaller than its size"):
        tf.pad(x, (3, 0), mode="reflect")
    with pytest.raises(TopiError, match="2 entries"):
        tf.pad(x, (1,))


def test_broadcast_to_tile_arange(rng):
    x = te.placeholder((3, 1), name="x")
    a = data(rng, (3, 1))
    b, t1, t2 = run([tf.broadcast_to(x, (2, 3, 5)), tf.tile(x, (2, 3)), tf.tile(x, (2, 1, 4))], [x], [a])
    np.testing.assert_array_equal(b, np.broadcast_to(a, (2, 3, 5)))
    np.testing.assert_array_equal(t1, np.tile(a, (2, 3)))
    np.testing.assert_array_equal(t2, np.tile(a, (2, 1, 4)))
    with pytest.raises(TopiError, match="do not broadcast"):
        tf.broadcast_to(x, (3, 2, 2))
    r1, r2 = tf.arange(0, 10, 3, dtype="int32"), tf.arange(1.5, -2, -0.5)
    s = schedule_injective([r1, r2])
    f = kiln.build(s, [r1, r2], target="llvm")
    o1, o2 = np.zeros(4, "int32"), np.zeros(7, "float32")
    f(o1, o2)
    np.testing.assert_array_equal(o1, np.arange(0, 10, 3))
    np.testing.assert_allclose(o2, np.arange(1.5, -2, -0.5, dtype="float32"), rtol=0, atol=1e-6)


def test_float64_and_bool_data_movement(rng):
    x = te.placeholder((4, 9), "float64", name="x")
    m = te.placeholder((4, 9), "bool", name="m")
    a, mv = rng.standard_normal((4, 9)), rng.random((4, 9)) > 0.5
    t, mt = run([tf.transpose(x), tf.transpose(m)], [x, m], [a, mv])
    np.testing.assert_array_equal(t, a.T)
    np.testing.assert_array_equal(mt, mv.T)

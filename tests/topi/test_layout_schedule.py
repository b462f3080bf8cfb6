"""The x86 layout_transform schedule (kiln/topi/x86/layout.py): register-transposed tiles
between NCHW and NCHW{b}c, against numpy reshapes/transposes.

A transform only moves values, so results must be bit-exact: tolerance 0 (np.array_equal).
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import kiln
from kiln import te
from kiln.topi import tags
from kiln.topi.nn.conv2d_nchwc import layout_transform, nchw_to_nchwc, nchwc_to_nchw
from kiln.topi.utils import TopiError
from kiln.topi.x86.layout import plan_layout_transform, schedule_layout_transform, tile_width


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-100, 100, size=shape).astype(dtype)


def _build(outs, ins):
    s = schedule_layout_transform(outs)
    return kiln.build(s, list(ins) + list(outs))


def _run(f, out, *arrays):
    result = np.zeros(tuple(int(d) for d in out.shape), dtype=out.dtype)
    f(*arrays, result)
    return result


def to_blocked(shape, block, dtype="float32", seed=0):
    """(kiln result, numpy reference) of NCHW -> NCHW{block}c."""
    x = te.placeholder(shape, name="x", dtype=dtype)
    y = layout_transform(x, "NCHW", f"NCHW{block}c")
    xs = _data(shape, dtype, seed)
    return _run(_build([y], [x]), y, xs), nchw_to_nchwc(xs, block)


def from_blocked(shape, block, dtype="float32", seed=0):
    """(kiln result, numpy reference) of NCHW{block}c -> NCHW; `shape` is the NCHW shape."""
    n, c, h, w = shape
    x = te.placeholder((n, c // block, h, w, block), name="x", dtype=dtype)
    y = layout_transform(x, f"NCHW{block}c", "NCHW")
    xs = _data(x.shape, dtype, seed)
    return _run(_build([y], [x]), y, xs), nchwc_to_nchw(xs)


SHAPES = [(1, 32, 3, 1), (1, 16, 5, 7), (2, 32, 3, 13), (1, 64, 4, 56), (1, 16, 2, 112),
          (1, 48, 9, 14), (1, 32, 2, 28), (1, 16, 2, 34)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_to_blocked_matches_numpy(shape, dtype):
    got, want = to_blocked(shape, 16, dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_from_blocked_matches_numpy(shape, dtype):
    got, want = from_blocked(shape, 16, dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("block,shape", [(3, (1, 3, 6, 224)), (8, (1, 24, 3, 56)),
                                         (4, (1, 8, 2, 13)), (32, (1, 64, 2, 9))])
def test_other_blocks_both_ways(block, shape):
    got, want = to_blocked(shape, block)
    np.testing.assert_array_equal(got, want)
    got, want = from_blocked(shape, block)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=12, deadline=None)
@given(cb=st.integers(1, 3), block=st.sampled_from([3, 8, 16]), h=st.integers(1, 4),
       w=st.integers(1, 40), forward=st.booleans())
def test_random_shapes(cb, block, h, w, forward):
    shape = (1, cb * block, h, w)
    got, want = (to_blocked if forward else from_blocked)(shape, block, seed=w)
    np.testing.assert_array_equal(got, want)


def test_channels_not_multiple_of_block_are_rejected():
    with pytest.raises(TopiError, match="24 channels do not split into blocks of 16"):
        layout_transform(te.placeholder((1, 24, 4, 4)), "NCHW", "NCHW16c")


def test_fused_producers_are_computed_per_tile():
    # relu(x + bias[c]) -> NCHW16c: the add is inlined into the relu, which fills each tile.
    shape = (1, 32, 3, 56)
    x = te.placeholder(shape, name="x")
    bias = te.placeholder((32,), name="bias")
    added = te.compute(shape, lambda n, c, h, w: x[n, c, h, w] + bias[c], name="add",
                       tag=tags.BROADCAST)
    relu = te.compute(shape, lambda *i: te.max(added[i], te.const(0, "float32")),
                      name="relu", tag=tags.ELEMWISE)
    y = layout_transform(relu, "NCHW", "NCHW16c")
    plan = plan_layout_transform([y])
    assert plan is not None and plan.source is relu and plan.inline == (added.op,)
    xs, bs = _data(shape, "float32"), _data((32,), "float32", 1)
    got = _run(_build([y], [x, bias]), y, xs, bs)
    np.testing.assert_array_equal(got, nchw_to_nchwc(np.maximum(xs + bs[None, :, None, None],
                                                                0), 16))


def test_fused_producer_from_blocked():
    # (a + b) in NCHW16c -> NCHW, as a residual add before the graph's output transform.
    blocked = (1, 2, 3, 28, 16)
    a = te.placeholder(blocked, name="a")
    b = te.placeholder(blocked, name="b")
    added = te.compute(blocked, lambda *i: a[i] + b[i], name="add", tag=tags.ELEMWISE)
    y = layout_transform(added, "NCHW16c", "NCHW")
    av, bv = _data(blocked, "float32"), _data(blocked, "float32", 1)
    got = _run(_build([y], [a, b]), y, av, bv)
    np.testing.assert_array_equal(got, nchwc_to_nchw(av + bv))


def test_other_groups_fall_back_to_injective():
    x = te.placeholder((1, 2, 3, 5, 16), name="x")
    block_to_block = layout_transform(x, "NCHW16c", "NCHW8c")
    assert plan_layout_transform([block_to_block]) is None
    xs = _data(x.shape, "float32")
    got = _run(_build([block_to_block], [x]), block_to_block, xs)
    np.testing.assert_array_equal(got, nchw_to_nchwc(nchwc_to_nchw(xs), 8))
    h = te.var("h")
    symbolic = layout_transform(te.placeholder((1, 16, h, 4), name="s"), "NCHW", "NCHW16c")
    assert plan_layout_transform([symbolic]) is None


def test_a_symbolic_batch_keeps_the_tiles():
    # (a model compiled over a dynamic batch: the batch only counts the rows run in parallel)
    n = te.size_var("n")
    x = te.placeholder((n, 32, 3, 8), name="x")
    y = layout_transform(x, "NCHW", "NCHW16c")
    assert plan_layout_transform([y]) is not None
    f = _build([y], [x])
    for batch in (1, 3):
        xs = _data((batch, 32, 3, 8), "float32", seed=batch)
        got = np.zeros((batch, 2, 3, 8, 16), "float32")
        f(xs, got)
        np.testing.assert_array_equal(got, nchw_to_nchwc(xs, 16))


def test_tile_width_divides_the_row():
    for row in range(1, 230):
        for block in (3, 8, 16, 32):
            width = tile_width(row, block)
            assert row % width == 0 and (width <= 8 or width * block <= 256)
    assert tile_width(56, 16) == 8 and tile_width(28, 16) == 4 and tile_width(14, 16) == 14


def test_no_gathers_in_the_kernel():
    # The point of the schedule: contiguous loads and stores plus shuffles, no vgather.
    x = te.placeholder((1, 32, 2, 56), name="x")
    y = layout_transform(x, "NCHW", "NCHW16c")
    asm = _build([y], [x]).get_source("asm")
    assert "gather" not in asm
    assert "vmovups" in asm or "vmovaps" in asm

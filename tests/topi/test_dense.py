"""dense / matmul / batch_matmul with their x86 schedules, against numpy (float64 products).

Tolerances: float32 inputs in [-1, 1), k <= 130: rtol 1e-4, atol 1e-4; float64: rtol 1e-10,
atol 1e-12.
"""
import numpy as np
import pytest

import kiln
from kiln import te
from kiln.topi import tags
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.topi.nn.dense import (batch_matmul, dense, matmul, pack_columns, pack_weight_numpy,
                                pack_width)
from kiln.target import Target
from kiln.topi.utils import TopiError
from kiln.topi.x86.dense import schedule_batch_matmul, schedule_dense, schedule_matmul

from pinned_targets import AVX512

RTOL = ATOL = 1e-4


def ref_dense(x, w, b=None):
    y = x.astype("float64") @ w.astype("float64").T
    return y if b is None else y + b


@pytest.mark.parametrize("m,n,k", [(1, 10, 7), (3, 40, 33), (17, 33, 64), (64, 48, 130)])
def test_dense_bias_relu(m, n, k, build_run, rand):
    x = te.placeholder((m, k), name="x")
    w = te.placeholder((n, k), name="w")
    b = te.placeholder((n,), name="b")
    y = dense(x, w, b)
    out = te.compute(y.shape, lambda i, j: te.max(y[i, j], 0.0), name="relu", tag=tags.ELEMWISE)
    xa, wa, ba = rand((m, k)), rand((n, k)), rand((n,))
    got = build_run(schedule_dense, out, [x, w, b], [xa, wa, ba])
    np.testing.assert_allclose(got, np.maximum(ref_dense(xa, wa, ba), 0), rtol=RTOL, atol=ATOL)


def test_dense_no_bias_is_output_and_tags(build_run, rand):
    x = te.placeholder((5, 20), name="x")
    w = te.placeholder((37, 20), name="w")
    y = dense(x, w)
    assert y.op.tag == tags.DENSE
    xa, wa = rand((5, 20)), rand((37, 20))
    got = build_run(schedule_dense, y, [x, w], [xa, wa])
    np.testing.assert_allclose(got, ref_dense(xa, wa), rtol=RTOL, atol=ATOL)


def test_dense_batched_and_vector_data(build_run, rand):
    x = te.placeholder((2, 3, 9), name="x")
    w = te.placeholder((11, 9), name="w")
    b = te.placeholder((11,), name="b")
    y = dense(x, w, b)
    xa, wa, ba = rand((2, 3, 9)), rand((11, 9)), rand((11,))
    got = build_run(schedule_dense, y, [x, w, b], [xa, wa, ba])
    np.testing.assert_allclose(got, xa @ wa.T + ba, rtol=RTOL, atol=ATOL)
    v = te.placeholder((9,), name="v")
    yv = dense(v, w)
    got = build_run(schedule_dense, yv, [v, w], [xa[0, 0], wa])
    np.testing.assert_allclose(got, wa @ xa[0, 0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", [(37, 1, 24), (3, 5, 1, 24)])
def test_dense_single_row_behind_batches_tiles_the_batches(shape, build_run, rand):
    """(L, 1, E) data, as nn.MultiheadAttention projects (sequence, batch, embedding): the
    sequence axis is the register tile's rows (a loop over one-row GEMMs ran at 8% of the
    peak), and an unrolled tile of several rows is there."""
    from kiln.target import Target
    from kiln.topi.x86.dense import gemm_rows
    x, w = te.placeholder(shape, name="x"), te.placeholder((40, 24), name="w")
    y = dense(x, w)
    xa, wa = rand(shape), rand((40, 24))
    got = build_run(schedule_dense, y, [x, w], [xa, wa])
    np.testing.assert_allclose(got, xa @ wa.T, rtol=RTOL, atol=ATOL)
    with Target("llvm"):
        assert gemm_rows(y.op) > 1


def test_dense_prepacked_weight(build_run, rand):
    """The graph layer may pack a constant weight once and pass the panels."""
    w = te.placeholder((45, 16), name="w")
    packed = pack_columns(w, transposed=True)
    wa = rand((45, 16))
    panels = build_run(lambda outs: te.create_schedule([o.op for o in outs]), packed, [w], [wa])
    assert panels.shape == (3, 16, 16)      # 45 columns: panels of 16 waste 3, of 32 waste 19
    np.testing.assert_array_equal(panels, pack_weight_numpy(wa))
    x = te.placeholder((4, 16), name="x")
    pw = te.placeholder(panels.shape, name="pw")
    y = dense(x, pw, units=45)
    xa = rand((4, 16))
    got = build_run(schedule_dense, y, [x, pw], [xa, panels])
    np.testing.assert_allclose(got, ref_dense(xa, wa), rtol=RTOL, atol=ATOL)


def test_dense_float64(build_run, rand):
    x = te.placeholder((6, 13), "float64", name="x")
    w = te.placeholder((21, 13), "float64", name="w")
    y = dense(x, w)
    xa, wa = rand((6, 13), "float64"), rand((21, 13), "float64")
    got = build_run(schedule_dense, y, [x, w], [xa, wa])
    np.testing.assert_allclose(got, ref_dense(xa, wa), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_transposes(ta, tb, build_run, rand):
    m, n, k = 13, 35, 24
    ashape = (k, m) if ta else (m, k)
    bshape = (n, k) if tb else (k, n)
    a = te.placeholder(ashape, name="a")
    b = te.placeholder(bshape, name="b")
    c = matmul(a, b, ta, tb)
    assert c.op.tag == tags.MATMUL and c.shape == (m, n)
    out = te.compute(c.shape, lambda i, j: c[i, j] * 2.0, name="scale", tag=tags.ELEMWISE)
    aa, ba = rand(ashape), rand(bshape)
    got = build_run(schedule_matmul, out, [a, b], [aa, ba])
    ref = (aa.T if ta else aa).astype("float64") @ (ba.T if tb else ba)
    np.testing.assert_allclose(got, 2 * ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("ba_,bb_,ta,tb", [(3, 3, False, False), (4, 1, False, True),
                                           (1, 2, True, False), (2, 2, True, True)])
def test_batch_matmul_broadcast_transposes(ba_, bb_, ta, tb, build_run, rand):
    m, n, k = 5, 19, 12
    ashape = (ba_, k, m) if ta else (ba_, m, k)
    bshape = (bb_, n, k) if tb else (bb_, k, n)
    a = te.placeholder(ashape, name="a")
    b = te.placeholder(bshape, name="b")
    c = batch_matmul(a, b, ta, tb)
    assert c.op.tag == tags.BATCH_MATMUL and c.shape == (max(ba_, bb_), m, n)
    aa, bv = rand(ashape), rand(bshape)
    got = build_run(schedule_batch_matmul, c, [a, b], [aa, bv])
    ref = np.matmul(aa.transpose(0, 2, 1) if ta else aa, bv.transpose(0, 2, 1) if tb else bv)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


def test_gemm_threads_take_column_tiles_of_a_wide_unpacked_operand(build_run, rand):
    # A 1x1 convolution as W (O, C) @ x (C, H*W): column tiles go to the threads, so each is
    # loaded once; a packed (dense) or narrow right operand keeps row tiles.
    from kiln.target import Target
    from kiln.topi.x86.dense import gemm_col_parallel
    w = te.placeholder((1, 16, 24), name="w")
    x = te.placeholder((2, 24, 100), name="x")
    wide = batch_matmul(w, x)
    tall = batch_matmul(te.placeholder((1, 100, 24), name="a"), te.placeholder((2, 24, 16)))
    packed = dense(te.placeholder((64, 24), name="d"), te.placeholder((100, 24), name="dw"))
    with Target("llvm"):
        assert gemm_col_parallel(wide.op, 8)
        assert not gemm_col_parallel(tall.op, 8)
        assert not gemm_col_parallel(packed.op, 8)
    out = te.compute(wide.shape, lambda z, i, j: te.max(wide[z, i, j], 0.0), name="relu",
                     tag=tags.ELEMWISE)
    wa, xa = rand((1, 16, 24)), rand((2, 24, 100))
    got = build_run(schedule_batch_matmul, out, [w, x], [wa, xa])
    np.testing.assert_allclose(got, np.maximum(np.matmul(wa, xa), 0), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("batch,m", [(6, 13), (12, 29), (4, 197)])
def test_batch_matmul_partial_row_tile_keeps_a_register_tile(batch, m, build_run, rand):
    """Rows that the tile does not divide (attention's 197 tokens): with several batches the
    threads take whole batches, so only the last row tile is partial (split off) and the
    others accumulate in an unrolled register tile, not a loop of symbolic extent."""
    import kiln
    from kiln.target import Target
    from kiln.topi.x86.dense import gemm_rows
    a, b = te.placeholder((batch, m, 24), name="a"), te.placeholder((batch, 19, 24), name="b")
    c = batch_matmul(a, b, False, True)
    aa, bv = rand((batch, m, 24)), rand((batch, 19, 24))
    got = build_run(schedule_batch_matmul, c, [a, b], [aa, bv])
    np.testing.assert_allclose(got, aa @ bv.transpose(0, 2, 1), rtol=RTOL, atol=ATOL)
    with Target("llvm"):
        mr = gemm_rows(c.op)
        text = str(kiln.lower(schedule_batch_matmul([c]), [a, b, c], name="f"))
    assert m % mr and f"in range({batch}) parallel" in text
    assert "min(" not in text.split("parallel", 1)[1].split("\n", 3)[1]


@pytest.mark.parametrize("target,lanes", [(AVX512, 16), ("llvm -mcpu=haswell", 8)])
def test_batch_matmul_partial_column_tile_keeps_whole_vector_tiles(target, lanes, build_run,
                                                                  rand):
    """Grouped 1x1 convolutions as products W_g (O/G, C/G) @ x_g (C/G, H*W): the threads take
    column tiles of the unpacked pixels. Tiles are a whole number of vectors that divides the
    pixels where one does (784 = 49 x 16 on AVX-512: 16-wide, not 32); with a partial last
    tile (196 pixels) the threads take whole groups (8) or, with few groups (3), the column
    tiles alone, and loop partitioning cuts the partial tile off: no tile of the parallel
    part has a symbolic width."""
    from kiln.topi.x86.dense import gemm_panel_width
    for groups, rows, k, pixels in ((3, 20, 80, 784), (8, 24, 96, 196), (3, 24, 96, 196)):
        w = te.placeholder((groups, rows, k), name="w")
        x = te.placeholder((groups, k, pixels), name="x")
        c = batch_matmul(w, x)
        with Target(target):
            nr = gemm_panel_width(c.op)
            text = str(kiln.lower(schedule_batch_matmul([c]), [w, x, c], name="f"))
        assert nr % lanes == 0 and (pixels % nr == 0 or pixels % lanes)
        parallel = text.split("parallel", 1)[1].split("\n  for", 1)[0]
        assert "min(" not in parallel and f"x{nr}(" in parallel
    w, x = te.placeholder((8, 24, 96), name="w"), te.placeholder((8, 96, 196), name="x")
    wa, xa = rand((8, 24, 96)), rand((8, 96, 196))
    got = build_run(schedule_batch_matmul, batch_matmul(w, x), [w, x], [wa, xa])
    np.testing.assert_allclose(got, np.matmul(wa, xa), rtol=RTOL, atol=ATOL)


def test_gemm_rows_balance_the_last_tile():
    """Rows no tile size divides: the fewest tiles, then the fullest last tile (AVX2: 7 rows
    as 4 + 3, 13 as 5 + 5 + 3); a divisor or a whole small extent as before."""
    from kiln.target import Target
    from kiln.topi.x86.dense import gemm_rows
    with Target("llvm -mcpu=haswell"):
        rows = {m: gemm_rows(dense(te.placeholder((m, 64)), te.placeholder((256, 64))).op)
                for m in (1, 5, 7, 13, 128, 197, 1000)}
    assert rows == {1: 1, 5: 5, 7: 4, 13: 5, 128: 4, 197: 6, 1000: 5}


def test_batch_matmul_float64_with_epilogue(build_run, rand):
    a = te.placeholder((2, 7, 9), "float64", name="a")
    b = te.placeholder((2, 9, 10), "float64", name="b")
    c = batch_matmul(a, b)
    out = te.compute(c.shape, lambda z, i, j: c[z, i, j] + 1.0, name="add1", tag=tags.ELEMWISE)
    aa, bv = rand((2, 7, 9), "float64"), rand((2, 9, 10), "float64")
    got = build_run(schedule_batch_matmul, out, [a, b], [aa, bv])
    np.testing.assert_allclose(got, aa @ bv + 1.0, rtol=1e-10, atol=1e-12)


def test_dense_matmul_errors():
    x = te.placeholder((4, 8), name="x")
    with pytest.raises(TopiError, match="8 input features"):
        dense(x, te.placeholder((3, 7)))
    with pytest.raises(TopiError, match="bias must have shape"):
        dense(x, te.placeholder((3, 8)), te.placeholder((4,)))
    with pytest.raises(TopiError, match="needs units="):
        dense(x, te.placeholder((1, 8, 16)))
    with pytest.raises(TopiError, match="inner dimensions differ"):
        matmul(x, te.placeholder((7, 3)))
    with pytest.raises(TopiError, match="neither is 1"):
        batch_matmul(te.placeholder((2, 3, 4)), te.placeholder((3, 4, 5)))
    with pytest.raises(TopiError, match="must be 3-D"):
        batch_matmul(x, te.placeholder((4, 5)))


def test_dense_reshaped_epilogue(build_run, rand):
    """An epilogue that remaps indices (reshape) keeps the dense at the root, tiled."""
    x = te.placeholder((6, 10), name="x")
    w = te.placeholder((20, 10), name="w")
    y = dense(x, w)
    r = te.compute((2, 3, 20), lambda a, b, c: y[a * 3 + b, c] - 1.0, name="reshape_sub",
                   tag=tags.INJECTIVE)
    xa, wa = rand((6, 10)), rand((20, 10))
    got = build_run(schedule_dense, r, [x, w], [xa, wa])
    np.testing.assert_allclose(got, (ref_dense(xa, wa) - 1.0).reshape(2, 3, 20),
                               rtol=RTOL, atol=ATOL)


def test_dense_symbolic_rows(rand):
    m = te.var("m")
    x = te.placeholder((m, 20), name="x")
    w = te.placeholder((37, 20), name="w")
    y = dense(x, w)
    f = kiln.build(schedule_dense(y), [x, w, y])
    wa = rand((37, 20))
    for rows in (1, 13):
        xa = rand((rows, 20))
        got = np.zeros((rows, 37), "float32")
        f(xa, wa, got)
        np.testing.assert_allclose(got, ref_dense(xa, wa), rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------- pack width heuristic
@pytest.mark.parametrize("n,dtype,nr", [
    (768, "float32", 32), (2304, "float32", 32), (10, "float32", 16), (16, "float32", 16),
    (48, "float32", 16), (64, "float32", 32), (200, "float32", 32), (45, "float32", 16),
    (64, "float64", 16), (5, "float64", 8), (1000, "float64", 16)])
def test_pack_width_heuristic(n, dtype, nr, avx512):
    """Two registers of columns (16 zmm accumulators in an 8-row tile) unless the operand is
    narrow and one-register panels pad less."""
    assert pack_width(n, dtype) == nr


@given(n=st.integers(1, 5000), dtype=st.sampled_from(["float32", "float64"]),
       target=st.sampled_from([AVX512, "llvm -mcpu=haswell"]))
@settings(max_examples=200, deadline=None)
def test_pack_width_properties(n, dtype, target):
    target = Target(target)
    lanes = target.vector_width_bits // (32 if dtype == "float32" else 64)
    with target:
        nr = pack_width(n, dtype)
    assert nr in (lanes, 2 * lanes)
    padded = -(-n // nr) * nr
    assert padded - n < nr
    if n > 8 * lanes:
        assert nr == 2 * lanes            # wide operands: padding is a small share anyway


@given(n=st.integers(1, 70), k=st.integers(1, 9), nr=st.sampled_from([None, 8, 16, 32]),
       transposed=st.booleans())
@settings(max_examples=60, deadline=None)
def test_pack_weight_numpy_roundtrip(n, k, nr, transposed):
    """Unpacking the panels gives back the weight; columns past n are zero."""
    rng = np.random.default_rng(n * 31 + k)
    w = rng.uniform(-1, 1, (n, k) if transposed else (k, n)).astype("float32")
    p = pack_weight_numpy(w, nr=nr, transposed=transposed)
    width = p.shape[2]
    assert width == (nr or pack_width(n))
    rows = p.transpose(0, 2, 1).reshape(-1, k)      # (nb * NR, k)
    np.testing.assert_array_equal(rows[:n], w if transposed else w.T)
    assert not rows[n:].any()


@pytest.mark.parametrize("nr", [16, 48])
def test_pack_columns_explicit_width_and_untransposed(nr, build_run, rand):
    """pack_columns with a given width, from a (k, n) operand, equals the numpy packing; a
    dense on those panels (any width) matches numpy."""
    b = te.placeholder((24, 70), name="b")
    packed = pack_columns(b, transposed=False, nr=nr)
    ba = rand((24, 70))
    panels = build_run(lambda outs: te.create_schedule([o.op for o in outs]), packed, [b], [ba])
    np.testing.assert_array_equal(panels, pack_weight_numpy(ba, nr=nr, transposed=False))
    x = te.placeholder((10, 24), name="x")
    pw = te.placeholder(panels.shape, name="pw")
    bias = te.placeholder((70,), name="bias")
    y = dense(x, pw, bias, units=70)
    xa, bias_a = rand((10, 24)), rand((70,))
    got = build_run(schedule_dense, y, [x, pw, bias], [xa, panels, bias_a])
    np.testing.assert_allclose(got, xa.astype("float64") @ ba + bias_a, rtol=RTOL, atol=ATOL)


def test_pack_columns_bad_width():
    with pytest.raises(TopiError, match="pack width must be a positive int"):
        pack_columns(te.placeholder((4, 8)), transposed=True, nr=0)


@pytest.mark.parametrize("m,k,n", [(128, 96, 2304 // 8), (33, 64, 40), (1, 50, 77)])
def test_dense_prepacked_bert_like_gelu(m, k, n, build_run, rand):
    """Pre-packed weight with bias and a tanh-GELU-like epilogue (rows not a multiple of the
    8-row tile, a batch-1 row, units not a multiple of the panel width)."""
    wa = rand((n, k))
    panels = pack_weight_numpy(wa)
    x = te.placeholder((m, k), name="x")
    pw = te.placeholder(panels.shape, name="pw")
    b = te.placeholder((n,), name="b")
    y = dense(x, pw, b, units=n)
    out = te.compute(y.shape, lambda i, j: y[i, j] * te.sigmoid(y[i, j] * 1.702), name="gelu",
                     tag=tags.ELEMWISE)
    xa, ba = rand((m, k)), rand((n,))
    got = build_run(schedule_dense, out, [x, pw, b], [xa, panels, ba])
    ref = ref_dense(xa, wa, ba)
    np.testing.assert_allclose(got, ref / (1 + np.exp(-1.702 * ref)), rtol=RTOL, atol=ATOL)


def test_dense_prepacked_float64(build_run, rand, host_lanes):
    """float64 panels are a register pair wide (AVX-512: 2 x 8 lanes, 16 columns)."""
    wa = rand((45, 19), "float64")
    panels = pack_weight_numpy(wa)
    nr = 2 * (host_lanes // 2)
    assert panels.shape == (-(-45 // nr), 19, nr)
    x = te.placeholder((9, 19), "float64", name="x")
    pw = te.placeholder(panels.shape, "float64", name="pw")
    y = dense(x, pw, units=45)
    xa = rand((9, 19), "float64")
    got = build_run(schedule_dense, y, [x, pw], [xa, panels])
    np.testing.assert_allclose(got, ref_dense(xa, wa), rtol=1e-10, atol=1e-12)

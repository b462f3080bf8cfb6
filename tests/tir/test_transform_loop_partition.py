"""LoopPartition: hand-built loop nests; structure of the pieces, and the same numbers."""
import numpy as np
import pytest

from arith.arith_eval import run
from kiln.tir import (Buffer, BufferLoad, BufferStore, Call, For, IfThenElse, IntImm, LetStmt,
                      PrimFunc, SeqStmt, SizeVar, Var, const, if_then_else, likely,
                      post_order_visit)
from kiln.tir import op
from kiln.tir.transform.loop_partition import loop_partition


def _find(stmt, pred):
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if pred(n) else None)
    return found


def _count(stmt, pred):
    return len(_find(stmt, pred))


def _guards(stmt):
    return _count(stmt, lambda n: isinstance(n, Call) and n.op == "likely")


def _top_loops(stmt):
    parts = stmt.seq if isinstance(stmt, SeqStmt) else (stmt,)
    return [p for p in parts if isinstance(p, For)]


def _same_numbers(before, after, buffers, env=None, seed=0):
    """Both programs on the same random inputs; outputs equal exactly (tolerance 0)."""
    rng = np.random.default_rng(seed)
    init = {b: rng.standard_normal(max(size, 1)).astype(b.dtype) for b, size in buffers.items()}
    a = {b: v.copy() for b, v in init.items()}
    c = {b: v.copy() for b, v in init.items()}
    run(before, a, env)
    run(after, c, env)
    for b in buffers:
        np.testing.assert_allclose(c[b], a[b], rtol=0, atol=0)


def _split_copy(n, factor=32):
    A, B = Buffer.make("A", "float32", (n,)), Buffer.make("B", "float32", (n,))
    io, ii = Var("io"), Var("ii")
    idx = io * factor + ii
    body = IfThenElse(likely(idx < n), BufferStore(B, BufferLoad(A, idx) + 1.0, idx))
    s = For(io, const(0), (n + factor - 1) // factor, "serial",
            For(ii, const(0), const(factor), "serial", body))
    return s, A, B, io, ii


def test_constant_split_tail():
    s, A, B, io, ii = _split_copy(const(100))
    out = loop_partition(s)
    main, tail = _top_loops(out)
    assert main.loop_var is io and main.extent is const(3) and _guards(main) == 0
    # The tail (io == 3) is a single iteration: its inner loop shrinks to the 4 live elements.
    assert tail.extent is const(4) and _guards(tail) == 0
    _same_numbers(s, out, {A: 100, B: 100})


@pytest.mark.parametrize("size_var", [SizeVar, Var])
def test_symbolic_split_tail(size_var):
    n = size_var("n")
    s, A, B, io, ii = _split_copy(n)
    out = loop_partition(s)
    main = _top_loops(out)[0]
    assert main.loop_var is io and _guards(main) == 0
    assert main.body.extent is const(32)
    assert _guards(out) == 0
    sizes = (0, 1, 31, 32, 33, 100) if size_var is SizeVar else (-3, 0, 1, 33, 64)
    for size in sizes:
        _same_numbers(s, out, {A: max(size, 0), B: max(size, 0)}, env={n: size})


def test_primfunc_in_primfunc_out():
    n = Var("n")
    s, A, B, io, ii = _split_copy(n)
    f = PrimFunc("copy", (A, B), s, shape_vars=(n,))
    g = loop_partition(f)
    assert isinstance(g, PrimFunc) and g.params == f.params
    main = _top_loops(g.body)[0]
    assert main.extent is n // 32 and _guards(main) == 0


def test_padding_guard_splits_in_three():
    A, B = Buffer.make("A", "float32", (56,)), Buffer.make("B", "float32", (58,))
    i = Var("i")
    value = if_then_else(likely((i >= 1) & (i < 57)), BufferLoad(A, i - 1), const(0.0))
    s = For(i, const(0), const(58), "serial", BufferStore(B, value, i))
    out = loop_partition(s)
    assert _count(out, lambda n: isinstance(n, Call) and n.op == "if_then_else") == 0
    # i == 0 and i == 57 become single stores around the main loop over [1, 57).
    assert isinstance(out, SeqStmt) and len(out.seq) == 3
    assert out.seq[0] is BufferStore(B, const(0.0), const(0))
    assert out.seq[1] is For(i, const(1), const(56), "serial", BufferStore(B, BufferLoad(A, i - 1), i))
    assert out.seq[2] is BufferStore(B, const(0.0), const(57))
    _same_numbers(s, out, {A: 56, B: 58})


def test_two_dimensional_tiles():
    n, m = SizeVar("n"), SizeVar("m")
    A = Buffer.make("A", "float32", (n * m,))
    yo, yi, xo, xi = Var("yo"), Var("yi"), Var("xo"), Var("xi")
    y, x = yo * 8 + yi, xo * 4 + xi
    body = IfThenElse(likely(y < n), IfThenElse(likely(x < m), BufferStore(A, y * 1.0 + 0.5, y * m + x)))
    s = For(yo, const(0), (n + 7) // 8, "serial", For(xo, const(0), (m + 3) // 4, "serial",
            For(yi, const(0), const(8), "serial", For(xi, const(0), const(4), "serial", body))))
    out = loop_partition(s)
    main = _top_loops(out)[0]
    inner_main = _top_loops(main.body)[0]
    assert _guards(inner_main) == 0
    for size_n, size_m in ((0, 5), (9, 4), (16, 7), (13, 13)):
        _same_numbers(s, out, {A: size_n * size_m}, env={n: size_n, m: size_m})


def test_guard_with_decreasing_coefficient():
    A = Buffer.make("A", "float32", (20,))
    i = Var("i")
    s = For(i, const(0), const(20), "serial",
            IfThenElse(likely(15 - i < 10), BufferStore(A, const(3.0), i)))
    out = loop_partition(s)
    loops = _top_loops(out)
    assert len(loops) == 1 and loops[0].min is const(6) and _guards(out) == 0
    _same_numbers(s, out, {A: 20})


def test_vectorized_loop_splits_only_into_constant_pieces():
    A = Buffer.make("A", "float32", (16,))
    i, n = Var("i"), Var("n")
    s = For(i, const(0), const(16), "vectorized",
            IfThenElse(likely(i < 10), BufferStore(A, const(1.0), i)))
    out = loop_partition(s)
    assert out is For(i, const(0), const(10), "vectorized", BufferStore(A, const(1.0), i))
    symbolic = For(i, const(0), const(16), "vectorized",
                   IfThenElse(likely(i < n), BufferStore(A, const(1.0), i)))
    assert loop_partition(symbolic) is symbolic


def test_unanalysable_guards_stay():
    A = Buffer.make("A", "float32", (16,))
    i, t = Var("i"), Var("t")
    nonlinear = For(i, const(0), const(16), "serial",
                    IfThenElse(likely(i * i < 10), BufferStore(A, const(1.0), i)))
    assert loop_partition(nonlinear) is nonlinear
    # The guard depends on a value computed inside the loop: no region can name it.
    let_bound = For(i, const(0), const(16), "serial",
                    LetStmt(t, BufferLoad(Buffer.make("K", "int32", (16,)), i),
                            IfThenElse(likely(i < t), BufferStore(A, const(1.0), i))))
    assert loop_partition(let_bound) is let_bound
    no_likely = For(i, const(0), const(16), "serial",
                    IfThenElse(i < 10, BufferStore(A, const(1.0), i)))
    assert loop_partition(no_likely) is no_likely


def test_thread_bound_loops_are_left_alone():
    A = Buffer.make("A", "float32", (64,))
    i = Var("i")
    s = For(i, const(0), const(64), "thread_binding",
            IfThenElse(likely(i < 50), BufferStore(A, const(1.0), i)), thread_tag="threadIdx.x")
    assert loop_partition(s) is s


# --------------------------------------------------------------------- property
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_guard = st.tuples(st.integers(-3, 3), st.integers(-3, 3), st.integers(-10, 40),
                   st.booleans(), st.integers(0, 40), st.integers(0, 4))


def _build_guard(g, io, ii, n):
    a, b, c, symbolic, k, form = g
    lhs = io * a + ii * b + c
    rhs = n if symbolic else const(k)
    return [lhs < rhs, lhs <= rhs, lhs > rhs, lhs >= rhs, (lhs >= 0) & (lhs < rhs)][form]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(factor=st.sampled_from([1, 2, 3, 4, 8]), guards=st.lists(_guard, min_size=1, max_size=2),
       in_call=st.booleans(), kind=st.sampled_from(["serial", "vectorized", "unrolled"]),
       sizes=st.lists(st.integers(0, 40), min_size=3, max_size=3))
def test_partition_preserves_results(factor, guards, in_call, kind, sizes):
    """Random linear guards on a split loop: same buffer contents before and after."""
    n = SizeVar("n")
    io, ii = Var("io"), Var("ii")
    A = Buffer.make("A", "float32", (64,))
    cond = _build_guard(guards[0], io, ii, n)
    for g in guards[1:]:
        cond = cond & _build_guard(g, io, ii, n)
    idx = op.floormod(io * factor + ii, 64)
    if in_call:
        body = BufferStore(A, if_then_else(likely(cond), BufferLoad(A, idx) * 2.0, const(3.0)), idx)
    else:
        body = IfThenElse(likely(cond), BufferStore(A, BufferLoad(A, idx) + 1.0, idx),
                          BufferStore(A, const(-1.0), op.floormod(idx + 7, 64)))
    s = For(io, const(0), (n + factor - 1) // factor, "serial",
            For(ii, const(0), const(factor), kind, body))
    out = loop_partition(s)
    for size in sizes:
        _same_numbers(s, out, {A: 64}, env={n: size}, seed=size)


def _edge_tile(width, tile, pad):
    """A row of `width` outputs in tiles of `tile`, as a register tile's loop nest: an unrolled
    loop cut to min(width - xo*tile, tile) at the edge, each output reading `pad` columns left
    of it behind a padding guard, then a copy-out of the tile behind an edge guard."""
    A, B = Buffer.make("A", "float32", (width,)), Buffer.make("B", "float32", (width + tile,))
    xo, xi, xj = Var("xo"), Var("xi"), Var("xj")
    x = xo * tile + xi
    value = if_then_else(likely(x >= pad), BufferLoad(A, x - pad), const(0.5))
    compute = For(xi, const(0), op.min_(width - xo * tile, const(tile)), "unrolled",
                  BufferStore(B, value + 1.0, x))
    y = xo * tile + xj
    copy_out = For(xj, const(0), const(tile), "serial",
                   IfThenElse(likely(y < width), BufferStore(B, BufferLoad(B, y) * 2.0, y)))
    return For(xo, const(0), const((width + tile - 1) // tile), "serial",
               SeqStmt.flatten(compute, copy_out)), A, B


@pytest.mark.parametrize("width", [7, 20])
def test_cut_tile_edge_splits_off_whole_tiles(width):
    s, A, B = _edge_tile(width, 6, 1)
    out = loop_partition(s)
    # The border guard needs xo >= 1, the cut edge xo < width // 6: with width 7 no tile is
    # free of both, so the loop is split on one side first. An unrolled loop of extent
    # min(width - xo*6, 6) could not unroll.
    extents = []
    post_order_visit(out, lambda n: extents.append(n.extent)
                     if isinstance(n, For) and n.kind == "unrolled" else None)
    assert extents and all(isinstance(e, IntImm) for e in extents), extents
    assert _guards(out) == 0
    _same_numbers(s, out, {A: width, B: width + 6})


@settings(max_examples=40, deadline=None, derandomize=True)
@given(width=st.integers(1, 30), tile=st.integers(1, 8), pad=st.integers(0, 3))
def test_cut_tile_edge_preserves_results(width, tile, pad):
    s, A, B = _edge_tile(width, tile, pad)
    _same_numbers(s, loop_partition(s), {A: width, B: width + tile})


def _padded_stencil(h, w, tile):
    """A 3x3 padded stencil over an h x w image in 1 x `tile` column tiles: one guard with
    both dimensions' padding tests, as an inlined padding stage makes it."""
    A, B = Buffer.make("A", "float32", (h * w,)), Buffer.make("B", "float32", (h * w,))
    y, xo, xi, ry, rx = Var("y"), Var("xo"), Var("xi"), Var("ry"), Var("rx")
    iy, ix = y + ry - 1, xo * tile + xi + rx - 1
    inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
    x = xo * tile + xi
    acc = BufferStore(B, BufferLoad(B, y * w + x)
                      + if_then_else(likely(inside), BufferLoad(A, iy * w + ix), const(0.0)),
                      y * w + x)
    nest = For(ry, const(0), const(3), "serial", For(rx, const(0), const(3), "serial",
               For(xi, const(0), const(tile), "unrolled", acc)))
    return For(y, const(0), const(h), "serial",
               For(xo, const(0), const(w // tile), "serial", nest)), A, B


def _column_loops(stmt):
    return _find(stmt, lambda n: isinstance(n, For) and n.loop_var.name == "xo")


@pytest.mark.parametrize("h,w,tile", [(8, 16, 4), (5, 12, 3), (4, 8, 2)])
def test_border_rows_keep_their_column_guards(h, w, tile):
    """The first and last rows are split on their own (row) guards only: each keeps one loop
    over all its column tiles, guarded, instead of left, middle and right pieces (9 copies
    of a 2-D tile's body become 5). The middle rows' middle tiles have no guard."""
    s, A, B = _padded_stencil(h, w, tile)
    out = loop_partition(s)
    top, middle, bottom = out.seq
    assert isinstance(middle, For) and middle.min is const(1) and middle.extent is const(h - 2)
    for row in (top, bottom):
        (columns,) = _column_loops(row)
        assert columns.min is const(0) and columns.extent is const(w // tile)
        assert _guards(row) > 0
    inner = _column_loops(middle.body)
    assert len(inner) == 1 and _guards(inner[0]) == 0 and inner[0].extent is const(w // tile - 2)
    _same_numbers(s, out, {A: h * w, B: h * w})


@settings(max_examples=30, deadline=None, derandomize=True)
@given(h=st.integers(1, 9), cols=st.integers(1, 5), tile=st.integers(1, 4))
def test_padded_stencil_preserves_results(h, cols, tile):
    s, A, B = _padded_stencil(h, cols * tile, tile)
    _same_numbers(s, loop_partition(s), {A: h * cols * tile, B: h * cols * tile})

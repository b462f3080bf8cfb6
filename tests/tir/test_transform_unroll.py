"""unroll: structural Before -> Expected (printed text or `is`), the auto-unroll pragma and its
caps, and differential runs through the reference interpreter (integer programs: exact)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tir import (Allocate, AttrStmt, Buffer, BufferLoad, BufferStore, For, IfThenElse,
                      LetStmt, PrimFunc, SeqStmt, Var, const, post_order_visit, to_text)
from kiln.tir import op
from kiln.tir.transform.unroll import AUTO_UNROLL_KEY, MAX_UNROLLED_STATEMENTS, unroll
from interp import assert_same_effect


def load(buf, index):
    return BufferLoad(buf, op.convert(index))


def store(buf, value, index):
    return BufferStore(buf, op.convert(value), op.convert(index))


def loop(var, extent, body, kind="serial", start=0, annotations=()):
    return For(var, const(start), op.convert(extent), kind, body, "", annotations)


def ints(buf, seed=0):
    return np.random.default_rng(seed).integers(-100, 100, buf.shape[0].value).astype(buf.dtype)


def loops_of(node):
    found = []
    post_order_visit(node, lambda n: found.append(n) if isinstance(n, For) else None)
    return found


def stores_of(node):
    found = []
    post_order_visit(node, lambda n: found.append(n) if isinstance(n, BufferStore) else None)
    return found


def pragma(n, body):
    return AttrStmt(None, AUTO_UNROLL_KEY, const(n), body)


# ------------------------------------------------------------------ explicit unrolling
def test_unrolled_loop_is_expanded_and_folded():
    A, C = Buffer.make("A", "float32", (4,)), Buffer.make("C", "float32", (12,))
    i, k = Var("i"), Var("k")
    prog = loop(k, 3, store(C, load(A, k) * 2.0, i * 3 + k), "unrolled")
    expected = SeqStmt(tuple(store(C, load(A, k_) * 2.0, i * 3 + k_) for k_ in range(3)))
    assert unroll(prog) is expected


def test_loop_start_and_nested_unrolled_loops():
    A = Buffer.make("A", "int32", (32,))
    i, j = Var("i"), Var("j")
    prog = loop(i, 2, loop(j, 3, store(A, i * 10 + j, i * 4 + j), "unrolled"), "unrolled", start=1)
    out = unroll(prog)
    assert out is SeqStmt(tuple(store(A, i_ * 10 + j_, i_ * 4 + j_)
                                for i_ in (1, 2) for j_ in range(3)))
    assert_same_effect(prog, out, {A: ints(A)})


def test_constant_conditions_pick_their_branch():
    A = Buffer.make("A", "int32", (4,))
    k = Var("k")
    prog = loop(k, 4, IfThenElse(k < 2, store(A, 1, k), store(A, op.select(k > 2, 7, 8), k)),
                "unrolled")
    out = unroll(prog)
    assert to_text(out) == "A[0] = 1\nA[1] = 1\nA[2] = 8\nA[3] = 7"
    assert_same_effect(prog, out, {A: ints(A)})


def test_non_constant_extent_stays_a_serial_loop():
    A = Buffer.make("A", "int32", (8,))
    k, n = Var("k"), Var("n")
    prog = loop(k, n, store(A, k, k), "unrolled")
    assert unroll(prog) is prog.replace(kind="serial")


def test_zero_extent_unrolls_to_nothing():
    A = Buffer.make("A", "int32", (8,))
    k = Var("k")
    out = unroll(SeqStmt((loop(k, 0, store(A, k, k), "unrolled"), store(A, 5, 0))))
    assert out is store(A, 5, 0)


def test_each_copy_binds_fresh_variables_and_buffers():
    A = Buffer.make("A", "int32", (8,))
    T = Buffer.make("T", "int32", (1,), scope="local")
    k, x, m = Var("k"), Var("x"), Var("m")
    body = LetStmt(x, k * 3, Allocate(T, const(1), SeqStmt((
        store(T, x + 1, 0),
        loop(m, 2, store(A, load(T, 0) + m, k * 2 + m))))))
    prog = loop(k, 3, body, "unrolled")
    out = unroll(prog)
    binders = []
    post_order_visit(out, lambda n: binders.append(n.var) if isinstance(n, LetStmt) else
                     binders.append(n.loop_var) if isinstance(n, For) else
                     binders.append(n.buffer.data) if isinstance(n, Allocate) else None)
    assert len(binders) == 9 and len(set(binders)) == 9
    assert all(b not in (x, m, T.data) for b in binders)
    assert_same_effect(prog, out, {A: ints(A)})


def test_too_large_explicit_unroll_stays_serial():
    A = Buffer.make("A", "int32", (8,))
    k = Var("k")
    prog = loop(k, MAX_UNROLLED_STATEMENTS + 1, store(A, k, 0), "unrolled")
    assert unroll(prog) is prog.replace(kind="serial")


def test_primfunc_and_other_loop_kinds_untouched():
    A = Buffer.make("A", "int32", (16,))
    i, k = Var("i"), Var("k")
    body = loop(i, 4, loop(k, 4, store(A, k, i * 4 + k), "unrolled"), "parallel")
    func = PrimFunc("f", (A,), body)
    out = unroll(func)
    assert isinstance(out, PrimFunc) and out.body.kind == "parallel"
    assert len(stores_of(out.body)) == 4 and len(loops_of(out.body)) == 1
    assert_same_effect(func, out, {A: ints(A)})


# ------------------------------------------------------------------ auto unroll
def _nest(extent_i=4, extent_j=4):
    A = Buffer.make("A", "int32", (extent_i * extent_j,))
    i, j = Var("i"), Var("j")
    return A, loop(i, extent_i, loop(j, extent_j, store(A, load(A, i * extent_j + j) + i,
                                                        i * extent_j + j)))


def test_pragma_unrolls_the_whole_nest_when_small_enough():
    A, nest = _nest()
    out = unroll(pragma(16, nest))
    assert not loops_of(out) and len(stores_of(out)) == 16
    assert_same_effect(nest, out, {A: ints(A)})


def test_pragma_unrolls_only_inner_loop_when_nest_too_large():
    A, nest = _nest()
    out = unroll(pragma(8, nest))
    assert isinstance(out, For) and out.loop_var is nest.loop_var and out.kind == "serial"
    assert len(stores_of(out)) == 4 and len(loops_of(out)) == 1
    assert_same_effect(nest, out, {A: ints(A)})


def test_pragma_as_loop_annotation_is_consumed():
    A, nest = _nest()
    annotated = nest.replace(annotations=((AUTO_UNROLL_KEY, 8), ("other", 1)))
    out = unroll(annotated)
    assert out.annotations == (("other", 1),) and len(loops_of(out)) == 1
    assert_same_effect(nest, out, {A: ints(A)})


def test_global_auto_max_step_and_max_extent():
    A, nest = _nest(3, 5)
    assert loops_of(unroll(nest)) == loops_of(nest)          # nothing asked: nothing changes
    assert not loops_of(unroll(nest, auto_max_step=15))
    only_inner = unroll(nest, auto_max_step=5)
    assert len(loops_of(only_inner)) == 1 and len(stores_of(only_inner)) == 5
    # auto_max_extent unrolls short loops whatever their body size (TVM's rule).
    by_extent = unroll(nest, auto_max_extent=5)
    assert not loops_of(by_extent)
    assert_same_effect(nest, by_extent, {A: ints(A)})


def test_explicit_only_ignores_the_pragma():
    A, nest = _nest()
    prog = pragma(64, nest)
    assert unroll(prog, explicit_only=True) is prog


def test_remaining_inner_loop_blocks_auto_unroll():
    A = Buffer.make("A", "int32", (64,))
    i, j, n = Var("i"), Var("j"), Var("n")
    nest = loop(i, 2, loop(j, n, store(A, j, i * 8 + j)))
    assert unroll(pragma(1000, nest)) is nest


def test_auto_unroll_respects_the_statement_cap():
    A = Buffer.make("A", "int32", (100 * 100,))
    i, j = Var("i"), Var("j")
    nest = loop(i, 100, loop(j, 100, store(A, i, i * 100 + j)))
    out = unroll(nest, auto_max_step=10**9)
    assert len(loops_of(out)) == 1 and len(stores_of(out)) == 100


# ------------------------------------------------------------------ differential
_levels = st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["serial", "unrolled"])),
                   min_size=1, max_size=3)


@settings(max_examples=40, deadline=None)
@given(levels=_levels, step=st.sampled_from([0, 4, 16, 1000]), extent_cap=st.integers(0, 3),
       seed=st.integers(0, 1000))
def test_random_nests_compute_the_same(levels, step, extent_cap, seed):
    size = 5 ** len(levels)
    A, B = Buffer.make("A", "int32", (size,)), Buffer.make("B", "int32", (size,))
    vars_ = [Var(f"v{d}") for d in range(len(levels))]
    flat = op.convert(0)
    for v in vars_:
        flat = flat * 5 + v
    body = SeqStmt((store(A, load(A, flat) * 3 + load(B, flat), flat),
                    IfThenElse(vars_[-1] < 2, store(B, load(A, flat) - vars_[0], flat))))
    for v, (extent, kind) in reversed(list(zip(vars_, levels))):
        body = loop(v, extent, body, kind)
    prog = pragma(step, body) if step else body
    out = unroll(prog, auto_max_extent=extent_cap)
    assert all(f.kind != "unrolled" for f in loops_of(out))
    assert_same_effect(prog, out, {A: ints(A, seed), B: ints(B, seed + 1)})


def test_bad_pragma_value_is_reported():
    A, nest = _nest()
    with pytest.raises(ValueError, match=AUTO_UNROLL_KEY):
        unroll(AttrStmt(None, AUTO_UNROLL_KEY, Var("n"), nest))


def test_nothing_asked_nothing_unrolled():
    A = Buffer.make("A", "int32", (4,))
    k = Var("k")
    for prog in (loop(k, 0, store(A, k, k)), loop(k, 3, SeqStmt((store(A, k, k),)))):
        assert unroll(prog) is prog

"""The Simplify pass: structure of the result, and the same numbers before and after."""
import numpy as np

from arith.arith_eval import run
from kiln.tir import (Buffer, BufferLoad, BufferStore, Evaluate, For, IfThenElse, LetStmt,
                      PrimFunc, SeqStmt, SizeVar, Var, const, if_then_else, likely, select)
from kiln.tir import op
from kiln.tir.transform.simplify import simplify


def _loops(stmt):
    out = []
    from kiln.tir import post_order_visit
    post_order_visit(stmt, lambda n: out.append(n) if isinstance(n, For) else None)
    return out


def _ifs(stmt):
    out = []
    from kiln.tir import post_order_visit
    post_order_visit(stmt, lambda n: out.append(n) if isinstance(n, IfThenElse) else None)
    return out


def _same_numbers(before, after, buffers, env=None, seed=0):
    """Run both programs on the same random inputs; results must match exactly (tol 0)."""
    rng = np.random.default_rng(seed)
    init = {b: rng.standard_normal(size).astype(b.dtype) for b, size in buffers.items()}
    a = {b: v.copy() for b, v in init.items()}
    c = {b: v.copy() for b, v in init.items()}
    run(before, a, env)
    run(after, c, env)
    for b in buffers:
        np.testing.assert_allclose(c[b], a[b], rtol=0, atol=0)


def test_loop_var_bounds_remove_guards():
    A, B = Buffer.make("A", "float32", (64,)), Buffer.make("B", "float32", (64,))
    i = Var("i")
    body = IfThenElse(likely(i < 64), BufferStore(B, BufferLoad(A, i) * 2.0, i))
    s = For(i, const(0), const(64), "serial", body)
    out = simplify(s)
    assert out is For(i, const(0), const(64), "serial", BufferStore(B, BufferLoad(A, i) * 2.0, i))
    _same_numbers(s, out, {A: 64, B: 64})


def test_fused_index_folds_back():
    A, B = Buffer.make("A", "float32", (64,)), Buffer.make("B", "float32", (64,))
    f = Var("f")
    s = For(f, const(0), const(64), "serial",
            BufferStore(B, BufferLoad(A, f), (f // 16) * 16 + f % 16))
    out = simplify(s)
    assert out.body is BufferStore(B, BufferLoad(A, f), f)


def test_extent_zero_and_one():
    A = Buffer.make("A", "float32", (8,))
    i, j = Var("i"), Var("j")
    empty = For(i, const(0), const(0), "serial", BufferStore(A, const(1.0), i))
    assert simplify(SeqStmt((empty, BufferStore(A, const(2.0), const(0))))) is \
        BufferStore(A, const(2.0), const(0))
    one = For(i, const(3), const(1), "serial",
              For(j, const(0), const(2), "serial", BufferStore(A, const(1.0), i + j)))
    out = simplify(one)
    assert out is For(j, const(0), const(2), "serial", BufferStore(A, const(1.0), j + 3))
    _same_numbers(one, out, {A: 8})


def test_if_condition_is_assumed_in_branches():
    A = Buffer.make("A", "int32", (16,))
    i = Var("i")
    then_case = BufferStore(A, op.min_(i, 7), i)
    else_case = BufferStore(A, op.max_(i, 3) + select(i < 2, 100, 0), i)
    s = For(i, const(0), const(16), "serial", IfThenElse(i < 5, then_case, else_case))
    out = simplify(s)
    assert out.body.then_case is BufferStore(A, i, i)
    assert out.body.else_case is BufferStore(A, i, i)
    _same_numbers(s, out, {A: 16})


def test_decided_if_and_select_are_folded():
    A = Buffer.make("A", "float32", (8,))
    i = Var("i")
    s = For(i, const(0), const(8), "serial", SeqStmt((
        IfThenElse(i >= 8, BufferStore(A, const(1.0), i), BufferStore(A, const(2.0), i)),
        BufferStore(A, if_then_else(i < 100, BufferLoad(A, i), const(0.0)) + 1.0, i),
    )))
    out = simplify(s)
    assert not _ifs(out)
    assert out.body.seq[0] is BufferStore(A, const(2.0), i)
    assert out.body.seq[1] is BufferStore(A, BufferLoad(A, i) + 1.0, i)
    _same_numbers(s, out, {A: 8})


def test_empty_branches_vanish():
    A = Buffer.make("A", "float32", (8,))
    i = Var("i")
    s = For(i, const(0), const(8), "serial", IfThenElse(i < 4, Evaluate(const(0))))
    assert isinstance(simplify(s), Evaluate)
    s = For(i, const(0), const(8), "serial",
            IfThenElse(i < 4, Evaluate(const(0)), BufferStore(A, const(1.0), i)))
    out = simplify(s)
    assert out.body is IfThenElse(op.less(const(3), i), BufferStore(A, const(1.0), i))
    _same_numbers(s, out, {A: 8})


def test_let_constants_are_substituted_and_values_bound():
    A = Buffer.make("A", "int32", (32,))
    i, t, u = Var("i"), Var("t"), Var("u")
    s = For(i, const(0), const(4), "serial",
            LetStmt(t, const(8), LetStmt(u, i * t, BufferStore(A, u // 32 + u % 32, u))))
    out = simplify(s)
    # t is a constant: substituted. u stays a let, and its value's bounds [0, 24] are known.
    assert out.body is LetStmt(u, i * 8, BufferStore(A, u, u))
    _same_numbers(s, out, {A: 32})


def test_primfunc_shape_vars_are_sizes():
    n = Var("n")
    A = Buffer.make("A", "float32", (n,))
    i = Var("i")
    body = For(i, const(0), n, "serial",
               IfThenElse(likely(n >= 0), BufferStore(A, const(0.0), op.max_(i, 0))))
    f = PrimFunc("f", (A,), body, shape_vars=(n,))
    out = simplify(f)
    assert isinstance(out, PrimFunc)
    assert out.body is For(i, const(0), n, "serial", BufferStore(A, const(0.0), i))


def test_symbolic_tile_main_body_loses_its_guard():
    n = SizeVar("n")
    A, B = Buffer.make("A", "float32", (n,)), Buffer.make("B", "float32", (n,))
    io, ii = Var("io"), Var("ii")
    idx = io * 32 + ii
    s = For(io, const(0), n // 32, "serial", For(ii, const(0), const(32), "serial",
            IfThenElse(likely(idx < n), BufferStore(B, BufferLoad(A, idx), idx))))
    out = simplify(s)
    assert not _ifs(out)
    for size in (0, 5, 64, 70):
        _same_numbers(s, out, {A: size, B: size}, env={n: size})

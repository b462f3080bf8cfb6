"""The reference interpreter (tests/tir/interp.py) against numpy: integer semantics exact,
float math within rtol=1e-6 (float32) of numpy's own functions."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tir import (Allocate, AssertStmt, AttrStmt, Broadcast, Buffer, BufferLoad, BufferStore,
                      Call, Cast, Div, FloorDiv, FloorMod, For, IterVar, Let, LetStmt, Mod,
                      PrimFunc, Ramp, Range, Select, SeqStmt, SizeVar, Var, const, if_then_else)
from kiln.tir import op
from interp import InterpAssertError, InterpError, evaluate, run

ints32 = st.integers(-2**31, 2**31 - 1)


@settings(max_examples=100, deadline=None)
@given(a=ints32, b=ints32.filter(lambda v: v != 0))
def test_integer_division_semantics(a, b):
    x, y = Var("x"), Var("y")
    env = {x: a, y: b}
    if a == -2**31 and b == -1:
        return  # overflows in C as well
    trunc_q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    assert int(evaluate(Div(x, y), env)) == trunc_q
    assert int(evaluate(Mod(x, y), env)) == a - trunc_q * b
    assert int(evaluate(FloorDiv(x, y), env)) == a // b
    assert int(evaluate(FloorMod(x, y), env)) == a % b


def test_wraparound_and_casts():
    x = Var("x", "int8")
    assert int(evaluate(x + const(1, "int8"), {x: 127})) == -128
    v = Var("v")
    assert int(evaluate(Cast("int8", v), {v: 300})) == 44
    assert int(evaluate(Cast("uint8", v), {v: -1})) == 255
    f = Var("f", "float32")
    assert int(evaluate(Cast("int32", f), {f: -2.7})) == -2
    assert bool(evaluate(Cast("bool", f), {f: 0.5})) is True
    assert float(evaluate(Cast("float32", v), {v: 7})) == 7.0


def test_vectors_ramp_broadcast_select():
    base = Var("b")
    r = Ramp(base, const(3), 4)
    np.testing.assert_array_equal(evaluate(r, {base: 2}), [2, 5, 8, 11])
    np.testing.assert_array_equal(evaluate(Broadcast(base, 3), {base: 4}), [4, 4, 4])
    sel = Select(r < Broadcast(const(6), 4), r, Broadcast(const(0), 4))
    np.testing.assert_array_equal(evaluate(sel, {base: 2}), [2, 5, 0, 0])


def test_vector_loads_and_stores():
    A = Buffer.make("A", "float32", (8,))
    a = np.arange(8, dtype="float32")
    prog = BufferStore(A, BufferLoad(A, Ramp(const(7), const(-1), 4)) * Broadcast(const(2.0), 4),
                       Ramp(const(0), const(2), 4))
    run(prog, {A: a})
    np.testing.assert_array_equal(a, [14, 1, 12, 3, 10, 5, 8, 7])


def test_if_then_else_guards_each_lane_but_select_does_not():
    A = Buffer.make("A", "float32", (4,))
    a = np.arange(4, dtype="float32") + 1
    i = Var("i")
    guarded = if_then_else(i < 4, BufferLoad(A, i), const(-1.0))
    assert float(evaluate(guarded, {i: 9}, {A: a})) == -1.0
    r = Ramp(i, const(1), 4)
    vec = Call("float32x4", "if_then_else",
               (r < Broadcast(const(4), 4), BufferLoad(A, r), Broadcast(const(-1.0), 4)))
    np.testing.assert_array_equal(evaluate(vec, {i: 2}, {A: a}), [3, 4, -1, -1])
    with pytest.raises(InterpError, match="out of bounds"):
        evaluate(Select(i < 4, BufferLoad(A, i), const(-1.0)), {i: 9}, {A: a})


def test_lets_and_math():
    x, y = Var("x", "float32"), Var("y", "float32")
    e = Let(y, x * 2.0, op.exp(y) + op.sigmoid(y) + op.erf(x) + op.sqrt(op.abs_(x)))
    for v in (-1.5, 0.25, 2.0):
        want = np.exp(np.float32(2 * v)) + 1 / (1 + np.exp(np.float32(-2 * v))) + \
            math.erf(v) + np.sqrt(abs(np.float32(v)))
        np.testing.assert_allclose(float(evaluate(e, {x: v})), want, rtol=1e-6)


def test_matmul_program_against_numpy():
    n = 5
    A, B, C = (Buffer.make(name, "float32", (n, n)) for name in "ABC")
    i, j, k = Var("i"), Var("j"), Var("k")
    update = BufferStore(C, BufferLoad(C, i * n + j) + BufferLoad(A, i * n + k) *
                         BufferLoad(B, k * n + j), i * n + j)
    prog = For(i, const(0), const(n), "parallel", For(j, const(0), const(n), "serial", SeqStmt((
        BufferStore(C, const(0.0), i * n + j),
        For(k, const(0), const(n), "unrolled", update)))))
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype("float32") for _ in range(2))
    c = np.full((n, n), 99, "float32")
    run(prog, {A: a, B: b, C: c})
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_primfunc_binds_symbolic_shapes():
    n = SizeVar("n")
    A, B = Buffer.make("A", "int32", (n,)), Buffer.make("B", "int32", (n,))
    i = Var("i")
    func = PrimFunc("neg", (A, B), For(i, const(0), n, "serial",
                                        BufferStore(B, const(0) - BufferLoad(A, i), i)))
    a, b = np.arange(6, dtype="int32"), np.zeros(6, "int32")
    run(func, {A: a, B: b})
    np.testing.assert_array_equal(b, -a)
    with pytest.raises(InterpError, match="dimension 0 of buffer B"):
        run(func, {A: a, B: np.zeros(5, "int32")})
    with pytest.raises(InterpError, match="parameter buffer B"):
        run(func, {A: a})


def test_allocate_is_poisoned_and_scoped():
    A = Buffer.make("A", "float32", (2,))
    T = Buffer.make("T", "float32", (2,), "local")
    prog = Allocate(T, const(2), SeqStmt((BufferStore(T, const(1.0), const(0)),
                                          BufferStore(A, BufferLoad(T, const(0)), const(0)),
                                          BufferStore(A, BufferLoad(T, const(1)), const(1)))))
    a = np.zeros(2, "float32")
    run(prog, {A: a})
    assert a[0] == 1.0 and np.isnan(a[1])
    with pytest.raises(InterpError, match="T, which is neither given"):
        run(SeqStmt((prog, BufferStore(A, BufferLoad(T, const(0)), const(0)))), {A: a})


def test_thread_extent_and_assert():
    A = Buffer.make("A", "int32", (4,))
    tx = IterVar(Range(const(0), const(4)), Var("tx"), "thread", "threadIdx.x")
    a = np.zeros(4, "int32")
    run(AttrStmt(tx, "thread_extent", const(4), BufferStore(A, tx.var * 3, tx.var)), {A: a})
    np.testing.assert_array_equal(a, [0, 3, 6, 9])
    x = Var("x")
    with pytest.raises(InterpAssertError, match="x must be positive"):
        run(AssertStmt(x > 0, "x must be positive", BufferStore(A, x, const(0))), {A: a}, {x: -1})
    run(LetStmt(x, const(5), AssertStmt(x > 0, "x", BufferStore(A, x, const(0)))), {A: a})
    assert a[0] == 5


def test_errors_name_the_problem():
    A = Buffer.make("A", "int32", (4,))
    i = Var("i")
    with pytest.raises(InterpError, match="variable `i`"):
        run(BufferStore(A, i, const(0)), {A: np.zeros(4, "int32")})
    with pytest.raises(InterpError, match=r"store to A\[4\] is out of bounds"):
        run(BufferStore(A, const(1), const(4)), {A: np.zeros(4, "int32")})
    with pytest.raises(InterpError, match="storing a float32 value into A"):
        run(BufferStore(A, const(1.0), const(0)), {A: np.zeros(4, "int32")})
    with pytest.raises(InterpError, match="holds int32"):
        run(BufferStore(A, const(1), const(0)), {A: np.zeros(4, "float32")})
    with pytest.raises(InterpError, match="division by zero"):
        evaluate(Div(i, const(0)), {i: 3})
    with pytest.raises(InterpError, match="'mystery'"):
        evaluate(Call("float32", "mystery", ()))
    with pytest.raises(InterpError, match="different types|have types"):
        evaluate(Div(i, const(2, "int64")), {i: 3})

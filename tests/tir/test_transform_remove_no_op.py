"""remove_no_op: structural Before -> Expected (`is`: nodes are hash-consed), effects that must
stay, and differential runs through the reference interpreter (integer programs: exact)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tir import (Allocate, AssertStmt, AttrStmt, Buffer, BufferLoad, BufferStore, Call,
                      Evaluate, For, IfThenElse, LetStmt, Not, PrimFunc, Ramp, SeqStmt, Var,
                      const, no_op)
from kiln.tir import op
from kiln.tir.transform.remove_no_op import has_side_effect, remove_no_op
from interp import assert_same_effect

A = Buffer.make("A", "int32", (16,))


def load(buf, index):
    return BufferLoad(buf, op.convert(index))


def store(buf, value, index):
    return BufferStore(buf, op.convert(value), op.convert(index))


def loop(var, extent, body, kind="serial"):
    return For(var, const(0), op.convert(extent), kind, body)


def ints(seed=0):
    return np.random.default_rng(seed).integers(-9, 9, 16).astype("int32")


KEEP = store(A, 7, 0)


def test_constant_evaluates_go_and_sequences_collapse():
    prog = SeqStmt((Evaluate(const(0)), SeqStmt((Evaluate(const(1.5)), KEEP)),
                    Evaluate(load(A, 3) + 1)))
    assert remove_no_op(prog) is KEEP
    assert remove_no_op(SeqStmt((Evaluate(const(0)), Evaluate(const(2))))) is no_op()


def test_loops_without_effect():
    i, n = Var("i"), Var("n")
    assert remove_no_op(loop(i, n, Evaluate(const(0)))) is no_op()
    assert remove_no_op(loop(i, 0, store(A, 1, i))) is no_op()
    assert remove_no_op(loop(i, -3, store(A, 1, i))) is no_op()
    nested = loop(i, n, SeqStmt((Evaluate(const(0)), IfThenElse(i < 3, Evaluate(const(0))),
                                 loop(Var("j"), 4, Evaluate(const(0))))))
    assert remove_no_op(nested) is no_op()
    kept = loop(i, n, SeqStmt((Evaluate(const(0)), store(A, i, i))))
    assert remove_no_op(kept) is loop(i, n, store(A, i, i))


def test_if_then_else_branches():
    i = Var("i")
    c = i < 3
    assert remove_no_op(IfThenElse(c, Evaluate(const(0)), Evaluate(const(0)))) is no_op()
    assert remove_no_op(IfThenElse(c, Evaluate(const(0)), KEEP)) is IfThenElse(Not(c), KEEP)
    assert remove_no_op(IfThenElse(c, KEEP, Evaluate(const(0)))) is IfThenElse(c, KEEP)
    assert remove_no_op(IfThenElse(Not(c), Evaluate(const(0)), KEEP)) is IfThenElse(c, KEEP)
    assert remove_no_op(IfThenElse(const(True), KEEP, store(A, 1, 1))) is KEEP
    assert remove_no_op(IfThenElse(const(False), KEEP)) is no_op()


def test_self_stores_go_other_stores_stay():
    i = Var("i")
    assert remove_no_op(store(A, load(A, i), i)) is no_op()
    ramp = Ramp(i, const(1), 4)
    assert remove_no_op(BufferStore(A, BufferLoad(A, ramp), ramp)) is no_op()
    shifted = store(A, load(A, i + 1), i)
    assert remove_no_op(shifted) is shifted
    B = Buffer.make("B", "int32", (16,))
    other_buffer = store(B, load(A, i), i)
    assert remove_no_op(other_buffer) is other_buffer


def test_wrappers_around_nothing():
    x, T = Var("x"), Buffer.make("T", "int32", (4,), "local")
    empty = Evaluate(const(0))
    assert remove_no_op(LetStmt(x, const(3), empty)) is no_op()
    assert remove_no_op(AttrStmt(None, "pragma_x", 1, empty)) is no_op()
    assert remove_no_op(Allocate(T, const(4), SeqStmt((empty, store(T, load(T, 0), 0))))) is no_op()
    guarded = AssertStmt(x > 0, "x must be positive", empty)
    assert remove_no_op(guarded) is guarded     # the check itself is an effect


def test_side_effects_stay():
    effect = Evaluate(Call("int32", "printf", ()))
    assert has_side_effect(effect.value)
    assert not has_side_effect(op.exp(load(A, 0).astype("float32")))
    assert remove_no_op(SeqStmt((Evaluate(const(0)), effect))) is effect
    i = Var("i")
    # A loop around nothing but with a call in its extent keeps the call.
    out = remove_no_op(loop(i, Call("int32", "next_size", ()), Evaluate(const(0))))
    assert out is Evaluate(Call("int32", "next_size", ()))


def test_primfunc():
    func = PrimFunc("f", (A,), SeqStmt((Evaluate(const(0)), KEEP)))
    assert remove_no_op(func).body is KEEP


# ------------------------------------------------------------------ differential
_noise = st.sampled_from(["eval", "empty_loop", "zero_loop", "empty_if", "self_store", "none"])


def _build(kind, i):
    if kind == "eval":
        return Evaluate(load(A, i) * 2)
    if kind == "empty_loop":
        return loop(Var("j"), 3, Evaluate(const(0)))
    if kind == "zero_loop":
        return loop(Var("j"), 0, store(A, 99, 0))
    if kind == "empty_if":
        return IfThenElse(i < 5, Evaluate(const(0)), SeqStmt((Evaluate(const(0)), no_op())))
    if kind == "self_store":
        return store(A, load(A, i), i)
    return None


@settings(max_examples=40, deadline=None)
@given(noise=st.lists(_noise, min_size=1, max_size=6), flip=st.booleans(),
       seed=st.integers(0, 1000))
def test_random_programs_compute_the_same(noise, flip, seed):
    i = Var("i")
    stmts = [_build(kind, i) for kind in noise]
    real = store(A, load(A, i) + i, i)
    stmts.insert(len(stmts) // 2, IfThenElse(i < 8, Evaluate(const(0)), real) if flip else real)
    prog = loop(i, 16, SeqStmt(tuple(s for s in stmts if s is not None)))
    out = remove_no_op(prog)
    assert_same_effect(prog, out, {A: ints(seed)})
    assert isinstance(out, For) and not isinstance(out.body, SeqStmt)

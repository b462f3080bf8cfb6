"""common_subexpr: integer index expressions that the code generators would emit in two places,
one of them in an arm of a branch, are bound once by a LetStmt at the innermost statement
holding all their uses; copies in straight-line code are left to LLVM; what may trap is never
evaluated where it was not; floats, vectors and Let variables are left alone; and every
program computes what it computed before (the reference interpreter and both back-ends, against
the program without the pass and against numpy)."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from interp import assert_same_effect, run

import kiln
from kiln import te, topi
from kiln.codegen import build_module
from kiln.driver.pipeline import default_pipeline
from kiln.tir import (Buffer, BufferLoad, BufferStore, Cast, FloorDiv, FloorMod, For, IfThenElse,
                      Let, LetStmt, PrimFunc, Ramp, SeqStmt, Var, const, if_then_else,
                      post_order_visit)
from kiln.tir.transform.common_subexpr import common_subexpr


def _count(node, cls):
    found = []
    post_order_visit(node, lambda n: found.append(n) if isinstance(n, cls) else None)
    return found


def _occurrences(node, target) -> int:
    """Syntactic occurrences of `target` (post_order_visit sees a shared node once)."""
    def count(n):
        if n is target:
            return 1
        total = 0
        for name in getattr(n, "_fields", ()):
            value = getattr(n, name)
            for v in value if isinstance(value, tuple) else (value,):
                if hasattr(v, "_fields") and not isinstance(v, (Var, Buffer)):
                    total += count(v)
        return total
    return count(node)


def _lets(stmt) -> list:
    return _count(stmt, LetStmt)


def _concat(n=96, inputs=2):
    """B[f] = the f-th row of a concatenation, as topi lowers it: each arm recomputes the
    same row offset from floordiv(f, 24) and floormod(f, 24)."""
    ins = [Buffer.make(f"A{k}", "float32", (48 * 16,)) for k in range(inputs)]
    out = Buffer.make("B", "float32", (n,))
    f = Var("f")
    row = FloorDiv(f, const(24))
    offset = row * 16 + FloorMod(f, const(24)) * 4
    value = BufferLoad(ins[-1], offset - 32 * (inputs - 1))
    for k in reversed(range(inputs - 1)):
        value = if_then_else(row < 2 * (k + 1), BufferLoad(ins[k], offset - 32 * k), value)
    body = BufferStore(out, value, f)
    return PrimFunc("concat", ins + [out], For(f, const(0), const(n), "parallel", body)), ins, out


def test_index_math_repeated_in_every_arm_is_bound_once_inside_the_loop():
    func, ins, out = _concat(inputs=3)
    after = common_subexpr(func)
    f = func.body.loop_var
    row, col = FloorDiv(f, const(24)), FloorMod(f, const(24))
    assert _occurrences(func.body, row) == 5 and _occurrences(func.body, col) == 3
    assert _occurrences(after.body, row) == 1 and _occurrences(after.body, col) == 1
    loop = after.body
    assert isinstance(loop, For) and isinstance(loop.body, LetStmt), after
    rng = np.random.default_rng(0)
    buffers = {b: rng.standard_normal(b.shape[0]).astype("float32") for b in ins}
    buffers[out] = np.zeros(96, "float32")
    assert_same_effect(func.body, after.body, buffers)


def test_printed_before_and_after():
    func, _, _ = _concat(inputs=3)
    text = str(common_subexpr(func)).splitlines()[1:]
    assert text == [
        "  for f in range(96) parallel:",
        "    cse: int32 = floordiv(f, 24)",
        "    cse_1: int32 = cse*16 + floormod(f, 24)*4",
        "    B[f] = if_then_else(cse < 2, A0[cse_1], if_then_else(cse < 4, A1[cse_1 - 32], "
        "A2[cse_1 - 64]))",
    ]
    # With two inputs the quotient's copies (the condition and the offset's let) are in
    # straight-line code: left to LLVM.
    func, _, _ = _concat(inputs=2)
    assert str(common_subexpr(func)).splitlines()[2:] == [
        "    cse: int32 = floordiv(f, 24)*16 + floormod(f, 24)*4",
        "    B[f] = if_then_else(floordiv(f, 24) < 2, A0[cse], A1[cse - 32])",
    ]


def test_copies_in_straight_line_code_are_left_to_llvm():
    A = Buffer.make("A", "int32", (64,))
    i = Var("i")
    row = FloorDiv(i, const(4)) * 8
    # One statement computes row once already; the second statement's copy is dominated by the
    # first, which LLVM's first CSE pass merges: nothing to bind.
    s = For(i, const(0), const(16), "serial",
            SeqStmt((BufferStore(A, row + 1, row + 1), BufferStore(A, i, row + 2))))
    assert common_subexpr(s) is s


def test_a_copy_in_straight_line_code_before_the_branch_keeps_its_expression():
    A = Buffer.make("A", "int32", (64,))
    X = Buffer.make("X", "int32", (64,))
    i = Var("i")
    row = FloorDiv(i, const(3)) * 4
    plain = BufferStore(A, BufferLoad(X, row), i)
    branchy = BufferStore(A, if_then_else(i < 2, BufferLoad(X, row + 1), BufferLoad(X, row + 2)),
                          i + 16)
    s = For(i, const(0), const(8), "serial", SeqStmt((plain, branchy)))
    after = common_subexpr(s)
    # Bound just before the store with the branch; the first store computes row itself (LLVM
    # merges the two: the first dominates the let).
    first, second = after.body.seq
    assert first is plain
    assert isinstance(second, LetStmt) and second.value is row
    assert_same_effect(s, after, {A: np.zeros(64, "int32"), X: np.arange(64, dtype="int32")})


def test_one_instruction_is_not_worth_a_name():
    A = Buffer.make("A", "int32", (64,))
    i = Var("i")
    s = BufferStore(A, if_then_else(i < 8, i * 4, i * 4 + 1), i)
    assert common_subexpr(s) is s


def test_a_use_inside_a_loop_and_one_after_it_bind_above_and_not_above_the_loop():
    A = Buffer.make("A", "int32", (1024,))
    X = Buffer.make("X", "int32", (1024,))
    i, j = Var("i"), Var("j")
    row = FloorDiv(i, const(3)) * 32
    col = row + j * 2
    inner = For(j, const(0), const(16), "serial",
                BufferStore(A, if_then_else(j < 8, BufferLoad(X, col), BufferLoad(X, col + 1)),
                            i * 16 + j))
    last = BufferStore(A, if_then_else(i < 8, BufferLoad(X, row), BufferLoad(X, row + 5)), i)
    outer = For(i, const(0), const(16), "serial", SeqStmt((inner, last)))
    after = common_subexpr(outer)
    # row is in both arms of the last store and (through col) in the inner loop: bound at the
    # top of i's body. col reads j: bound inside j's loop, just before its store.
    assert isinstance(after.body, LetStmt) and after.body.value is row
    inner_after = after.body.body.seq[0]
    assert isinstance(inner_after, For) and isinstance(inner_after.body, LetStmt)
    assert inner_after.body.value is after.body.var + j * 2
    assert_same_effect(outer, after, {A: np.zeros(1024, "int32"),
                                      X: np.arange(1024, dtype="int32")})


def test_two_loops_binding_one_variable_are_not_crossed():
    # loop_partition leaves copies of a loop that bind the same Var object: an expression of
    # that variable used in both has its common position above both loops, outside its
    # scope, and is not bound; one used in one copy only is bound inside it.
    A = Buffer.make("A", "int32", (64,))
    i = Var("i")

    def body(divisor):
        row = i // divisor * 4
        return BufferStore(A, if_then_else(i < 2, row + 1, row + 2), i)

    same = SeqStmt((For(i, const(0), const(4), "serial", body(3)),
                    For(i, const(8), const(4), "serial", body(3))))
    assert common_subexpr(same) is same
    different = SeqStmt((For(i, const(0), const(4), "serial", body(3)),
                         For(i, const(8), const(4), "serial", body(5))))
    after = common_subexpr(different)
    assert isinstance(after, SeqStmt)
    for loop, divisor in zip(after.seq, (3, 5)):
        assert isinstance(loop.body, LetStmt) and loop.body.value is i // divisor * 4
    a = np.zeros(64, "int32")
    kiln.build(PrimFunc("two", [A], after), target="llvm")(a)
    expected = np.zeros(64, "int32")
    run(different, {A: expected})
    np.testing.assert_array_equal(a, expected)


def test_a_loop_that_rebinds_an_enclosing_variable_is_not_crossed():
    # Under the inner loop, i is the inner loop's: the same expression means two values.
    A = Buffer.make("A", "int32", (64,))
    i = Var("i")
    row = i // 3 * 4
    inner = For(i, const(0), const(4), "serial",
                BufferStore(A, if_then_else(i < 2, row + 1, row + 2), i + 8))
    outer = For(i, const(4), const(4), "serial",
                SeqStmt((inner, BufferStore(A, if_then_else(i < 6, row + 1, row + 3), i))))
    assert common_subexpr(outer) is outer


def test_a_division_by_a_variable_is_not_hoisted_out_of_its_arms():
    A = Buffer.make("A", "int32", (8,))
    x, n = Var("x"), Var("n")
    q = FloorDiv(x, n)
    # The same quotient in the arms of two stores, guarded by n != 0: it is evaluated under
    # the guard only, so it stays there.
    arms = SeqStmt((BufferStore(A, if_then_else(n != 0, q + 1, const(0)), const(0)),
                    BufferStore(A, if_then_else(n != 0, q * 2, const(0)), const(1))))
    func = PrimFunc("guarded", [A, x, n], arms)
    assert common_subexpr(func) is func
    for scalars in ({x: 7, n: 0}, {x: 7, n: 3}):
        assert_same_effect(func.body, common_subexpr(func).body, {A: np.zeros(8, "int32")},
                           scalars)
    # By a constant it cannot trap, and is hoisted out of the arms.
    c = FloorDiv(x, const(3))
    arms = SeqStmt((BufferStore(A, if_then_else(n != 0, c + 1, const(0)), const(0)),
                    BufferStore(A, if_then_else(n != 0, c * 2, const(0)), const(1))))
    after = common_subexpr(arms)
    assert isinstance(after, LetStmt) and after.value is c


def test_a_division_used_unconditionally_is_shared_with_its_arms():
    A = Buffer.make("A", "int32", (8,))
    x, n = Var("x"), Var("n")
    q = FloorDiv(x, n)
    # The condition evaluates q whenever the store runs: binding it evaluates nothing new.
    store = BufferStore(A, if_then_else(q > 0, q + 1, q * 2), const(0))
    after = common_subexpr(store)
    assert isinstance(after, LetStmt) and after.value is q
    # Inside the branch that guards it, and not above that branch.
    s = IfThenElse(n != 0, store)
    after = common_subexpr(s)
    assert isinstance(after, IfThenElse) and isinstance(after.then_case, LetStmt)
    assert after.then_case.value is q
    run(after, {A: np.zeros(8, "int32")}, {x: 7, n: 0})          # no division by zero


def test_a_division_by_a_variable_is_not_hoisted_above_a_loop():
    A = Buffer.make("A", "int32", (8,))
    x, n, i, j = Var("x"), Var("n"), Var("i"), Var("j")
    q = FloorDiv(x, n)
    # Both loops may run zero times: the quotient is evaluated only when one of them runs.
    s = SeqStmt((For(i, const(0), n, "serial", BufferStore(A, if_then_else(q > i, q, q + 1), i)),
                 For(j, const(0), n, "serial", BufferStore(A, if_then_else(q > j, q, q - 1), j))))
    after = common_subexpr(s)
    assert not any(_count(let.value, FloorDiv) for let in _lets(after))
    run(after, {A: np.zeros(8, "int32")}, {x: 7, n: 0})
    assert_same_effect(s, after, {A: np.zeros(8, "int32")}, {x: 7, n: 3})


def test_floating_point_expressions_are_not_touched():
    A = Buffer.make("A", "float32", (64,))
    B = Buffer.make("B", "float32", (64,))
    i = Var("i")
    x = BufferLoad(B, i)
    value = (x * 3.0 + 1.0) * (x * 3.0 + 1.0)
    s = For(i, const(0), const(16), "serial",
            BufferStore(A, if_then_else(i < 8, value, value + x * 3.0), i))
    # Float arithmetic repeats in both arms, but none of it is bound.
    assert common_subexpr(s) is s
    # An integer inside a float cast is shared; the cast and the float math stay.
    f = Cast("float32", FloorDiv(i, const(3)) * 7)
    s = For(i, const(0), const(16), "serial",
            BufferStore(A, if_then_else(i < 8, f * 2.0, f + 1.0), i))
    after = common_subexpr(s)
    lets = _lets(after)
    assert [let.value for let in lets] == [FloorDiv(i, const(3)) * 7]
    assert all(let.var.dtype == "int32" for let in lets)
    buffers = {A: np.zeros(64, "float32"), B: np.zeros(64, "float32")}
    assert_same_effect(s, after, buffers)


def test_expressions_reading_a_let_variable_stay_inside_the_let():
    A = Buffer.make("A", "int32", (64,))
    i, t = Var("i"), Var("t")
    e = Let(t, FloorDiv(i, const(3)) * 2, FloorDiv(t, const(5)) * 3)
    s = For(i, const(0), const(8), "serial", BufferStore(A, if_then_else(i < 4, e, e + 1), i))
    after = common_subexpr(s)
    lets = _lets(after)
    assert [let.value for let in lets] == [FloorDiv(i, const(3)) * 2]
    assert_same_effect(s, after, {A: np.zeros(64, "int32")})


def test_vector_indices_keep_their_ramps():
    A = Buffer.make("A", "float32", (256,))
    B = Buffer.make("B", "float32", (256,))
    i = Var("i")
    base = FloorDiv(i, const(2)) * 32 + FloorMod(i, const(2)) * 8
    value = if_then_else(i < 4, BufferLoad(B, Ramp(base, const(1), 8)),
                         BufferLoad(B, Ramp(base + 16, const(1), 8)))
    s = For(i, const(0), const(8), "serial", BufferStore(A, value, Ramp(i * 8, const(1), 8)))
    after = common_subexpr(s)
    assert [let.value for let in _lets(after)] == [base]
    assert len(_count(after, Ramp)) == 3
    buffers = {A: np.zeros(256, "float32"), B: np.arange(256, dtype="float32")}
    assert_same_effect(s, after, buffers)
    a = np.zeros(256, "float32")
    kiln.build(PrimFunc("v", [A, B], after), target="llvm")(a, buffers[B])
    expected = np.zeros(256, "float32")
    run(s, {A: expected, B: buffers[B]})
    np.testing.assert_array_equal(a, expected)


# ------------------------------------------------------------------ random te programs
def _without_pass():
    return [p for p in default_pipeline() if p.name != "common_subexpr"]


@st.composite
def _programs(draw):
    """A concatenation of 1-4 inputs along a random axis, scaled and shifted per channel,
    then laid out in blocks (floordiv / floormod indices), scheduled at random."""
    rows = draw(st.integers(1, 3))
    widths = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    cols = draw(st.integers(1, 6))
    block = draw(st.sampled_from([1, 2, 4]))
    ins = [te.placeholder((rows, w, cols), name=f"x{k}") for k, w in enumerate(widths)]
    cat = topi.concatenate(ins, axis=1)
    channels = sum(widths)
    scale = te.placeholder((channels,), name="scale")
    scaled = te.compute(cat.shape, lambda n, c, w: te.max(cat[n, c, w] * scale[c] + 1.0, 0.0),
                        name="scaled")
    outer = -(-channels // block)
    out = te.compute((rows, outer, cols, block),
                     lambda n, co, w, ci: te.if_then_else(co * block + ci < channels,
                                                          scaled[n, co * block + ci, w], 0.0),
                     name="out")
    s = te.create_schedule(out.op)
    if draw(st.booleans()):
        s[cat].compute_inline()
    if draw(st.booleans()):
        s[scaled].compute_inline()
    axes = list(out.op.axis)
    if draw(st.booleans()):
        fused = s[out].fuse(axes[0], axes[1], axes[2])
        o, i = s[out].split(fused, factor=draw(st.sampled_from([1, 3, 4, 8])))
        if draw(st.booleans()):
            s[out].parallel(o)
        if draw(st.booleans()):
            s[out].unroll(i)
    if block > 1 and draw(st.booleans()):
        s[out].vectorize(axes[3])
    return s, ins + [scale, out], (ins, scale)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_programs(), st.sampled_from(["llvm", "c"]))
def test_random_schedules_compute_the_same_with_and_without_the_pass(program, target):
    s, args, (ins, scale) = program
    with_pass = kiln.lower(s, args, name="f")
    without = kiln.lower(s, args, name="f", pipeline=_without_pass())
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal([int(d) for d in t.shape]).astype("float32") for t in args[:-1]]
    results = []
    for func in (with_pass, without):
        out = np.full([int(d) for d in args[-1].shape], np.nan, "float32")
        build_module([func], target, "f")(*arrays, out)
        results.append(out)
    np.testing.assert_array_equal(results[0], results[1])
    cat = np.concatenate(arrays[:len(ins)], axis=1)
    scaled = np.maximum(cat * arrays[len(ins)][None, :, None] + np.float32(1.0), 0)
    rows, channels, cols = scaled.shape
    block = int(args[-1].shape[3])
    padded = np.zeros((rows, int(args[-1].shape[1]) * block, cols), "float32")
    padded[:, :channels] = scaled
    expected = padded.reshape(rows, -1, block, cols).transpose(0, 1, 3, 2)
    np.testing.assert_allclose(results[0], expected, rtol=1e-6, atol=1e-6)

"""vectorize: structural Before -> Expected checks, every scalar fallback, and differential runs
through the reference interpreter (float results compared with rtol=1e-6: the pass must not
change the arithmetic, only how lanes are grouped; numpy's vector math may differ by an ulp)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tir import (Allocate, AssertStmt, Broadcast, Buffer, BufferLoad, BufferStore, Call,
                      Cast, Evaluate, For, IfThenElse, IntImm, LetStmt, Ramp, Select, SeqStmt, Var,
                      const, if_then_else, select)
from kiln.tir import op
from kiln.tir.transform.vectorize import vectorize
from interp import assert_same_effect, run

RTOL = 1e-6


def load(buf, index):
    return BufferLoad(buf, op.convert(index))


def store(buf, value, index):
    return BufferStore(buf, op.convert(value), op.convert(index))


def loop(var, extent, body, kind="serial", start=0):
    return For(var, const(start), op.convert(extent), kind, body)


def rand(buf, seed=0):
    shape = tuple(s.value for s in buf.shape)
    rng = np.random.default_rng(seed)
    if buf.dtype.startswith("float"):
        return rng.standard_normal(shape).astype(buf.dtype)
    return rng.integers(-50, 50, shape).astype(buf.dtype)


def assert_kept_serial(prog, arrays, scalars=None):
    """The vectorized loop falls back to the same loop, serial, and computes the same thing."""
    out = vectorize(prog)
    assert out is prog.replace(kind="serial"), str(out)
    assert_same_effect(prog, out, arrays, scalars, rtol=RTOL)


# ------------------------------------------------------------------ structural
def test_elementwise_becomes_ramp_loads_and_stores():
    A, B = Buffer.make("A", "float32", (32,)), Buffer.make("B", "float32", (32,))
    i, j = Var("i"), Var("j")
    prog = loop(i, 4, loop(j, 8, store(B, load(A, i * 8 + j) * 2.0, i * 8 + j), "vectorized"))
    ramp = Ramp(i * 8, const(1), 8)
    expected = loop(i, 4, BufferStore(B, BufferLoad(A, ramp) * Broadcast(const(2.0), 8), ramp))
    assert vectorize(prog) is expected
    assert_same_effect(prog, expected, {A: rand(A), B: rand(B, 1)}, rtol=RTOL)


def test_matmul_reduction_loop_inside_vectorized_loop():
    n = 8
    A, B, C = (Buffer.make(name, "float32", (n * n,)) for name in "ABC")
    i, j, k = Var("i"), Var("j"), Var("k")
    update = store(C, load(C, i * n + j) + load(A, i * n + k) * load(B, k * n + j), i * n + j)
    prog = loop(i, n, loop(j, n, loop(k, n, update), "vectorized"))
    c_ramp, b_ramp = Ramp(i * n, const(1), n), Ramp(k * n, const(1), n)
    expected = loop(i, n, loop(k, n, BufferStore(
        C, BufferLoad(C, c_ramp) + Broadcast(load(A, i * n + k), n) * BufferLoad(B, b_ramp),
        c_ramp)))
    assert vectorize(prog) is expected
    a, b = rand(A), rand(B, 1)
    c = np.zeros(n * n, "float32")
    run(expected, {A: a, B: b, C: c})
    np.testing.assert_allclose(c.reshape(n, n), a.reshape(n, n) @ b.reshape(n, n), rtol=1e-5)


def test_affine_index_arithmetic_stays_a_ramp():
    A, B = Buffer.make("A", "int32", (40,)), Buffer.make("B", "int32", (40,))
    j = Var("j")
    # B[2*j + 1] = A[7 - j] + A[j*3 - j] : stride 2, stride -1, and a Ramp - Ramp.
    prog = loop(j, 8, store(B, load(A, 7 - j) + load(A, j * 3 - j), j * 2 + 1), "vectorized")
    out = vectorize(prog)
    expected = BufferStore(B, BufferLoad(A, Ramp(const(7), const(-1), 8)) +
                           BufferLoad(A, Ramp(const(0), const(2), 8)), Ramp(const(1), const(2), 8))
    assert out is expected
    assert_same_effect(prog, out, {A: rand(A), B: rand(B, 1)})


def test_nonzero_loop_start():
    A = Buffer.make("A", "float32", (20,))
    j = Var("j")
    prog = loop(j, 4, store(A, load(A, j) + 1.0, j), "vectorized", start=3)
    out = vectorize(prog)
    ramp = Ramp(const(3), const(1), 4)
    assert out is BufferStore(A, BufferLoad(A, ramp) + Broadcast(const(1.0), 4), ramp)
    assert_same_effect(prog, out, {A: rand(A)})


def test_extent_one_substitutes_the_start():
    A = Buffer.make("A", "int32", (8,))
    j = Var("j")
    prog = loop(j, 1, store(A, j, j), "vectorized", start=5)
    out = vectorize(prog)
    assert not isinstance(out, For)
    assert_same_effect(prog, out, {A: rand(A)})


def test_guarded_select_when_branches_are_safe():
    A, B = Buffer.make("A", "float32", (16,)), Buffer.make("B", "float32", (16,))
    j, n = Var("j"), Var("n")
    value = if_then_else(j < n, load(A, j), const(0.0))
    prog = loop(j, 16, store(B, value, j), "vectorized")
    out = vectorize(prog)
    ramp = Ramp(const(0), const(1), 16)
    assert out is BufferStore(B, Select(ramp < Broadcast(n, 16), BufferLoad(A, ramp),
                                        Broadcast(const(0.0), 16)), ramp)
    for nv in (0, 7, 16):
        assert_same_effect(prog, out, {A: rand(A), B: rand(B, 1)}, {n: nv})


def test_uniform_if_then_else_condition_keeps_the_guard():
    A, B = Buffer.make("A", "float32", (16,)), Buffer.make("B", "float32", (16,))
    j, n = Var("j"), Var("n")
    prog = loop(j, 8, store(B, if_then_else(n > 0, load(A, j + n), const(1.0)), j), "vectorized")
    out = vectorize(prog)
    assert isinstance(out, BufferStore) and isinstance(out.value, Call)
    assert out.value.op == "if_then_else" and out.value.args[0] is (n > 0)
    for nv in (-3, 0, 8):  # n = -3 would load A[-3..]: only the guard keeps it safe
        assert_same_effect(prog, out, {A: rand(A), B: rand(B, 1)}, {n: nv})


def test_select_cast_math_and_comparison():
    A, B = Buffer.make("A", "float32", (16,)), Buffer.make("B", "float32", (16,))
    j = Var("j")
    x = load(A, j)
    value = select(x > 0.0, op.exp(x), Cast("float32", j) * x) + op.abs_(x)
    prog = loop(j, 16, store(B, value, j), "vectorized")
    out = vectorize(prog)
    assert isinstance(out, BufferStore) and out.value.dtype == "float32x16"
    assert_same_effect(prog, out, {A: rand(A), B: rand(B, 1)}, rtol=RTOL)


def test_int32_index_widened_to_int64_stays_contiguous():
    A = Buffer.make("A", "float32", (16,))
    j = Var("j")
    prog = loop(j, 16, store(A, load(A, Cast("int64", j)) * 3.0, Cast("int64", j)), "vectorized")
    out = vectorize(prog)
    assert isinstance(out, BufferStore)
    assert out.index is Ramp(IntImm("int64", 0), IntImm("int64", 1), 16)
    assert_same_effect(prog, out, {A: rand(A)}, rtol=RTOL)


def test_vector_let_binding():
    A, B = Buffer.make("A", "float32", (8,)), Buffer.make("B", "float32", (8,))
    j, x = Var("j"), Var("x", "float32")
    prog = loop(j, 8, LetStmt(x, load(A, j) * 2.0, store(B, x + x, j)), "vectorized")
    out = vectorize(prog)
    assert isinstance(out, LetStmt) and out.var.dtype == "float32x8" and out.var is not x
    assert_same_effect(prog, out, {A: rand(A), B: rand(B, 1)}, rtol=RTOL)


def test_allocate_in_body_gets_a_slot_per_lane():
    A, B = Buffer.make("A", "float32", (16,)), Buffer.make("B", "float32", (16,))
    T = Buffer.make("T", "float32", (2,), scope="local")
    i, j = Var("i"), Var("j")
    body = Allocate(T, const(2), SeqStmt((
        store(T, load(A, i * 8 + j) * 2.0, 0),              # invariant index, varying value
        store(T, load(T, 0) + 1.0, 1),
        store(B, load(T, 0) * load(T, 1), i * 8 + j))))
    prog = loop(i, 2, loop(j, 8, body, "vectorized"))
    out = vectorize(prog)
    alloc = out.body
    assert isinstance(alloc, Allocate) and alloc.extent is const(16)
    assert alloc.body.seq[0].index is Ramp(const(0), const(1), 8)
    assert alloc.body.seq[1].index is Ramp(const(8), const(1), 8)
    assert_same_effect(prog, out, {A: rand(A), B: rand(B, 1)}, rtol=RTOL)


def test_invariant_store_that_does_not_read_itself_runs_once():
    A, F = Buffer.make("A", "int32", (8,)), Buffer.make("F", "int32", (1,))
    j = Var("j")
    prog = loop(j, 8, SeqStmt((store(F, 7, 0), store(A, load(A, j) + 1, j))), "vectorized")
    out = vectorize(prog)
    assert isinstance(out, SeqStmt) and out.seq[0] is store(F, 7, 0)
    assert_same_effect(prog, out, {A: rand(A), F: np.zeros(1, "int32")})


def test_inner_loop_writing_disjoint_rows_is_vectorized():
    # T[k*8 + j]: different k touch different rows, so lanes never meet.
    A, T = Buffer.make("A", "float32", (32,)), Buffer.make("T", "float32", (32,))
    j, k = Var("j"), Var("k")
    prog = loop(j, 8, loop(k, 4, store(T, load(T, k * 8 + j) + load(A, k * 8 + j), k * 8 + j)),
                "vectorized")
    out = vectorize(prog)
    assert isinstance(out, For) and out.loop_var is k and out.body.index.lanes == 8
    assert_same_effect(prog, out, {A: rand(A), T: rand(T, 1)}, rtol=RTOL)


def test_primfunc_and_nested_vectorized_loops():
    from kiln.tir import PrimFunc
    A = Buffer.make("A", "float32", (64,))
    i, j = Var("i"), Var("j")
    inner = loop(j, 8, store(A, load(A, i * 8 + j) + 1.0, i * 8 + j), "vectorized")
    func = PrimFunc("f", (A,), loop(i, 8, inner, "vectorized"))
    out = vectorize(func)
    assert isinstance(out, PrimFunc)
    # The inner loop is vectorized; the outer one, now holding vector code, stays serial.
    assert out.body.kind == "serial" and isinstance(out.body.body, BufferStore)
    assert out.body.body.index is Ramp(i * 8, const(1), 8)
    assert_same_effect(func, out, {A: rand(A)}, rtol=RTOL)


# ------------------------------------------------------------------ fallbacks
def test_fallback_non_constant_extent():
    A = Buffer.make("A", "float32", (16,))
    j, n = Var("j"), Var("n")
    prog = loop(j, n, store(A, load(A, j) + 1.0, j), "vectorized")
    assert_kept_serial(prog, {A: rand(A)}, {n: 16})


def test_fallback_inner_loop_bound_depends_on_lane():
    A = Buffer.make("A", "int32", (8,))
    j, k = Var("j"), Var("k")
    prog = loop(j, 8, loop(k, j, store(A, load(A, j) + k, j)), "vectorized")
    assert_kept_serial(prog, {A: rand(A)})


def test_fallback_if_on_lane_varying_condition():
    A = Buffer.make("A", "int32", (8,))
    j = Var("j")
    prog = loop(j, 8, IfThenElse(j < 3, store(A, 1, j), store(A, 2, j)), "vectorized")
    assert_kept_serial(prog, {A: rand(A)})


def test_fallback_unknown_call():
    A = Buffer.make("A", "float32", (8,))
    j = Var("j")
    prog = loop(j, 8, store(A, Call("float32", "fabs", (load(A, j),)) +
                          Call("float32", "my_extern", (load(A, j),)), j), "vectorized")
    assert vectorize(prog) is prog.replace(kind="serial")


def test_padding_guard_keeps_a_masked_vector_if_then_else():
    # Padding pattern: A[j - 1] is out of bounds for j = 0; only the guard protects it, so
    # no Select: the vector if_then_else's loads are masked per lane (the interpreter checks
    # bounds on the lanes that run, as the back-ends' masked loads do).
    A, B = Buffer.make("A", "float32", (8,)), Buffer.make("B", "float32", (8,))
    j = Var("j")
    prog = loop(j, 8, store(B, if_then_else(j >= 1, load(A, j - 1), const(0.0)), j), "vectorized")
    out = vectorize(prog)
    ramp = Ramp(const(0), const(1), 8)
    assert out is BufferStore(B, Call("float32x8", "if_then_else", (
        ramp >= Broadcast(const(1), 8), BufferLoad(A, Ramp(const(-1), const(1), 8)),
        Broadcast(const(0.0), 8))), ramp)
    assert_same_effect(prog, out, {A: rand(A), B: rand(B, 1)})


def test_fallback_unsafe_scalar_load_under_lane_guard():
    # A[n] is the same for every lane, so no mask covers it: it would run for all lanes.
    A, B = Buffer.make("A", "float32", (8,)), Buffer.make("B", "float32", (8,))
    j, n = Var("j"), Var("n")
    prog = loop(j, 8, store(B, if_then_else(j < n, load(A, n), const(0.0)), j), "vectorized")
    assert_kept_serial(prog, {A: rand(A), B: rand(B, 1)}, {n: 0})


def test_fallback_guarded_integer_division():
    A = Buffer.make("A", "int32", (8,))
    j = Var("j")
    prog = loop(j, 8, store(A, if_then_else(j > 0, op.floordiv(const(100), j), const(0)), j),
                "vectorized")
    assert_kept_serial(prog, {A: rand(A)})


def test_fallback_allocate_with_lane_varying_size():
    A = Buffer.make("A", "int32", (8,))
    T = Buffer.make("T", "int32", (8,), scope="local")
    j = Var("j")
    prog = loop(j, 8, Allocate(T, j + 1, SeqStmt((store(T, j, j), store(A, load(T, j), j)))),
                "vectorized")
    assert_kept_serial(prog, {A: rand(A)})


def test_fallback_reduction_across_lanes():
    A, S = Buffer.make("A", "int32", (8,)), Buffer.make("S", "int32", (1,))
    j = Var("j")
    prog = loop(j, 8, store(S, load(S, 0) + load(A, j), 0), "vectorized")
    assert_kept_serial(prog, {A: rand(A), S: np.zeros(1, "int32")})


def test_fallback_invariant_store_reading_itself():
    S = Buffer.make("S", "int32", (1,))
    j = Var("j")
    prog = loop(j, 8, store(S, load(S, 0) + 1, 0), "vectorized")  # adds 8, not 1
    assert_kept_serial(prog, {S: np.zeros(1, "int32")})


def test_fallback_non_contiguous_store():
    A, B = Buffer.make("A", "int32", (8,)), Buffer.make("B", "int32", (8,))
    j = Var("j")
    prog = loop(j, 8, store(B, load(A, j), op.floordiv(j, 2)), "vectorized")
    assert_kept_serial(prog, {A: rand(A), B: rand(B, 1)})


def test_fallback_lanes_depend_on_each_other():
    A = Buffer.make("A", "int32", (9,))
    j = Var("j")
    prog = loop(j, 8, store(A, load(A, j + 1) + load(A, j), j), "vectorized")
    assert_kept_serial(prog, {A: rand(A)})
    # Inner loop iterations shift by one element: lane j at k meets lane j+1 at k-1.
    k = Var("k")
    B = Buffer.make("B", "int32", (16,))
    prog = loop(j, 8, loop(k, 4, store(B, load(B, j + k) * 2 + k, j + k)), "vectorized")
    assert_kept_serial(prog, {B: rand(B)})


def test_fallback_lane_varying_if_assert_and_evaluate():
    A = Buffer.make("A", "int32", (8,))
    j = Var("j")
    asserted = loop(j, 8, AssertStmt(j < 8, "bad lane", store(A, j, j)), "vectorized")
    assert_kept_serial(asserted, {A: rand(A)})
    evaluated = loop(j, 8, SeqStmt((Evaluate(load(A, j)), store(A, j, j))), "vectorized")
    assert_kept_serial(evaluated, {A: rand(A)})


def test_fallback_parallel_loop_inside():
    A = Buffer.make("A", "int32", (32,))
    j, k = Var("j"), Var("k")
    prog = loop(j, 8, loop(k, 4, store(A, k, k * 8 + j), "parallel"), "vectorized")
    assert_kept_serial(prog, {A: rand(A)})


def test_fallback_existing_vector_code_in_body():
    A = Buffer.make("A", "int32", (64,))
    j = Var("j")
    prog = loop(j, 8, BufferStore(A, Broadcast(j, 4), Ramp(j * 4, const(1), 4)), "vectorized")
    assert_kept_serial(prog, {A: rand(A)})


# ------------------------------------------------------------------ differential, random programs
_INDEX = {  # load index forms, all within [0, 2*L*M + 1)
    "row": lambda i, j, L: i * L + j, "lane": lambda i, j, L: j,
    "rev": lambda i, j, L: (L - 1) - j, "half": lambda i, j, L: op.floordiv(j, 2),
    "mod": lambda i, j, L: op.floormod(j * 3, L), "outer": lambda i, j, L: i,
    "next": lambda i, j, L: i * L + j + 1, "even": lambda i, j, L: (i * L + j) * 2,
}
_STORE = {  # store index forms: "half" and an accumulating "outer" force the scalar fallback
    "row": lambda i, j, L: i * L + j, "rev": lambda i, j, L: i * L + (L - 1) - j,
    "even": lambda i, j, L: (i * L + j) * 2, "outer": lambda i, j, L: i,
    "half": lambda i, j, L: i * L + op.floordiv(j, 2),
}

_leaf = st.one_of(
    st.tuples(st.just("load"), st.sampled_from("AB"), st.sampled_from(sorted(_INDEX))),
    st.tuples(st.just("const"), st.sampled_from([0.5, -1.0, 3.0])),
    st.tuples(st.just("lane"),))
_tree = st.recursive(_leaf, lambda sub: st.one_of(
    st.tuples(st.just("bin"), st.sampled_from(["add", "sub", "mul", "min", "max"]), sub, sub),
    st.tuples(st.just("select"), sub, sub, sub, sub),
    st.tuples(st.just("guard"), st.integers(0, 16), sub, sub),
    st.tuples(st.just("pad"), st.sampled_from("AB"), sub),
    st.tuples(st.just("math"), st.sampled_from(["fabs", "tanh"]), sub)), max_leaves=6)


def _build(tree, bufs, i, j, L):
    kind = tree[0]
    if kind == "load":
        return load(bufs[tree[1]], _INDEX[tree[2]](i, j, L))
    if kind == "const":
        return const(tree[1])
    if kind == "lane":
        return Cast("float32", j)
    if kind == "bin":
        a, b = _build(tree[2], bufs, i, j, L), _build(tree[3], bufs, i, j, L)
        fn = {"add": op.add, "sub": op.sub, "mul": op.mul, "min": op.min_, "max": op.max_}
        return fn[tree[1]](a, b)
    if kind == "select":
        a, b, t, f = (_build(x, bufs, i, j, L) for x in tree[1:])
        return select(a < b, t, f)
    if kind == "guard":
        t, f = _build(tree[2], bufs, i, j, L), _build(tree[3], bufs, i, j, L)
        return if_then_else(j < tree[1], t, f)
    if kind == "pad":   # reads index -1 unless guarded
        other = _build(tree[2], bufs, i, j, L)
        return if_then_else(j >= 1, load(bufs[tree[1]], i * L + j - 1), other)
    return Call("float32", tree[1], (_build(tree[2], bufs, i, j, L),))


@settings(max_examples=60, deadline=None)
@given(tree=_tree, lanes=st.integers(1, 17), store_kind=st.sampled_from(sorted(_STORE)),
       accumulate=st.booleans(), seed=st.integers(0, 2**16))
def test_random_programs_compute_the_same(tree, lanes, store_kind, accumulate, seed):
    M = 2
    size = 2 * lanes * M + 2
    bufs = {name: Buffer.make(name, "float32", (size,)) for name in "ABC"}
    i, j = Var("i"), Var("j")
    value = _build(tree, bufs, i, j, lanes)
    if value.dtype != "float32":
        value = Cast("float32", value)
    index = _STORE[store_kind](i, j, lanes)
    if accumulate:
        value = load(bufs["C"], index) + value
    prog = loop(i, M, loop(j, lanes, store(bufs["C"], value, index), "vectorized"))
    out = vectorize(prog)
    arrays = {b: rand(b, seed + k) for k, b in enumerate(bufs.values())}
    assert_same_effect(prog, out, arrays, rtol=RTOL, atol=1e-6)
    if lanes > 1 and (store_kind == "half" or store_kind == "outer" and accumulate):
        assert out is prog.replace(body=prog.body.replace(kind="serial"))


@pytest.mark.parametrize("lanes", [2, 16, 64])
def test_wide_lanes_are_fine(lanes):
    A = Buffer.make("A", "float32", (lanes,))
    j = Var("j")
    prog = loop(j, lanes, store(A, load(A, j) * load(A, j), j), "vectorized")
    out = vectorize(prog)
    assert isinstance(out, BufferStore) and out.value.dtype == f"float32x{lanes}"
    assert_same_effect(prog, out, {A: rand(A)}, rtol=RTOL)


def test_fallback_dependence_through_an_aliasing_buffer_view():
    # Two Buffer objects over one array: the lane check must see them as one.
    A = Buffer.make("A", "int32", (9,))
    view = A.replace(name="A_view")
    j = Var("j")
    prog = loop(j, 8, store(A, load(view, j + 1) + 1, j), "vectorized")
    assert_kept_serial(prog, {A: rand(A)})


def test_fallback_variable_bound_twice_in_body():
    A = Buffer.make("A", "int32", (16,))
    j, x = Var("j"), Var("x")
    twice = SeqStmt((LetStmt(x, j * 2, store(A, x, j)), LetStmt(x, const(3), store(A, x, j + 8))))
    assert_kept_serial(loop(j, 8, twice, "vectorized"), {A: rand(A)})

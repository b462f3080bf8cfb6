"""storage_rewrite: which temporaries share memory (structural checks), what must never be
merged, and differential runs through the reference interpreter (exact: no arithmetic changes).
The interpreter poisons fresh allocations, so a merge that lets one buffer see another's
live data, or read stale memory, changes the outputs."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tir import (Allocate, Buffer, BufferLoad, BufferStore, For, PrimFunc, SeqStmt, Var,
                      const, post_order_visit)
from kiln.tir import op
from kiln.tir.transform.storage_rewrite import storage_rewrite
from interp import assert_same_effect

N = 8


def load(buf, index):
    return BufferLoad(buf, op.convert(index))


def store(buf, value, index):
    return BufferStore(buf, op.convert(value), op.convert(index))


def loop(var, extent, body, kind="serial"):
    return For(var, const(0), op.convert(extent), kind, body)


def temp(name, size=N, dtype="float32", scope="local"):
    return Buffer.make(name, dtype, (size,), scope)


def copy(dst, src, size=N, scale=1.0):
    i = Var("i")
    return loop(i, size, store(dst, load(src, i) * scale + 1.0, i))


def allocs_of(node):
    found = []
    post_order_visit(node, lambda n: found.append(n) if isinstance(n, Allocate) else None)
    return found


def io():
    A, B = Buffer.make("A", "float32", (N,)), Buffer.make("B", "float32", (N,))
    rng = np.random.default_rng(0)
    return A, B, {A: rng.standard_normal(N).astype("float32"), B: np.zeros(N, "float32")}


def test_disjoint_lifetimes_share_the_first_buffer():
    A, B, arrays = io()
    T1, T2 = temp("T1"), temp("T2")
    seq = (copy(T1, A), copy(B, T1), copy(T2, B, scale=3.0), copy(B, T2))
    prog = Allocate(T1, const(N), Allocate(T2, const(N), SeqStmt(seq)))
    expected = Allocate(T1, const(N), SeqStmt((copy(T1, A), copy(B, T1),
                                               copy(T1, B, scale=3.0), copy(B, T1))))
    out = storage_rewrite(prog)
    # The copies use fresh loop variables, so compare the printed programs.
    assert str(out) == str(expected)
    assert_same_effect(prog, out, arrays)


def test_overlapping_lifetimes_are_not_merged():
    A, B, arrays = io()
    T1, T2 = temp("T1"), temp("T2")
    i = Var("i")
    both = loop(i, N, store(B, load(T1, i) + load(T2, i), i))
    prog = Allocate(T1, const(N), Allocate(T2, const(N), SeqStmt((
        copy(T1, A), copy(T2, A, scale=2.0), both))))
    assert storage_rewrite(prog) is prog
    assert_same_effect(prog, storage_rewrite(prog), arrays)


def test_dtype_scope_and_symbolic_size_block_merging():
    A, B, arrays = io()
    n = Var("n")
    for other, extent in ((temp("T2", scope="shared"), const(N)),
                          (Buffer.make("T2", "float32", (n,), "local"), n)):
        T1 = temp("T1")
        prog = Allocate(T1, const(N), Allocate(other, extent, SeqStmt((
            copy(T1, A), copy(B, T1), copy(other, B), copy(B, other)))))
        assert storage_rewrite(prog) is prog
        assert_same_effect(prog, storage_rewrite(prog), arrays, {n: N})
    I1, I2 = temp("I1", dtype="int32"), temp("I2", dtype="float32")
    i = Var("i")
    prog = Allocate(I1, const(N), Allocate(I2, const(N), SeqStmt((
        loop(i, N, store(I1, i, i)), loop(i, N, store(B, op.cast(load(I1, i), "float32"), i)),
        copy(I2, A), copy(B, I2)))))
    assert storage_rewrite(prog) is prog


def test_merged_size_is_the_larger_one():
    A, B, arrays = io()
    T1, T2 = temp("T1", 4), temp("T2", N)
    prog = Allocate(T1, const(4), Allocate(T2, const(N), SeqStmt((
        copy(T1, A, 4), copy(B, T1, 4), copy(T2, B), copy(B, T2)))))
    out = storage_rewrite(prog)
    (alloc,) = allocs_of(out)
    assert alloc.extent is const(N) and alloc.buffer.data is T1.data
    assert alloc.buffer.shape == (const(N),)
    assert_same_effect(prog, out, arrays)


def test_sibling_allocations_are_hoisted_and_merged():
    A, B, arrays = io()
    T1, T2 = temp("T1"), temp("T2")
    prog = SeqStmt((Allocate(T1, const(N), SeqStmt((copy(T1, A), copy(B, T1)))),
                    Allocate(T2, const(N), SeqStmt((copy(T2, B), copy(B, T2))))))
    out = storage_rewrite(prog)
    assert isinstance(out, Allocate) and out.buffer is T1 and isinstance(out.body, SeqStmt)
    assert len(allocs_of(out)) == 1
    assert_same_effect(prog, out, arrays)


def test_greedy_reuse_across_three_buffers():
    A, B, arrays = io()
    T1, T2, T3 = temp("T1"), temp("T2"), temp("T3")
    i = Var("i")
    prog = Allocate(T1, const(N), Allocate(T2, const(N), Allocate(T3, const(N), SeqStmt((
        copy(T1, A),
        loop(i, N, store(T2, load(T1, i) * 2.0, i)),      # T1 and T2 overlap here
        loop(i, N, store(T3, load(T2, i) + 5.0, i)),      # T2 and T3 overlap; T1 is dead
        copy(B, T3))))))
    out = storage_rewrite(prog)
    assert out.buffer is T1 and out.body.buffer is T2 and len(allocs_of(out)) == 2
    assert "T3" not in str(out)   # T3 now lives in T1
    assert_same_effect(prog, out, arrays)


def test_allocations_in_parallel_loop_stay_per_iteration():
    A = Buffer.make("A", "float32", (4 * N,))
    B = Buffer.make("B", "float32", (4 * N,))
    T1, T2, T0 = temp("T1"), temp("T2"), temp("T0")
    p, i = Var("p"), Var("i")
    inner = SeqStmt((
        Allocate(T1, const(N), SeqStmt((loop(i, N, store(T1, load(A, p * N + i), i)),
                                        loop(i, N, store(B, load(T1, i) * 2.0, p * N + i))))),
        Allocate(T2, const(N), SeqStmt((loop(i, N, store(T2, load(B, p * N + i) + 1.0, i)),
                                        loop(i, N, store(B, load(T2, i), p * N + i)))))))
    outer_first = SeqStmt((copy(T0, A), copy(B, T0)))
    prog = Allocate(T0, const(N), SeqStmt((outer_first, loop(p, 4, inner, "parallel"))))
    out = storage_rewrite(prog)
    par = []
    post_order_visit(out, lambda n: par.append(n)
                     if isinstance(n, For) and n.kind == "parallel" else None)
    (par_loop,) = par
    # T0 (outside) is not merged with the per-thread buffers; T1 and T2 merge inside the loop.
    assert [a.buffer.name for a in allocs_of(par_loop)] == ["T1"]
    assert isinstance(par_loop.body, Allocate)
    assert {a.buffer.name for a in allocs_of(out)} == {"T0", "T1"}
    rng = np.random.default_rng(1)
    assert_same_effect(prog, out, {A: rng.standard_normal(4 * N).astype("float32"),
                                   B: np.zeros(4 * N, "float32")})


def test_unused_allocation_is_dropped():
    A, B, arrays = io()
    T1, T2 = temp("T1"), temp("T2")
    prog = Allocate(T1, const(N), Allocate(T2, const(N), SeqStmt((copy(T1, A), copy(B, T1)))))
    out = storage_rewrite(prog)
    assert [a.buffer for a in allocs_of(out)] == [T1]
    assert_same_effect(prog, out, arrays)


def test_opaque_pointer_use_pins_the_buffer():
    from kiln.tir import AttrStmt
    A, B, arrays = io()
    T1, T2 = temp("T1"), temp("T2")
    seq = SeqStmt((copy(T1, A), copy(B, T1), copy(T2, B), copy(B, T2)))
    prog = Allocate(T1, const(N), Allocate(T2, const(N),
                                           AttrStmt(T2.data, "storage_alignment", 128, seq)))
    assert storage_rewrite(prog) is prog


def test_primfunc():
    A, B, arrays = io()
    T1, T2 = temp("T1"), temp("T2")
    body = Allocate(T1, const(N), Allocate(T2, const(N), SeqStmt((
        copy(T1, A), copy(B, T1), copy(T2, B), copy(B, T2)))))
    func = PrimFunc("f", (A, B), body)
    out = storage_rewrite(func)
    assert isinstance(out, PrimFunc) and len(allocs_of(out.body)) == 1
    assert_same_effect(func, out, arrays)


# ------------------------------------------------------------------ differential
_stage = st.tuples(st.integers(0, 5), st.integers(0, 5), st.sampled_from(["chain", "local"]),
                   st.sampled_from([4, 8]))


@settings(max_examples=50, deadline=None)
@given(stages=st.lists(_stage, min_size=1, max_size=6), seed=st.integers(0, 1000))
def test_random_pipelines_compute_the_same(stages, seed):
    """Stage k writes temp T_k from two earlier live temps (or the input) and may add it to B."""
    A, B, arrays = io()
    temps = [temp(f"T{k}", size) for k, (_, _, _, size) in enumerate(stages)]
    i = Var("i")
    chain, seq = [], []
    for k, (src1, src2, where, size) in enumerate(stages):
        srcs = [temps[s] if s < k and temps[s] in chain else A for s in (src1, src2)]
        n = min([size] + [s.shape[0].value for s in srcs])
        fill = loop(i, size, store(temps[k], const(0.5), i))
        compute = loop(i, n, store(temps[k], load(srcs[0], i) * 2.0 + load(srcs[1], i), i))
        use = loop(i, n, store(B, load(B, i) + load(temps[k], i), i))
        if where == "chain":
            chain.append(temps[k])
            seq.extend([fill, compute])
            if k == len(stages) - 1 or src1 % 2:
                seq.append(use)
        else:
            # A locally allocated temp is consumed inside its own statement.
            seq.append(Allocate(temps[k], const(size), SeqStmt((fill, compute, use))))
    body = SeqStmt(tuple(seq)) if len(seq) > 1 else seq[0]
    for t in reversed(chain):
        body = Allocate(t, t.shape[0], body)
    out = storage_rewrite(body)
    arrays[A] = np.random.default_rng(seed).standard_normal(N).astype("float32")
    assert_same_effect(body, out, arrays)
    assert len(allocs_of(out)) <= len(stages)


def test_buffer_used_through_another_view_is_pinned():
    A, B, arrays = io()
    T1, T2 = temp("T1"), temp("T2")
    view = T2.replace(name="T2_view")
    prog = Allocate(T1, const(N), Allocate(T2, const(N), SeqStmt((
        copy(T1, A), copy(B, T1), copy(T2, B), copy(B, view)))))
    assert storage_rewrite(prog) is prog

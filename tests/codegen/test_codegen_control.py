"""Statements: lets, ifs, temporaries on the stack and the heap, assertions, symbolic sizes,
scalar parameters, loop kinds and parallel loops, on both back-ends."""
import re

import numpy as np
import pytest

from codegen_helpers import TARGETS, loop, run
from kiln.codegen import CodegenError, build_module
from kiln.runtime import NativeCallError
from kiln.tir import (Allocate, AssertStmt, AttrStmt, Buffer, BufferLoad, BufferStore, Evaluate,
                      For, IfThenElse, Let, LetStmt, PrimFunc, Ramp, SeqStmt, StringImm,
                      Var, const, op)
from kiln.te.schedule import ScheduleError


def seq(*stmts):
    return SeqStmt.flatten(*stmts)


@pytest.mark.parametrize("target", TARGETS)
def test_let_letstmt_and_if_statements(target, rng):
    n = 40
    X = Buffer.make("X", "int32", (n,))
    Y = Buffer.make("Y", "int32", (n,))
    i = Var("i")
    t = Var("t")
    u = Var("u")
    x = BufferLoad(X, i)
    body = LetStmt(t, x * 3, seq(
        IfThenElse(t > 10, BufferStore(Y, Let(u, t + 1, u * u), i),
                   BufferStore(Y, t - 1, i)),
        IfThenElse(op.likely(t == 0), BufferStore(Y, const(1000), i)),
        AttrStmt(None, "pragma_note", 1, Evaluate(t + 1))))
    f = PrimFunc("lets", [X, Y], loop(i, n, body))
    x = rng.integers(-10, 10, n).astype("int32")
    y = np.zeros(n, "int32")
    run(f, target, x, y)
    t3 = x * 3
    expected = np.where(t3 > 10, (t3 + 1) ** 2, t3 - 1)
    expected[t3 == 0] = 1000
    np.testing.assert_array_equal(y, expected)


def _two_phase(name, extent, dtype="float32", n=None):
    """T[k] = X[k] * 2 into a temporary, then Y[k] = T[n-1-k] + 1 (reversal through T)."""
    N = n if n is not None else extent
    X = Buffer.make("X", dtype, (N,))
    Y = Buffer.make("Y", dtype, (N,))
    T = Buffer.make("T", dtype, (N,), scope="local")
    i, j = Var("i"), Var("j")
    body = Allocate(T, extent if not isinstance(extent, int) else const(extent), seq(
        For(i, const(0), N if not isinstance(N, int) else const(N), "serial",
            BufferStore(T, BufferLoad(X, i) * 2.0, i)),
        For(j, const(0), N if not isinstance(N, int) else const(N), "serial",
            BufferStore(Y, BufferLoad(T, (N - 1) - j) + 1.0, j))))
    return PrimFunc(name, [X, Y], body, [N] if not isinstance(N, int) else [])


@pytest.mark.parametrize("target", TARGETS)
def test_allocate_on_stack_and_heap(target, rng):
    small = _two_phase("small_tmp", 256)                 # 1 KiB: stack
    large = _two_phase("large_tmp", 100_000)             # 400 KB: heap
    n = Var("n")
    symbolic = _two_phase("sym_tmp", n, n=n)             # size known at run time: heap
    mod = build_module([small, large, symbolic], target)
    for name, size in (("small_tmp", 256), ("large_tmp", 100_000), ("sym_tmp", 777)):
        x = rng.standard_normal(size).astype("float32")
        y = np.zeros(size, "float32")
        mod[name](x, y)
        np.testing.assert_array_equal(y, (x * 2 + 1)[::-1], err_msg=name)
    source = mod.get_source()
    if target == "llvm":
        assert "alloca [256 x float], align 64" in source or "alloca" in mod.get_source("ll.in")
        assert "kiln_workspace_alloc" in source and "kiln_workspace_free" in source
    else:
        assert "T_" in source and "kiln_workspace_alloc(" in source and "kiln_workspace_free(" in source


def _assert_func(name):
    n = Var("n")
    X = Buffer.make("X", "float32", (n,))
    T = Buffer.make("T", "float32", (n,))
    i = Var("i")
    # A heap temporary is live when the assertion fails: it must be freed on that path too.
    body = Allocate(T, n, AssertStmt(BufferLoad(X, const(0)) > 0.0,
                                     StringImm("X[0] must be positive"),
                                     For(i, const(0), n, "serial",
                                         BufferStore(X, BufferLoad(X, i) + 1.0, i))))
    return PrimFunc(name, [X], body, [n])


@pytest.mark.parametrize("target", TARGETS)
def test_assert_failure_returns_status_with_message(target):
    mod = build_module([_assert_func("checked")], target)
    x = np.ones(5, "float32")
    mod(x)
    np.testing.assert_array_equal(x, 2 * np.ones(5, "float32"))
    x[0] = -1
    with pytest.raises(NativeCallError) as info:
        mod(x)
    status = int(re.search(r"status (\d+)", str(info.value)).group(1))
    message = mod.error_message(status)
    assert message is not None and "X[0] must be positive" in message and "checked" in message
    assert message in str(info.value)     # the raised error carries the check's message
    assert "X[0] must be positive" in mod.get_source("errors")
    np.testing.assert_array_equal(x[1:], 2 * np.ones(4, "float32"))   # body did not run


@pytest.mark.parametrize("target", TARGETS)
def test_scalar_parameters_and_int64_shape_vars(target, rng):
    n = Var("n", "int64")
    X = Buffer.make("X", "float64", (n,))
    Y = Buffer.make("Y", "float64", (n,))
    F = Buffer.make("F", "float16", (n,))
    a, b, c, flag = Var("a", "float32"), Var("b", "int8"), Var("c", "float64"), Var("flag", "bool")
    h = Var("h", "float16")
    i = Var("i", "int64")
    value = op.select(flag, BufferLoad(X, i) * op.cast(a, "float64") + op.cast(b, "float64"),
                      BufferLoad(X, i) - c)
    body = seq(BufferStore(Y, value, i), BufferStore(F, op.cast(BufferLoad(X, i), "float16") + h, i))
    f = PrimFunc("scalars", [X, a, b, c, flag, h, Y, F], For(i, const(0, "int64"), n, "serial", body), [n])
    mod = build_module([f], target)
    x = rng.standard_normal(19)
    y = np.zeros(19)
    fo = np.zeros(19, "float16")
    mod(x, 1.5, -3, 0.25, True, 0.5, y, fo)
    np.testing.assert_allclose(y, x * 1.5 - 3, rtol=1e-15, atol=1e-15)
    np.testing.assert_array_equal(fo, x.astype("float16") + np.float16(0.5))
    mod(x, 1.5, -3, 0.25, False, 0.5, y, fo)
    np.testing.assert_array_equal(y, x - 0.25)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["unrolled", "vectorized", "serial"])
def test_loop_kinds_with_symbolic_min(target, kind, rng):
    n, s = Var("n"), Var("s")
    X = Buffer.make("X", "int32", (n,))
    i = Var("i")
    f = PrimFunc("kinds", [X, s], For(i, s, n - s, kind, BufferStore(X, BufferLoad(X, i) + i, i)), [n])
    x = np.zeros(50, "int32")
    run(f, target, x, 7)
    np.testing.assert_array_equal(x, np.where(np.arange(50) >= 7, np.arange(50), 0))


def _parallel_count(name, extent, nested=False, dtype="int32"):
    """Y[i] += 1 over a parallel loop: every index must be written exactly once."""
    if nested:
        Y = Buffer.make("Y", "int32", (extent * 6,))
        i, j = Var("i", dtype), Var("j", dtype)
        inner = For(j, const(0, dtype), const(6, dtype), "parallel",
                    BufferStore(Y, BufferLoad(Y, i * 6 + j) + 1, i * 6 + j))
        return PrimFunc(name, [Y], For(i, const(0, dtype), const(extent, dtype), "parallel", inner))
    n = Var("n", dtype)
    Y = Buffer.make("Y", "int32", (n,))
    i = Var("i", dtype)
    return PrimFunc(name, [Y], For(i, const(0, dtype), n, "parallel",
                                   BufferStore(Y, BufferLoad(Y, i) + 1, i)), [n])


@pytest.mark.parametrize("target", TARGETS)
def test_parallel_loops_write_each_index_once(target):
    mod = build_module([_parallel_count("par32", None), _parallel_count("par64", None, dtype="int64"),
                        _parallel_count("nested", 13, nested=True)], target)
    for name in ("par32", "par64"):
        for size in (0, 1, 3, 1000, 4099):
            y = np.zeros(size, "int32")
            for _ in range(3):
                mod[name](y)
            np.testing.assert_array_equal(y, np.full(size, 3, "int32"), err_msg=f"{name} {size}")
    y = np.zeros(13 * 6, "int32")
    mod["nested"](y)
    np.testing.assert_array_equal(y, np.ones(13 * 6, "int32"))


@pytest.mark.parametrize("target", TARGETS)
def test_parallel_loop_with_captures_temporaries_and_failures(target, rng):
    rows, cols = 37, 24
    X = Buffer.make("X", "float32", (rows * cols,))
    Y = Buffer.make("Y", "float32", (rows,))
    T = Buffer.make("T", "float32", (cols,), scope="local")
    H = Buffer.make("H", "float32", (cols * 5000,), scope="global")
    scale, limit = Var("scale", "float32"), Var("limit", "float32")
    i, j, k = Var("i"), Var("j"), Var("k")
    offset = Var("offset")
    lanes = Ramp(i * cols + j * 8, const(1), 8)
    # per-task stack temporary (vector stores), per-task heap temporary, a captured let
    # variable, and an assertion that may fail inside a task
    row_sum = seq(
        For(j, const(0), const(cols // 8), "serial",
            BufferStore(T, BufferLoad(X, lanes) * op.cast(scale, "float32x8"), Ramp(j * 8, const(1), 8))),
        BufferStore(H, const(0.0), const(cols * 5000 - 1)),
        BufferStore(Y, const(0.0), i),
        For(k, const(0), const(cols), "serial",
            BufferStore(Y, BufferLoad(Y, i) + BufferLoad(T, k) + op.cast(offset, "float32"), i)),
        AssertStmt(BufferLoad(Y, i) < limit, StringImm("row sum too large"), Evaluate(const(0))))
    body = LetStmt(offset, const(1), For(i, const(0), const(rows), "parallel",
                                         Allocate(T, const(cols), Allocate(H, const(cols * 5000), row_sum))))
    mod = build_module([PrimFunc("rows", [X, scale, limit, Y], body)], target)
    x = rng.uniform(0, 1, rows * cols).astype("float32")
    y = np.zeros(rows, "float32")
    mod(x, 2.0, 1e9, y)
    np.testing.assert_allclose(y, (x.reshape(rows, cols) * 2 + 1).sum(axis=1), rtol=1e-5)
    with pytest.raises(NativeCallError):
        mod(x, 2.0, 30.0, y)


@pytest.mark.parametrize("target", TARGETS)
def test_rejected_programs_name_the_function(target):
    X = Buffer.make("X", "float32", (8,))
    i, ghost = Var("i"), Var("ghost")
    bound = For(i, const(0), const(8), "thread_binding", BufferStore(X, const(1.0), i),
                thread_tag="threadIdx.x")
    with pytest.raises(ScheduleError, match="gpu_kernel.*threadIdx.x.*no GPU threads"):
        build_module([PrimFunc("gpu_kernel", [X], bound)], target)
    undefined = loop(i, 8, BufferStore(X, op.cast(ghost, "float32"), i))
    with pytest.raises(CodegenError, match="'uses_ghost'.*ghost"):
        build_module([PrimFunc("uses_ghost", [X], undefined)], target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["main", "exp", "free", "kiln_parallel_launch"])
def test_any_identifier_names_a_function(target, name):
    """Symbols are prefixed, so libc/libm/runtime names do not collide with user names."""
    X = Buffer.make("X", "float32", (8,))
    i = Var("i")
    mod = build_module([PrimFunc(name, [X], loop(i, 8, BufferStore(X, const(1.5), i)))], target)
    x = np.zeros(8, "float32")
    mod[name](x)
    np.testing.assert_array_equal(x, np.full(8, 1.5, "float32"))


@pytest.mark.parametrize("target", TARGETS)
def test_vector_lets_scalar_condition_and_masks(target, rng):
    n = 32
    s = Var("s", "bool")
    X = Buffer.make("X", "float32", (n,))
    Y = Buffer.make("Y", "float32", (n,))
    H = Buffer.make("H", "float16", (n,))
    i, v, m = Var("i"), Var("v", "float32x8"), Var("m", "boolx8")
    from kiln.tir import Broadcast, Cast, Not, Select
    idx = Ramp(i * 8, const(1), 8)
    x = BufferLoad(X, idx)
    body = seq(
        # a vector let, chosen by a scalar condition
        BufferStore(Y, Let(v, x * 2.0, Select(s, v, v + 1.0)), idx),
        # a broadcast bool combined with a vector comparison, then bool -> float16
        BufferStore(H, Let(m, Broadcast(s, 8) & Not(x > Broadcast(const(0.0), 8)),
                           Cast("float16x8", m)), idx))
    mod = build_module([PrimFunc("masks", [X, s, Y, H], loop(i, n // 8, body))], target)
    x = rng.standard_normal(n).astype("float32")
    for flag in (True, False):
        y, h = np.zeros(n, "float32"), np.zeros(n, "float16")
        mod(x, flag, y, h)
        np.testing.assert_array_equal(y, x * 2 if flag else x * 2 + 1)
        np.testing.assert_array_equal(h, (flag & ~(x > 0)).astype("float16"))

"""serial_small_parallel: a parallel loop whose whole work is below MIN_PARALLEL_WORK element
updates runs serially (a launch on the pool costs more than it saves, and on a busy machine
waits for a scheduler tick); a larger one, or one of unknown size, stays parallel; the results
are the same either way (compared with numpy exactly: the same float32 operations, in the same
order within an element)."""
import numpy as np
import pytest

import kiln
from kiln import te
from kiln.tir import Buffer, BufferStore, For, IfThenElse, SeqStmt, Var, const, post_order_visit
from kiln.tir.transform.serial_small_parallel import MIN_PARALLEL_WORK, serial_small_parallel


def _kinds(func):
    kinds = []
    post_order_visit(func.body, lambda n: kinds.append(n.kind) if isinstance(n, For) else None)
    return kinds


def _scaled(n, lanes=16):
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(b.op)
    outer, inner = s[b].split(b.op.axis[0], factor=max(n // 4, lanes))
    _, vec = s[b].split(inner, factor=lanes)
    s[b].vectorize(vec)
    s[b].parallel(outer)
    return s, a, b


@pytest.mark.parametrize("n, parallel", [(1024, False), (MIN_PARALLEL_WORK // 2, False),
                                         (MIN_PARALLEL_WORK, True), (1 << 20, True)])
def test_small_loops_run_serially_and_large_ones_in_parallel(n, parallel):
    s, a, b = _scaled(n)
    func = kiln.lower(s, [a, b])
    assert ("parallel" in _kinds(func)) == parallel
    x = np.random.default_rng(0).standard_normal(n).astype("float32")
    y = np.empty_like(x)
    kiln.build(s, [a, b], target="llvm")(x, y)
    np.testing.assert_array_equal(y, x * np.float32(2) + np.float32(1))


def test_a_symbolic_extent_stays_parallel():
    n = te.var("n")
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] + 1.0, name="B")
    s = te.create_schedule(b.op)
    outer, _ = s[b].split(b.op.axis[0], factor=4)
    s[b].parallel(outer)
    assert "parallel" in _kinds(kiln.lower(s, [a, b]))


def test_work_counts_lanes_loops_and_the_larger_branch():
    buf = Buffer.make("A", "float32", (1 << 20,))
    i, j = Var("i", "int32"), Var("j", "int32")
    vector = BufferStore(buf, const(1.0, "float32x16"), i)      # 16 updates
    small = BufferStore(buf, const(1.0), j)                      # 1 update
    # 64 x (16 x 8 + max(1, 16)) = 9,216 < 16,384: serial
    body = SeqStmt((For(j, const(0), const(8), "serial", vector),
                    IfThenElse(i < 3, small, vector)))
    assert serial_small_parallel(For(i, const(0), const(64), "parallel", body)).kind == "serial"
    # 128 x 144 = 18,432: parallel
    assert serial_small_parallel(For(i, const(0), const(128), "parallel", body)).kind == \
        "parallel"


def test_only_the_outermost_parallel_loop_is_judged():
    buf = Buffer.make("A", "float32", (1 << 20,))
    i, j = Var("i", "int32"), Var("j", "int32")
    inner = For(j, const(0), const(4), "parallel", BufferStore(buf, const(1.0), j))
    outer = For(i, const(0), const(MIN_PARALLEL_WORK), "parallel", inner)
    out = serial_small_parallel(outer)
    assert out.kind == "parallel" and out.body.kind == "parallel"


def test_math_calls_weigh_more_than_arithmetic():
    # 4,096 elements: an add is too little work for the pool, an exp each is not.
    n = 4096
    a = te.placeholder((n,), name="A")
    for fn, parallel in ((lambda x: x + 1.0, False), (te.exp, True)):
        b = te.compute((n,), lambda i: fn(a[i]), name="B")
        s = te.create_schedule(b.op)
        outer, _ = s[b].split(b.op.axis[0], factor=1024)
        s[b].parallel(outer)
        assert ("parallel" in _kinds(kiln.lower(s, [a, b]))) == parallel

"""single_iteration_loops: a serial loop of at most one iteration (a clipped tile's loop,
min(n - i, 1)) becomes a branch with the loop variable replaced by its start, so register
indices fold; loops that may run twice, constant loops and bound loops stay."""
from kiln.tir import Buffer, BufferStore, For, IfThenElse, Var, const
from kiln.tir.op import min_
from kiln.tir.transform.single_iteration import single_iteration_loops


def _store_loop(extent, kind="serial"):
    acc = Buffer.make("acc", "float32", (8,), scope="local")
    f, y = Var("f"), Var("y")
    return For(y, const(0), extent, kind, BufferStore(acc, const(0.0, "float32"), f + y)), f


def test_a_loop_of_at_most_one_iteration_becomes_a_branch():
    i, n = Var("i"), Var("n")
    loop, _ = _store_loop(min_(n - i, const(1)))
    out = single_iteration_loops(loop)
    assert isinstance(out, IfThenElse)
    assert str(out.condition) == str(const(0) < min_(n - i, const(1)))
    assert str(out.then_case.index) == "f + 0"       # y is its start (simplify folds it)


def test_other_loops_stay():
    i, n = Var("i"), Var("n")
    for extent, kind in ((min_(n - i, const(2)), "serial"), (const(1), "serial"),
                         (min_(n - i, const(1)), "unrolled"), (n, "serial")):
        loop, _ = _store_loop(extent, kind)
        assert single_iteration_loops(loop) is loop

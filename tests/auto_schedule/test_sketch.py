"""Sketch rules on small DAGs: which sketches each kernel gets, and the program a sketch gives
under fixed decisions (Before: the computation; Expected: the printed steps)."""
import pytest

from kiln import te
from kiln.auto_schedule import ComputeDAG, Decisions, UnsupportedDAG, annotate, generate_sketches
from kiln.testing.te_kernels import gelu_chain, matmul, matmul_bias_relu, row_sum, softmax


def _sketches(outputs):
    return [str(s) for s in generate_sketches(ComputeDAG(outputs))]


def _program(outputs, sketch, **values):
    dag = ComputeDAG(outputs)
    chosen = [s for s in generate_sketches(dag) if str(s) == sketch]
    assert chosen, f"no sketch {sketch}"
    decisions = Decisions(values, rng=0)
    program = annotate(dag, chosen[0], decisions)
    assert decisions.values.keys() == values.keys(), "the test fixes every decision"
    return str(program)


def test_a_matmul_output_is_tiled_alone_or_through_a_cache_stage():
    assert _sketches(matmul()[1]) == ["C:tile", "C:cache1", "C:cache2"]


def test_multi_level_tiling_orders_loops_SSRSRS():
    got = _program(matmul()[1], "C:tile", **{
        "tile:2:0": (2, 4, 2), "tile:2:1": (2, 3, 8), "rtile:2:0": (8,),
        "parallel:2": 2, "unroll:2": 64})
    assert got.splitlines() == [
        "split C i [2, 4, 2]",
        "split C j [2, 3, 8]",
        "split C k [8]",
        "reorder C i.outer.outer.outer j.outer.outer.outer i.outer.outer.inner "
        "j.outer.outer.inner k.outer i.outer.inner j.outer.inner k.inner i.inner j.inner",
        "fuse C i.outer.outer.outer j.outer.outer.outer",
        "annotate C i.outer.outer.outer.j.outer.outer.outer.fused parallel",
        "pragma C i.outer.outer.outer.j.outer.outer.outer.fused auto_unroll_max_step=64",
        "annotate C j.inner vectorize",
    ]


def test_cache_write_computes_a_tile_inside_the_output_copy():
    got = _program(matmul()[1], "C:cache1", **{
        "tile:C.local:0": (2, 4, 2), "tile:C.local:1": (2, 3, 8), "rtile:C.local:0": (8,),
        "parallel:C.local.c": 2, "unroll:C.local": 0})
    assert got.splitlines() == [
        "cache_write C local",
        "split C i [2, 8]",
        "split C j [2, 24]",
        "reorder C i.outer.outer j.outer.outer i.outer.inner j.outer.inner i.inner j.inner",
        "fuse C i.outer.outer j.outer.outer",
        "annotate C i.outer.outer.j.outer.outer.fused parallel",
        "annotate C j.inner vectorize",
        "compute_at C.local C j.outer.inner",
        "split C.local i [4, 2]",
        "split C.local j [3, 8]",
        "split C.local k [8]",
        "reorder C.local i.outer.outer j.outer.outer k.outer i.outer.inner j.outer.inner "
        "k.inner i.inner j.inner",
        "annotate C.local j.inner vectorize",
    ]


def test_an_elementwise_reader_is_fused_with_the_tiles_at_level_two():
    assert _sketches(matmul_bias_relu()[1]) == ["C:tile", "C:fuse1", "C:fuse2"]
    got = _program(matmul_bias_relu()[1], "C:fuse2", **{
        "tile:2:0": (2, 4, 2), "tile:2:1": (2, 3, 8), "rtile:2:0": (4,),
        "parallel:2.c": 1, "unroll:2": 16})
    assert got.splitlines() == [
        "split D i [2, 4, 2]",
        "split D j [2, 3, 8]",
        "reorder D i.outer.outer.outer j.outer.outer.outer i.outer.outer.inner "
        "j.outer.outer.inner i.outer.inner j.outer.inner i.inner j.inner",
        "annotate D i.outer.outer.outer parallel",
        "annotate D j.inner vectorize",
        "compute_at C D j.outer.inner",
        "split C k [4]",
        "reorder C k.outer k.inner i j",
        "pragma C k.outer auto_unroll_max_step=16",
        "annotate C j vectorize",
    ]


def test_cheap_elementwise_producers_are_inlined():
    got = _program(gelu_chain()[1], "(plain)", **{"vector:2": 8, "parallel:2": 1})
    assert got.splitlines() == [
        "inline half",
        "split gelu j [8]",
        "annotate gelu j.inner vectorize",
        "annotate gelu i parallel",
    ]


def test_a_transform_feeding_a_matmul_is_computed_once_not_inlined():
    from kiln.testing.te_kernels import transformed_matmul
    got = _program(transformed_matmul()[1], "C:tile", **{
        "tile:3:0": (1, 2, 4), "tile:3:1": (1, 1, 4), "rtile:3:0": (4,), "parallel:3": 1,
        "unroll:3": 0, "at:1": 0, "vector:1": 8, "parallel:1": 1})
    assert "inline T" not in got
    assert got.splitlines()[-3:] == ["split T j [8]", "annotate T j.inner vectorize",
                                     "annotate T i parallel"]


def test_softmax_computes_exp_once_and_its_rows_inside_the_output_loop():
    # exp has two readers (the sum and the division): not inlined, so computed once
    got = _program(softmax()[1], "softmax_max:plain softmax_sum:plain", **{
        "vector:4": 8, "parallel:4": 1, "at:3": 1, "at:2": 1, "at:1": 1,
        "vector:2": 32})
    assert got.splitlines() == [
        "split softmax i1 [8]",
        "annotate softmax i1.inner vectorize",
        "annotate softmax i0 parallel",
        "compute_at softmax_sum softmax i0",
        "compute_at softmax_exp softmax i0",
        "compute_at softmax_max softmax i0",
        "annotate softmax_exp i1 vectorize",
    ]


def test_a_row_sum_is_factored_over_a_vector_of_partial_sums_per_row():
    assert _sketches(row_sum()[1]) == ["S:plain", "S:rfactor"]
    got = _program(row_sum()[1], "S:rfactor", **{"rfactor:1": 4, "parallel:1": 1,
                                                  "rf_at:1": 1})
    assert got.splitlines() == [
        "split S r [4]",
        "rfactor S r.inner",
        "reorder S.rf i r.outer r.inner.v",
        "annotate S.rf r.inner.v vectorize",
        "annotate S i parallel",
        "compute_at S.rf S i",
    ]


def test_the_space_holds_kilns_hand_written_softmax_schedule():
    # topi/x86/softmax.py: every stage at the parallel row loop, the sum over 8 partial
    # sums in a vector, exp and the output vectorized along the row
    got = _program(softmax()[1], "softmax_max:plain softmax_sum:rfactor", **{
        "vector:4": 8, "parallel:4": 1, "at:3": 1, "at:2": 1, "at:1": 1, "vector:2": 32,
        "rfactor:3": 8, "rf_at:3": 1})
    assert got.splitlines() == [
        "split softmax i1 [8]",
        "annotate softmax i1.inner vectorize",
        "annotate softmax i0 parallel",
        "split softmax_sum k [8]",
        "rfactor softmax_sum k.inner",
        "reorder softmax_sum.rf i0 k.outer k.inner.v",
        "annotate softmax_sum.rf k.inner.v vectorize",
        "compute_at softmax_sum softmax i0",
        "compute_at softmax_sum.rf softmax_sum i0",
        "compute_at softmax_exp softmax i0",
        "compute_at softmax_max softmax i0",
        "annotate softmax_exp i1 vectorize",
    ]


def test_a_symbolic_extent_is_not_auto_scheduled():
    n = te.size_var("n")
    X = te.placeholder((n, 8), name="X")
    Y = te.compute((n, 8), lambda i, j: X[i, j] + 1.0, name="Y")
    with pytest.raises(UnsupportedDAG, match="symbolic extent n"):
        ComputeDAG([Y])

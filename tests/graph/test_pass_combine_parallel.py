"""CombineParallelDense / CombineParallelBatchMatmul (Before → Expected)."""
import numpy as np

from kiln.graph import Function, Tuple, call, const, post_order, structural_equal, var
from kiln.graph.transform import (CombineParallelDense, PassContext, combine_parallel_batch_matmul,
                                  combine_parallel_dense)
from kiln.graph.module import IRModule


def _check(fn, before, expected):
    after = fn(before)
    assert structural_equal(after, expected), f"got\n{after}\nexpected\n{expected}"
    return after


def _slice(y, lo, hi, axis):
    return call("strided_slice", y, begin=(lo,), end=(hi,), strides=(1,), axes=(axis,))


def _weights(rng, *shapes):
    return [rng.standard_normal(s).astype("float32") for s in shapes]


def test_qkv_with_biases(rng):
    x = var("x", (1, 4, 8))
    wq, wk, wv = _weights(rng, (8, 8), (8, 8), (4, 8))
    bq, bk, bv = _weights(rng, (8,), (8,), (4,))
    q = call("nn.bias_add", call("nn.dense", x, const(wq)), const(bq), axis=2)
    k = call("add", call("nn.dense", x, const(wk)), const(bk))
    v = call("add", const(bv.reshape(1, 1, 4)), call("nn.dense", x, const(wv)))
    before = Function([x], Tuple([call("nn.relu", q), k, call("exp", v)]))
    y = call("nn.bias_add", call("nn.dense", x, const(np.concatenate([wq, wk, wv]))),
             const(np.concatenate([bq, bk, bv])), axis=2)
    expected = Function([x], Tuple([call("nn.relu", _slice(y, 0, 8, 2)), _slice(y, 8, 16, 2),
                                    call("exp", _slice(y, 16, 20, 2))]))
    _check(combine_parallel_dense, before, expected)


def test_missing_bias_gets_zeros_and_shared_dense_is_sliced(rng):
    x = var("x", (3, 5))
    w1, w2 = _weights(rng, (2, 5), (3, 5))
    (b1,) = _weights(rng, (2,))
    d1 = call("nn.dense", x, const(w1))
    d2 = call("nn.dense", x, const(w2))
    before = Function([x], Tuple([call("nn.bias_add", d1, const(b1)), d2, call("exp", d2)]))
    y = call("nn.bias_add", call("nn.dense", x, const(np.concatenate([w1, w2]))),
             const(np.concatenate([b1, np.zeros(3, "float32")])), axis=1)
    s2 = _slice(y, 2, 5, 1)
    expected = Function([x], Tuple([_slice(y, 0, 2, 1), s2, call("exp", s2)]))
    _check(combine_parallel_dense, before, expected)


def test_what_is_not_combined(rng):
    x, z = var("x", (3, 5)), var("z", (2, 5))
    w1, w2 = _weights(rng, (2, 5), (3, 5))
    wvar = var("w", (4, 5))
    lone = Function([x, z], Tuple([call("nn.dense", x, const(w1)), call("nn.dense", z, const(w2))]))
    assert combine_parallel_dense(lone) is lone                       # different inputs
    variable = Function([x, wvar], Tuple([call("nn.dense", x, const(w1)), call("nn.dense", x, wvar)]))
    assert combine_parallel_dense(variable) is variable               # weight not constant
    two = Function([x], Tuple([call("nn.dense", x, const(w1)), call("nn.dense", x, const(w2))]))
    assert combine_parallel_dense(two, min_num_branches=3) is two
    with PassContext(config={"CombineParallelDense.min_num_branches": 3}):
        out = CombineParallelDense()(IRModule.from_expr(two))
    assert out["main"] is two
    combined = combine_parallel_dense(two)
    assert sum(1 for n in post_order(combined) if getattr(n, "op", None) is not None
               and getattr(n.op, "name", "") == "nn.dense") == 1


def test_batch_matmul_both_transpositions(rng):
    x = var("x", (2, 4, 6))
    for tb in (False, True):
        shapes = [(2, 3, 6), (2, 5, 6)] if tb else [(2, 6, 3), (2, 6, 5)]
        w1, w2 = _weights(rng, *shapes)
        (b2,) = _weights(rng, (5,))
        m1 = call("nn.batch_matmul", x, const(w1), transpose_b=tb)
        m2 = call("add", call("nn.batch_matmul", x, const(w2), transpose_b=tb), const(b2))
        before = Function([x], Tuple([m1, m2]))
        w = np.concatenate([w1, w2], axis=1 if tb else 2)
        y = call("nn.bias_add", call("nn.batch_matmul", x, const(w), transpose_b=tb),
                 const(np.concatenate([np.zeros(3, "float32"), b2])), axis=2)
        expected = Function([x], Tuple([_slice(y, 0, 3, 2), _slice(y, 3, 8, 2)]))
        _check(combine_parallel_batch_matmul, before, expected)
    mixed = Function([x], Tuple([call("nn.batch_matmul", x, const(w1), transpose_b=True),
                                 call("nn.batch_matmul", x, const(np.swapaxes(w2, 1, 2)))]))
    assert combine_parallel_batch_matmul(mixed) is mixed

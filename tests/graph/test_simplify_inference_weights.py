"""Batch norm folded into a weight: the product is taken in float64 and rounded once to the
weight's dtype, bit for bit as w.astype(float64) * s then astype(dtype)."""
import numpy as np
import pytest

from kiln.graph import Constant, Function, call, const, post_order, var
from kiln.graph.transform import simplify_inference

EPS = 1e-5


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("anchor", ["conv2d", "dense"])
def test_folded_weight_rounds_once(rng, dtype, anchor):
    c = 24
    gamma, beta, mean, var_ = (rng.random(c) + 0.5, rng.standard_normal(c),
                               rng.standard_normal(c), rng.random(c) + 0.5)
    if anchor == "conv2d":
        w = rng.standard_normal((c, 5, 3, 3)).astype(dtype)
        x = var("x", (1, 5, 6, 6), dtype)
        y = call("nn.conv2d", x, const(w), padding=(1, 1, 1, 1))
        axis, shape = 1, (-1, 1, 1, 1)
    else:
        w = rng.standard_normal((c, 7)).astype(dtype)
        x = var("x", (3, 7), dtype)
        y = call("nn.dense", x, const(w))
        axis, shape = 1, (-1, 1)
    stats = [const(a.astype(dtype)) for a in (gamma, beta, mean, var_)]
    out = simplify_inference(Function([x], call("nn.batch_norm", y, *stats, axis=axis,
                                                epsilon=EPS)))
    g, _, _, v = (s.data.astype(np.float64) for s in stats)
    scale = g / np.sqrt(v + EPS)
    want = (w.astype(np.float64) * scale.reshape(shape)).astype(dtype)
    folded = [n.data for n in post_order(out) if isinstance(n, Constant) and n.data.ndim > 1]
    assert len(folded) == 1
    assert folded[0].dtype == np.dtype(dtype) and not folded[0].flags.writeable
    np.testing.assert_array_equal(folded[0], want)

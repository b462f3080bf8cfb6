"""SimplifyInference: dropout removal, batch norm folded into conv2d / dense or expanded."""
import numpy as np
import pytest

from kiln.graph import Function, Tuple, call, const, post_order, structural_equal, var
from kiln.graph.transform import simplify_inference

EPS = 1e-3


def _stats(rng, c, dtype="float32"):
    gamma = rng.random(c) + 0.5
    beta = rng.standard_normal(c)
    mean = rng.standard_normal(c)
    var_ = rng.random(c) + 0.5
    return [a.astype(dtype) for a in (gamma, beta, mean, var_)]


def _scale_shift(stats):
    g, b, m, v = (a.astype(np.float64) for a in stats)
    s = g / np.sqrt(v + EPS)
    return s, b - m * s


def _bn(x, stats, axis=1):
    return call("nn.batch_norm", x, *[const(a) for a in stats], axis=axis, epsilon=EPS)


def _check(before, expected):
    after = simplify_inference(before)
    assert structural_equal(after, expected), f"got\n{after}\nexpected\n{expected}"
    return after


def test_dropout_removed():
    x = var("x", (2, 8))
    _check(Function([x], call("nn.relu", call("nn.dropout", x, rate=0.1))),
           Function([x], call("nn.relu", x)))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_folds_into_conv(rng, layout):
    w = rng.standard_normal((6, 3, 3, 3) if layout == "NCHW" else (3, 3, 3, 6)).astype("float32")
    x = var("x", (1, 3, 8, 8) if layout == "NCHW" else (1, 8, 8, 3))
    axis = 1 if layout == "NCHW" else 3
    stats = _stats(rng, 6)
    conv = call("nn.conv2d", x, const(w), padding=(1, 1, 1, 1), data_layout=layout)
    before = Function([x], call("nn.relu", _bn(conv, stats, axis)))
    s, t = _scale_shift(stats)
    w2 = w * (s[:, None, None, None] if layout == "NCHW" else s)
    expected = Function([x], call("nn.relu", call(
        "nn.bias_add",
        call("nn.conv2d", x, const(w2.astype("float32")), padding=(1, 1, 1, 1), data_layout=layout),
        const(t.astype("float32")), axis=axis)))
    _check(before, expected)


def test_batch_norm_folds_through_conv_bias(rng):
    w = rng.standard_normal((4, 2, 1, 1)).astype("float64")
    b = rng.standard_normal(4).astype("float64")
    stats = _stats(rng, 4, "float64")
    x = var("x", (1, 2, 5, 5), "float64")
    before = Function([x], _bn(call("nn.bias_add", call("nn.conv2d", x, const(w)), const(b)), stats))
    s, t = _scale_shift(stats)
    expected = Function([x], call("nn.bias_add", call("nn.conv2d", x, const(w * s[:, None, None, None])),
                                  const(b * s + t), axis=1))
    _check(before, expected)


def test_batch_norm_folds_into_dense(rng):
    w = rng.standard_normal((5, 3)).astype("float32")
    stats = _stats(rng, 5)
    x = var("x", (4, 3))
    before = Function([x], _bn(call("nn.dense", x, const(w)), stats))
    s, t = _scale_shift(stats)
    expected = Function([x], call("nn.bias_add", call("nn.dense", x, const((w * s[:, None]).astype("float32"))),
                                  const(t.astype("float32")), axis=1))
    _check(before, expected)


def test_batch_norm_expanded_when_conv_has_other_users(rng):
    w = rng.standard_normal((4, 2, 1, 1)).astype("float32")
    stats = _stats(rng, 4)
    x = var("x", (1, 2, 3, 3))
    conv = call("nn.conv2d", x, const(w))
    before = Function([x], Tuple([conv, _bn(conv, stats)]))
    s, t = _scale_shift(stats)
    expected = Function([x], Tuple([conv, call(
        "add", call("multiply", conv, const(s.reshape(4, 1, 1).astype("float32"))),
        const(t.reshape(4, 1, 1).astype("float32")))]))
    _check(before, expected)


def test_batch_norm_with_variable_statistics_expands_to_ops(rng):
    x = var("x", (2, 3, 4))
    g, b, m, v = (var(n, (3,)) for n in ("g", "b", "m", "v"))
    before = Function([x, g, b, m, v], call("nn.batch_norm", x, g, b, m, v, axis=1, epsilon=EPS))
    after = simplify_inference(before)
    ops = sorted(n.op.name for n in post_order(after) if hasattr(n, "op"))
    assert "nn.batch_norm" not in ops and ops.count("expand_dims") == 2 and "rsqrt" in ops
    assert after.checked_type == before.checked_type


def test_nothing_to_do_returns_same_function():
    x = var("x", (2, 3))
    f = Function([x], call("exp", x))
    assert simplify_inference(f) is f

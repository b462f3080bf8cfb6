"""Passes keep what a model computes: each model is compiled with every graph pass disabled and
with the default pipeline, run on random inputs, and compared (and anchored to numpy)."""
import numpy as np
import pytest

import kiln
from kiln.graph import Function, IRModule, Tuple, TupleGetItem, call, const, post_order, var
from kiln.graph.transform import PassContext, default_pipeline
from kiln.runtime import GraphExecutor

ALL_PASSES = ["InferType", "SimplifyInference", "FoldConstant", "SimplifyExpr",
              "EliminateCommonSubexpr", "CombineParallelDense", "CombineParallelBatchMatmul",
              "DeadCodeElimination"]


def _run(mod, inputs, params, optimize):
    if optimize:
        lib = kiln.compile(mod, params=params)
    else:
        with PassContext(disabled_pass=ALL_PASSES):
            lib = kiln.compile(mod, params=params)
    m = GraphExecutor(lib)
    m.run(**inputs)
    return [m.get_output(k).numpy() for k in range(m.get_num_outputs())]


def _compare(mod, inputs, params, rel):
    """Optimized vs unoptimized: max abs error ≤ rel × max |output| per output."""
    before = _run(mod, inputs, params, optimize=False)
    after = _run(mod, inputs, params, optimize=True)
    assert len(before) == len(after)
    for b, a in zip(before, after):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.abs(a - b).max() <= rel * max(np.abs(b).max(), 1e-30)
    return before, after


def _optimized_ops(mod, params):
    from kiln.graph.transform import BindParams
    with PassContext(opt_level=3):
        out = default_pipeline()(BindParams(params)(mod))
    return [n.op.name for n in post_order(out["main"]) if hasattr(n, "op") and hasattr(n.op, "name")]


def _conv_net(rng, dtype):
    """conv-bn-relu, conv(+bias)-bn, residual add, relu, dropout, global pool, dense+bias."""
    x = var("x", (1, 4, 8, 8), dtype)
    names, params, ws = [], {}, {}

    def param(name, shape, scale=0.3, positive=False):
        a = rng.random(shape) + 0.5 if positive else rng.standard_normal(shape) * scale
        params[name] = a.astype(dtype)
        ws[name] = var(name, shape, dtype)
        names.append(name)
        return ws[name]

    def bn(y, prefix):
        return call("nn.batch_norm", y, param(f"{prefix}.g", (4,), positive=True),
                    param(f"{prefix}.b", (4,)), param(f"{prefix}.m", (4,)),
                    param(f"{prefix}.v", (4,), positive=True), epsilon=1e-5)

    y = call("nn.conv2d", x, param("c1.w", (4, 4, 3, 3)), padding=(1, 1, 1, 1))
    y = call("nn.relu", bn(y, "bn1"))
    y = call("nn.bias_add", call("nn.conv2d", y, param("c2.w", (4, 4, 3, 3)), padding=(1, 1, 1, 1)),
             param("c2.b", (4,)))
    y = call("nn.relu", call("add", bn(y, "bn2"), x))
    y = call("reshape", call("nn.global_avg_pool2d", call("nn.dropout", y, rate=0.2)),
             newshape=(1, 4))
    y = call("nn.bias_add", call("nn.dense", y, param("fc.w", (3, 4))), param("fc.b", (3,)))
    mod = IRModule.from_expr(Function([x] + [ws[n] for n in names], y))
    inputs = {"x": rng.standard_normal((1, 4, 8, 8)).astype(dtype)}
    return mod, params, inputs


@pytest.mark.parametrize("dtype, rel", [("float32", 1e-5), ("float64", 1e-12)])
def test_conv_bn_network(rng, dtype, rel):
    mod, params, inputs = _conv_net(rng, dtype)
    ops = _optimized_ops(mod, params)
    assert "nn.batch_norm" not in ops and "nn.dropout" not in ops
    assert ops.count("nn.conv2d") + ops.count("nn.contrib_conv2d_nchwc") == 2
    assert "multiply" not in ops            # both batch norms folded into their convolutions
    _compare(mod, inputs, params, rel)


def test_batch_norm_against_numpy(rng):
    """An anchor independent of kiln's batch_norm kernel: the folded model equals numpy."""
    x = var("x", (2, 3, 4, 4))
    w = rng.standard_normal((5, 3, 1, 1)).astype("float32")
    g, b, m = (rng.standard_normal(5).astype("float32") for _ in range(3))
    v = (rng.random(5) + 0.5).astype("float32")
    y = call("nn.batch_norm", call("nn.conv2d", x, const(w)), *map(const, (g, b, m, v)),
             epsilon=1e-3)
    data = rng.standard_normal((2, 3, 4, 4)).astype("float32")
    (out,) = _run(IRModule.from_expr(Function([x], y)), {"x": data}, None, optimize=True)
    conv = np.einsum("nchw,oc->nohw", data.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    shape = (1, 5, 1, 1)
    ref = (conv - m.reshape(shape)) / np.sqrt(v.reshape(shape) + 1e-3) * g.reshape(shape) + \
        b.reshape(shape)
    assert np.abs(out - ref).max() <= 1e-5 * np.abs(ref).max()


def test_attention_projections_combined(rng):
    """BERT-style self-attention: Q/K/V dense + bias share x and become one dense."""
    s, h, heads = 8, 16, 2
    x = var("x", (1, s, h))
    params, weights = {}, []

    def proj(name):
        params[f"{name}.w"] = (rng.standard_normal((h, h)) * 0.2).astype("float32")
        params[f"{name}.b"] = rng.standard_normal(h).astype("float32")
        weights.extend([var(f"{name}.w", (h, h)), var(f"{name}.b", (h,))])
        y = call("add", call("nn.dense", x, weights[-2]), weights[-1])
        y = call("reshape", y, newshape=(1, s, heads, h // heads))
        return call("reshape", call("transpose", y, axes=(0, 2, 1, 3)),
                    newshape=(heads, s, h // heads))

    q, k, v = proj("q"), proj("k"), proj("v")
    scores = call("nn.softmax", call("multiply", call("nn.batch_matmul", q, k, transpose_b=True),
                                     const(np.float32(0.25))))
    ctx = call("nn.batch_matmul", scores, v)
    out = call("reshape", call("transpose", call("reshape", ctx, newshape=(1, heads, s, h // heads)),
                               axes=(0, 2, 1, 3)), newshape=(1, s, h))
    mod = IRModule.from_expr(Function([x] + weights, out))
    ops = _optimized_ops(mod, params)
    # one combined product (AlterOpLayout then reads its weight pre-packed)
    assert ops.count("nn.contrib_dense_pack") == 1 and ops.count("nn.dense") == 0
    assert ops.count("strided_slice") == 3
    _compare(mod, {"x": rng.standard_normal((1, s, h)).astype("float32")}, params, 1e-5)


def test_simplify_cse_dce_numeric(rng):
    x = var("x", (2, 3, 4))
    a = call("transpose", call("transpose", x, axes=(1, 0, 2)), axes=(1, 2, 0))
    b = call("reshape", call("reshape", call("exp", x), newshape=(6, 4)), newshape=(2, 3, 4))
    parts = call("split", x, indices_or_sections=(1,), axis=0)
    c = call("add", call("multiply", TupleGetItem(parts, 1), const(np.float32(1))),
             call("exp", x))
    y = Tuple([call("cast", a, dtype="float32"), call("add", b, call("exp", x)), c])
    mod = IRModule.from_expr(Function([x], y))
    ops = _optimized_ops(mod, {})
    assert ops.count("exp") == 1 and "split" not in ops and ops.count("transpose") == 1
    _compare(mod, {"x": rng.standard_normal((2, 3, 4)).astype("float32")}, None, 1e-6)


def test_batch_matmul_combined(rng):
    x = var("x", (2, 5, 6))
    w1 = (rng.standard_normal((2, 4, 6)) * 0.3).astype("float32")
    w2 = (rng.standard_normal((1, 3, 6)) * 0.3).astype("float32")
    w3 = (rng.standard_normal((1, 2, 6)) * 0.3).astype("float32")
    b3 = rng.standard_normal(2).astype("float32")
    y = Tuple([call("nn.batch_matmul", x, const(w1), transpose_b=True),
               call("tanh", call("nn.batch_matmul", x, const(w2), transpose_b=True)),
               call("add", call("nn.batch_matmul", x, const(w3), transpose_b=True), const(b3))])
    mod = IRModule.from_expr(Function([x], y))
    ops = _optimized_ops(mod, {})
    assert ops.count("nn.batch_matmul") == 2        # w2 and w3 (batch 1) combine; w1 stays
    before, _ = _compare(mod, {"x": rng.standard_normal((2, 5, 6)).astype("float32")}, None, 1e-5)
    xs = _run(mod, {"x": np.ones((2, 5, 6), "float32")}, None, optimize=True)
    np.testing.assert_allclose(xs[2], np.ones((2, 5, 6)) @ np.swapaxes(w3, 1, 2) + b3, rtol=1e-5)

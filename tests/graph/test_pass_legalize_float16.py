"""LegalizeFloat16: float16 contractions, reductions and normalizations compute in float32.

Structural tests (Before → Expected) of the rewrite, the registry check that every reduction /
anchor op is classified, the pipeline position (layout passes see float32 constants), and
numeric checks: kiln's float16 results against numpy references that accumulate in float32 (or
float64) and round once to float16. Tolerance: one float16 ulp of the reference, since kiln's
float32 sum runs in another order than numpy's and may round to the neighbouring float16.
"""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln.driver.stages import module_at_stage
from kiln.graph import (Constant, Function, IRModule, OpPattern, Tuple, call, const, list_ops,
                        post_order, structural_equal, var)
from kiln.graph.transform import legalize_float16
from kiln.graph.transform.legalize_float16 import ACCUMULATING, EXACT_IN_FLOAT16
from kiln.runtime import GraphExecutor

H, F = "float16", "float32"


def _check(before, expected):
    after = legalize_float16(before)
    assert structural_equal(after, expected), f"got\n{after}\nexpected\n{expected}"


def _wide(x):
    return call("cast", x, dtype=F)


def _narrow(x):
    return call("cast", x, dtype=H)


# ------------------------------------------------------------------------------ structure
def test_dense_with_constant_weight_and_shared_input():
    """x is cast once for both readers; the constant weight is converted, not cast."""
    x = var("x", (2, 8), H)
    w = np.arange(32, dtype=H).reshape(4, 8)
    before = Function([x], Tuple([call("nn.dense", x, const(w)), call("sum", x, axis=1)]))
    x32 = _wide(x)
    expected = Function([x], Tuple([_narrow(call("nn.dense", x32, const(w.astype(F)))),
                                    _narrow(call("sum", x32, axis=1))]))
    _check(before, expected)
    after = legalize_float16(before)
    dense = after.body.fields[0].args[0]
    assert isinstance(dense.args[1], Constant) and dense.args[1].checked_type.dtype == F
    assert legalize_float16(after) is after            # nothing float16 is left to widen


def test_chained_ops_keep_one_rounding_each():
    """softmax(batch_matmul(a, b)): the product is rounded to float16 before the softmax
    reads it again, as numpy rounds every op's result."""
    a, b = var("a", (2, 3, 4), H), var("b", (2, 5, 4), H)
    scores = call("nn.batch_matmul", a, b, transpose_b=True)
    before = Function([a, b], call("nn.softmax", call("multiply", scores, const(np.float16(0.5)))))
    scores32 = _narrow(call("nn.batch_matmul", _wide(a), _wide(b), transpose_b=True))
    scaled = call("multiply", scores32, const(np.float16(0.5)))
    expected = Function([a, b], _narrow(call("nn.softmax", _wide(scaled))))
    _check(before, expected)


def test_conv2d_out_dtype_and_layer_norm_parameters():
    x = var("x", (1, 2, 5, 5), H)
    w = var("w", (3, 2, 3, 3), H)
    before = Function([x, w], call("nn.conv2d", x, w, out_dtype=H))
    expected = Function([x, w], _narrow(call("nn.conv2d", _wide(x), _wide(w), out_dtype=F)))
    _check(before, expected)
    # float16 operands with a float32 result: already summed in float32, nothing to round
    mixed = Function([x, w], call("nn.conv2d", x, w, out_dtype=F))
    _check(mixed, Function([x, w], call("nn.conv2d", _wide(x), _wide(w), out_dtype=F)))
    g, b = var("g", (5,), H), var("b", (5,), H)
    before = Function([x, g, b], call("nn.layer_norm", x, g, b, epsilon=1e-3))
    expected = Function([x, g, b], _narrow(call("nn.layer_norm", _wide(x), _wide(g), _wide(b),
                                                epsilon=1e-3)))
    _check(before, expected)


def test_ops_left_alone():
    x = var("x", (1, 2, 4, 4), H)
    y = var("y", (2, 8), F)
    kept = [call("max", x, axis=1), call("argmax", x, axis=1), call("nn.relu", x),
            call("nn.max_pool2d", x, pool_size=(2, 2)), call("cumsum", x, axis=3),
            call("image.resize2d", x, size=(8, 8), method="nearest"),
            call("sum", call("cast", x, dtype="int32"), axis=1), call("nn.softmax", y)]
    for body in kept:
        f = Function([x, y], body)
        assert legalize_float16(f) is f, body
    resize = call("image.resize2d", x, size=(8, 8), method="linear")
    _check(Function([x], resize), Function([x], _narrow(call(
        "image.resize2d", _wide(x), size=(8, 8), method="linear"))))


_UNCLASSIFIED = """
from kiln.graph.op import OpPattern, get_op, list_ops
from kiln.graph.transform.legalize_float16 import ACCUMULATING, EXACT_IN_FLOAT16
print([name for name in list_ops()
       if get_op(name).pattern in (OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE)
       and name not in ACCUMULATING and name not in EXACT_IN_FLOAT16])
"""


def test_every_reduction_and_anchor_is_classified():
    """A new reduction or anchor op must say whether float16 calls of it accumulate. Asked in
    a fresh interpreter: other tests register ops of their own in this one's registry."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _UNCLASSIFIED], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"add to ACCUMULATING or EXACT_IN_FLOAT16: {done.stdout}"
    assert not set(ACCUMULATING) & EXACT_IN_FLOAT16
    assert all(name in list_ops() for name in set(ACCUMULATING) | EXACT_IN_FLOAT16)


@pytest.mark.parametrize("opt_level", [0, 3])
def test_pipeline_runs_it_before_the_layout_passes(opt_level):
    """At opt_level 3 the layout passes pack float32 constants (the weight was converted
    before them); at 0 the numerics are the same, without layout passes."""
    x = var("x", (1, 4, 6, 6), H)
    w = const(np.ones((8, 4, 3, 3), H))
    d = const(np.ones((5, 8), H))
    pooled = call("nn.global_avg_pool2d", call("nn.conv2d", x, w))
    body = call("nn.dense", call("reshape", pooled, newshape=(1, 8)), d)
    mod = module_at_stage(IRModule.from_expr(Function([x], body)), "optimized",
                          opt_level=opt_level)
    calls = [n for n in post_order(mod["main"]) if hasattr(n, "op") and hasattr(n.op, "name")]
    anchors = [c for c in calls if c.op.pattern >= OpPattern.COMM_REDUCE]
    assert anchors and all(c.checked_type.dtype == F for c in anchors), anchors
    consts = [n for n in post_order(mod["main"]) if isinstance(n, Constant) and n.data.size > 1]
    assert consts and all(c.data.dtype == np.float32 for c in consts)
    if opt_level == 3:
        names = {c.op.name for c in calls}
        assert {"nn.contrib_dense_pack"} <= names and "nn.dense" not in names
    assert mod["main"].body.checked_type.dtype == H


# ------------------------------------------------------------------------------ numerics
def _ulps(got, want):
    """|got - want| in float16 ulps of want (both float16)."""
    spacing = np.spacing(np.abs(want.astype(np.float16))).astype(np.float64)
    return np.abs(got.astype(np.float64) - want.astype(np.float64)) / spacing


def _rounded(v):
    return np.asarray(v).astype(np.float16)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _conv2d(x, w, pad):
    """NCHW x OIHW, stride 1, in float64."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, _, kh, kw = w.shape
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out


def test_float16_results_match_float32_accumulation(rng):
    """Long sums (512 terms) where float16 accumulation is off by many ulps; each output
    within one float16 ulp of the float64 result rounded to float16."""
    def rand(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float16)

    data = {"a": rand(3, 512), "w": rand(16, 512, scale=0.1), "p": rand(2, 5, 512),
            "q": rand(2, 512, 6, scale=0.1), "img": rand(1, 32, 6, 6), "k": rand(4, 32, 3, 3),
            "s": rand(4, 300, scale=4), "g": rand(512), "b": rand(512)}
    v = {n: var(n, d.shape, H) for n, d in data.items()}
    outs = {
        "dense": call("nn.dense", v["a"], v["w"]),
        "batch_matmul": call("nn.batch_matmul", v["p"], v["q"]),
        "conv2d": call("nn.conv2d", v["img"], v["k"], padding=(1, 1, 1, 1)),
        "softmax": call("nn.softmax", v["s"], axis=1),
        "sum": call("sum", v["a"], axis=1),
        "mean": call("mean", v["p"], axis=(0, 2)),
        "layer_norm": call("nn.layer_norm", v["a"], v["g"], v["b"], epsilon=1e-5),
        "avg_pool": call("nn.global_avg_pool2d", v["img"]),
    }
    x64 = {n: d.astype(np.float64) for n, d in data.items()}
    a = x64["a"]
    norm = (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5)
    refs = {
        "dense": x64["a"] @ x64["w"].T,
        "batch_matmul": x64["p"] @ x64["q"],
        "conv2d": _conv2d(x64["img"], x64["k"], 1),
        "softmax": _softmax(x64["s"], 1),
        "sum": a.sum(1),
        "mean": x64["p"].mean((0, 2)),
        "layer_norm": norm * x64["g"] + x64["b"],
        "avg_pool": x64["img"].mean((2, 3), keepdims=True),
    }
    mod = IRModule.from_expr(Function(list(v.values()), Tuple(list(outs.values()))))
    m = GraphExecutor(kiln.compile(mod))
    m.run(**data)
    for k, name in enumerate(outs):
        got = m.get_output(k).numpy()
        assert got.dtype == np.float16, name
        err = _ulps(got, _rounded(refs[name]))
        assert err.max() <= 1, f"{name}: {err.max()} ulps"


def test_onnx_float16_softmax_follows_its_function_body(rng):
    """ONNX float16 Softmax rounds exp and the quotient to float16 as its function body (and
    the reference) does; only the sum is accumulated in float32. Suite tolerance rtol 1e-3.
    The last axis: numpy accumulates float16 in float32 only along the contiguous axis (along
    an outer one it adds whole rows, rounding each step), kiln along any axis."""
    x = (rng.standard_normal((3, 4, 70)) * 3).astype(np.float16)
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    graph = helper.make_graph([node], "softmax16",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    mod, params = kiln.frontend.from_onnx(model)
    m = GraphExecutor(kiln.compile(mod, params=params))
    m.run(x=x)
    got = m.get_output(0).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7)

"""ONNX losses, normalizations and their small activations beyond the ONNX node suite: dtype
variants, ignored samples, stash_type, older opsets, ceil-mode windows, and the errors for bad
attributes and inputs.

Oracles: onnx.reference.ReferenceEvaluator where it implements the case, numpy otherwise.
Tolerance: float32 rtol 1e-5 / atol 1e-6 (1e-4 after sums over windows and transcendental
chains, stated per case); float16 outputs rtol / atol 2e-3 (a few float16 ulps); float64
rtol 1e-12; integer outputs exactly.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend import FrontendError, UnsupportedOpsError, from_onnx  # noqa: E402

R = np.random.default_rng(7)


def rand(*shape, dtype="float32"):
    return R.uniform(-2.0, 2.0, size=shape).astype(dtype)


def model(op, feeds, outputs=("y",), opset=22, **attrs):
    """A one-node model of `op` (node name "n") whose graph inputs are `feeds`."""
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            a.shape) for n, a in feeds.items()]
    outs = [helper.make_value_info(n, onnx.TypeProto()) for n in outputs]
    node = helper.make_node(op, list(feeds), list(outputs), name="n", **attrs)
    graph = helper.make_graph([node], "test", inputs, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(m, feeds):
    mod, params = from_onnx(m)
    ex = kiln.runtime.GraphExecutor(kiln.compile(mod, target="llvm", params=params))
    ex.run(**feeds)
    return [ex.get_output(k).numpy() for k in range(ex.get_num_outputs())]


def check(m, feeds, refs=None, rtol=1e-5, atol=1e-6):
    """kiln's outputs equal the references (ReferenceEvaluator's when not given) in dtype,
    shape and value."""
    outs = run(m, feeds)
    refs = ReferenceEvaluator(m).run(None, feeds) if refs is None else refs
    assert len(outs) == len(refs)
    for k, (out, ref) in enumerate(zip(outs, refs)):
        ref = np.asarray(ref)
        assert (out.dtype, out.shape) == (ref.dtype, ref.shape), f"output {k}"
        if ref.dtype.kind in "biu":
            np.testing.assert_array_equal(out, ref)
        elif ref.dtype == np.float16:
            np.testing.assert_allclose(out.astype("float32"), ref.astype("float32"),
                                       rtol=2e-3, atol=2e-3)
        else:
            tol = (1e-12, 1e-12) if ref.dtype == np.float64 else (rtol, atol)
            np.testing.assert_allclose(out, ref, rtol=tol[0], atol=tol[1])


def import_error(m, kind=FrontendError) -> str:
    with pytest.raises(kind) as err:
        from_onnx(m)
    return str(err.value)


# -- losses ----------------------------------------------------------------------------------

def test_nll_loss_int32_target_ignored_minus_inf():
    """int32 targets; an ignored sample whose picked log-probability is -inf adds 0, not NaN,
    and the weighted mean divides by the weights of the kept samples only."""
    x = rand(4, 3, 2)
    t = np.array([[0, 2], [1, 1], [2, 0], [1, 2]], "int32")
    x[0, 0, 0] = -np.inf               # sample (0, 0) has target 1 after the next line
    t[0, 0] = 1
    x[0, 1, 0] = -np.inf
    feeds = {"x": x, "t": t, "w": np.array([0.5, 2.0, 1.0], "float32")}
    for reduction in ("none", "sum", "mean"):
        check(model("NegativeLogLikelihoodLoss", feeds, reduction=reduction, ignore_index=1),
              feeds)


def test_softmax_cross_entropy_float64_log_prob():
    """float64 scores; the optional log_prob output; ignore_index and no weight: the mean is
    over the kept samples."""
    feeds = {"x": rand(3, 4, 5, dtype="float64"),
             "t": np.array([[0, 1, 3, 3, 2], [3, 3, 3, 0, 1], [2, 2, 1, 0, 3]], "int64")}
    check(model("SoftmaxCrossEntropyLoss", feeds, outputs=("loss", "log_prob"), opset=13,
                ignore_index=3), feeds)


def test_loss_errors_name_node_and_problem():
    feeds = {"x": rand(3, 4), "t": np.zeros((4,), "int64")}
    msg = import_error(model("NegativeLogLikelihoodLoss", feeds))
    assert "'n'" in msg and "target (input 1) has shape (4,), expected (3,)" in msg
    feeds = {"x": rand(3, 4), "t": np.zeros((3,), "int64")}
    msg = import_error(model("SoftmaxCrossEntropyLoss", feeds, opset=13, reduction="avg"))
    assert "'n'" in msg and "reduction must be one of" in msg and "'avg'" in msg
    feeds = {"x": rand(3, 4), "t": np.zeros((3,), "int64"), "w": np.ones(3, "float32")}
    msg = import_error(model("NegativeLogLikelihoodLoss", feeds))
    assert "weight (input 2) has shape (3,), expected (4,)" in msg


# -- normalizations --------------------------------------------------------------------------

def _layer_norm_ref(x, scale, bias, axis, eps):
    """float32 statistics over the axes from `axis`, as stash_type=1 asks."""
    xf = x.astype("float32")
    axes = tuple(range(axis, x.ndim))
    mean = xf.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(((xf - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    y = ((xf - mean) * inv * scale.astype("float32") + bias.astype("float32")).astype(x.dtype)
    return [y, mean, inv]


def test_layer_norm_float16_statistics_are_float32():
    """float16 data: Y is float16, Mean and InvStdDev float32 (ONNX's type U), computed in
    float32."""
    feeds = {"x": rand(2, 3, 8, dtype="float16"), "s": rand(3, 8, dtype="float16"),
             "b": rand(3, 8, dtype="float16")}
    refs = _layer_norm_ref(feeds["x"], feeds["s"], feeds["b"], 1, 1e-5)
    m = model("LayerNormalization", feeds, outputs=("y", "mean", "inv"), opset=17, axis=1)
    check(m, feeds, refs=refs, rtol=1e-4, atol=1e-5)
    # Y alone: the fused nn.layer_norm, run in float32 too.
    check(model("LayerNormalization", feeds, opset=17, axis=1), feeds, refs=refs[:1])


def test_rms_norm_float16_and_broadcast_scale():
    """float16 data normalized in float32; a scale of shape (1, 6) broadcasts."""
    x, s = rand(4, 2, 6, dtype="float16"), rand(1, 6, dtype="float16")
    xf = x.astype("float32")
    normalized = (xf / np.sqrt((xf * xf).mean(axis=(1, 2), keepdims=True) + 1e-3))
    ref = normalized.astype("float16") * s
    feeds = {"x": x, "s": s}
    check(model("RMSNormalization", feeds, opset=23, axis=-2, epsilon=1e-3), feeds, refs=[ref])


def test_group_norm_opset18_scales_groups():
    """Opset 18 GroupNormalization scales and shifts each group, opset 21 each channel."""
    x = rand(2, 6, 3)
    feeds18 = {"x": x, "s": rand(3), "b": rand(3)}
    g = x.reshape(2, 3, -1)
    norm = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    ref = (norm * feeds18["s"][:, None] + feeds18["b"][:, None]).reshape(x.shape)
    check(model("GroupNormalization", feeds18, opset=18, num_groups=3), feeds18, refs=[ref],
          rtol=1e-4, atol=1e-5)
    feeds21 = {"x": x, "s": rand(6), "b": rand(6)}
    check(model("GroupNormalization", feeds21, opset=21, num_groups=3), feeds21, rtol=1e-4,
          atol=1e-5)


def test_mean_variance_norm_axes():
    feeds = {"x": rand(2, 3, 4)}
    check(model("MeanVarianceNormalization", feeds, opset=13, axes=[0, -1]), feeds, rtol=1e-4,
          atol=1e-5)


def test_lrn_3d_input_even_size():
    """(N, C, L) input (the reference evaluator takes only 4-d) and an even window: one more
    channel after c than before."""
    x = rand(2, 5, 3)
    sq = np.pad(x * x, ((0, 0), (1, 2), (0, 0)))
    window_sum = sum(sq[:, k:k + 5] for k in range(4))
    ref = x / (1.5 + 0.3 / 4 * window_sum) ** 0.6
    feeds = {"x": x}
    check(model("LRN", feeds, opset=13, size=4, alpha=0.3, beta=0.6, bias=1.5), feeds,
          refs=[ref], rtol=1e-4, atol=1e-6)


def _lp_pool_ref(x, k, s, pads, p, ceil):
    """(sum of |x|^p over each window's taps inside the padded input) ** (1/p), 2-d."""
    xp = np.pad(np.abs(x) ** p, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    outs = []
    for axis in (2, 3):
        span = xp.shape[axis] - k
        out = (-(-span // s) if ceil else span // s) + 1
        outs.append(out - 1 if ceil and (out - 1) * s >= x.shape[axis] + pads[axis - 2]
                    else out)
    y = np.zeros(x.shape[:2] + tuple(outs), x.dtype)
    for i in range(outs[0]):
        for j in range(outs[1]):
            y[:, :, i, j] = xp[:, :, i * s:i * s + k, j * s:j * s + k].sum(axis=(2, 3))
    return y ** (1.0 / p)


@pytest.mark.parametrize("p", [1, 3])
def test_lp_pool_ceil_mode_partial_windows(p):
    """ceil_mode windows that run past the padding sum only the taps inside it."""
    x = rand(1, 2, 6, 7)
    feeds = {"x": x}
    m = model("LpPool", feeds, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1], p=p,
              ceil_mode=1)
    check(m, feeds, refs=[_lp_pool_ref(x, 3, 2, (1, 0, 0, 1), p, True)], rtol=1e-4)


def test_lp_pool_errors():
    msg = import_error(model("LpPool", {"x": rand(1, 1, 4, 4)}, kernel_shape=[2, 2], p=0))
    assert "'n'" in msg and "p must be a positive integer, got 0" in msg
    msg = import_error(model("LpPool", {"x": rand(1, 1, 4, 4)}, kernel_shape=[2]))
    assert "kernel_shape [2] does not match the 2 spatial axes" in msg


def test_normalization_errors_name_node_and_problem():
    feeds = {"x": rand(2, 6, 3), "s": rand(6), "b": rand(6)}
    msg = import_error(model("GroupNormalization", feeds, opset=21, num_groups=4))
    assert "'n'" in msg and "num_groups 4 does not divide the 6 channels" in msg
    msg = import_error(model("GroupNormalization", feeds, opset=18, num_groups=3))
    assert "scale (input 1) has shape (6,), expected (3,)" in msg
    feeds = {"x": rand(2, 3), "s": rand(3)}
    msg = import_error(model("LayerNormalization", feeds, opset=17, axis=2))
    assert "'n'" in msg and "axis 2 is out of range for an input of rank 2" in msg
    msg = import_error(model("RMSNormalization", feeds, opset=23, stash_type=16),
                       UnsupportedOpsError)
    assert "RMSNormalization(stash_type=16)" in msg


# -- activations -----------------------------------------------------------------------------

def test_hardmax_opset11_flattens_and_takes_first_max():
    """Before opset 13 Hardmax sees [dims before axis] x [dims from axis]; ties pick the first."""
    x = np.array([[[1, 3], [3, 0]], [[2, 2], [0, 2]]], "float32")
    flat = x.reshape(2, 4)
    ref = np.eye(4, dtype="float32")[flat.argmax(axis=1)].reshape(x.shape)
    feeds = {"x": x}
    check(model("Hardmax", feeds, opset=11, axis=1), feeds, refs=[ref])


def test_shrink_int32_and_unsigned():
    """Integer data: thresholds compare as the float lambd would; unsigned data is refused."""
    feeds = {"x": np.arange(-5, 6, dtype="int32")}
    check(model("Shrink", feeds, opset=9, lambd=1.5, bias=2.0), feeds)
    msg = import_error(model("Shrink", {"x": np.arange(5, dtype="uint8")}, opset=9),
                       UnsupportedOpsError)
    assert "Shrink(uint8 input)" in msg


def test_swish_and_swiglu_alpha():
    feeds = {"x": rand(3, 4, dtype="float64")}
    check(model("Swish", feeds, opset=24, alpha=0.7), feeds)
    feeds = {"a": rand(2, 5), "b": rand(2, 5)}
    check(model("SwiGLU", feeds, opset=28, alpha=1.7), feeds, rtol=1e-5, atol=1e-6)
    msg = import_error(model("SwiGLU", {"a": rand(2, 5), "b": rand(1, 5)}, opset=28))
    assert "'n'" in msg and "must have one shape and dtype" in msg

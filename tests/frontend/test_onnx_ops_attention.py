"""The attention-family ONNX converters (Attention, RotaryEmbedding, TensorScatter,
CausalConvWithState, LinearAttention) beyond the ONNX node suite: float64 and float16
variants, combinations the suite does not make, folding of static masks, and the errors.

Oracle: onnx.reference.ReferenceEvaluator (numpy for the one place where it departs from the
spec). Tolerance: float64 rtol 1e-10; float32 rtol 1e-5 / atol 1e-5 (1e-4 after a recurrence
or a softcapped softmax); float16 rtol 1e-3 / atol 1e-3 (about one float16 ulp, the suite's
own tolerance); integers exactly.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend import FrontendError, UnsupportedOpsError, from_onnx  # noqa: E402
from kiln.graph import post_order  # noqa: E402

R = np.random.default_rng(7)
TOL = {"float64": (1e-10, 1e-12), "float32": (1e-5, 1e-5), "float16": (1e-3, 1e-3)}


def rand(*shape, dtype="float32"):
    return R.uniform(-1.5, 1.5, size=shape).astype(dtype)


def model(op, feeds, outputs=("y",), inits=None, opset=25, **attrs):
    """A one-node model of `op`; `feeds` (name -> array, None for an absent optional input)
    are graph inputs in order, `inits` initializers."""
    inits = inits or {}
    names = [n if (a is not None or n in inits) else "" for n, a in feeds.items()]
    infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                           a.shape) for n, a in feeds.items() if a is not None]
    node = helper.make_node(op, names, list(outputs), name="the_node", **attrs)
    outs = [helper.make_value_info(n, onnx.TypeProto()) for n in outputs if n]
    tensors = [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()]
    graph = helper.make_graph([node], "g", infos, outs, tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(m, feeds):
    mod, params = from_onnx(m)
    ex = kiln.runtime.GraphExecutor(kiln.compile(mod, target="llvm", params=params))
    ex.run(**{n: a for n, a in feeds.items() if a is not None})
    return mod, [ex.get_output(k).numpy() for k in range(ex.get_num_outputs())]


def check(m, feeds, tol=None, refs=None):
    """Compile and run m; each output equals the reference's in dtype and shape, and in value
    within TOL of its dtype (or `tol`)."""
    mod, outs = run(m, feeds)
    if refs is None:
        refs = ReferenceEvaluator(m).run(None, {n: a for n, a in feeds.items() if a is not None})
    assert len(outs) == len(refs)
    for k, (out, ref) in enumerate(zip(outs, refs)):
        assert (out.dtype, out.shape) == (ref.dtype, ref.shape), f"output {k}"
        if ref.dtype.kind in "biu":
            np.testing.assert_array_equal(out, ref, err_msg=f"output {k}")
        else:
            rtol, atol = tol or TOL[str(ref.dtype)]
            np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, err_msg=f"output {k}")
    return mod


def op_names(mod):
    return {n.op.name for n in post_order(mod["main"]) if hasattr(getattr(n, "op", None), "name")}


# -- Attention -------------------------------------------------------------------------------

def test_attention_float64_3d_gqa_past_short_mask_causal_window():
    """3-d GQA (6 query heads on 2 kv heads) with a past cache, a float mask shorter than the
    keys (padded with -inf), is_causal and a left window; all four outputs (mode 2)."""
    feeds = {"Q": rand(2, 3, 6 * 4, dtype="float64"), "K": rand(2, 3, 2 * 4, dtype="float64"),
             "V": rand(2, 3, 2 * 5, dtype="float64"), "attn_mask": rand(3, 6, dtype="float64"),
             "past_key": rand(2, 2, 4, 4, dtype="float64"),
             "past_value": rand(2, 2, 4, 5, dtype="float64")}
    m = model("Attention", feeds, ("y", "present_key", "present_value", "qk"), q_num_heads=6,
              kv_num_heads=2, is_causal=1, left_window_size=3, qk_matmul_output_mode=2,
              softcap=2.5)
    check(m, feeds)


def test_attention_float16_nonpad_bool_mask_softcap_probabilities():
    """float16 with nonpad_kv_seqlen (a run-time input), a rank-3 bool mask, is_causal,
    softcap and the probabilities (mode 3) as output; one batch's first query sees no key."""
    mask = R.uniform(size=(2, 3, 6)) > 0.2
    feeds = {"Q": rand(2, 2, 3, 8, dtype="float16"), "K": rand(2, 1, 6, 8, dtype="float16"),
             "V": rand(2, 1, 6, 8, dtype="float16"), "attn_mask": mask, "past_key": None,
             "past_value": None, "nonpad_kv_seqlen": np.array([6, 2], np.int64)}
    m = model("Attention", feeds, ("y", "", "", "qk"), is_causal=1, softcap=1.5,
              qk_matmul_output_mode=3)
    mod = check(m, feeds)
    assert "nn.batch_matmul" in op_names(mod)


def test_attention_static_mask_folds_and_empty_row_is_zero():
    """A bool mask known at import folds with the causal frontier into one constant bias;
    a query that may attend no key gets a zero row, not NaN."""
    mask = np.ones((4, 5), bool)
    mask[2] = False
    feeds = {"Q": rand(1, 2, 4, 8), "K": rand(1, 2, 5, 8), "V": rand(1, 2, 5, 8)}
    m = model("Attention", {**feeds, "attn_mask": None}, inits={"attn_mask": mask},
              is_causal=1, opset=23)
    mod = check(m, feeds)
    names = op_names(mod)
    assert "logical_and" not in names and "less_equal" not in names and "max" not in names
    _, (y,) = run(m, feeds)
    assert np.all(y[0, :, 2] == 0)


def test_attention_mode0_with_softcap_gives_raw_scores():
    """qk_matmul_output_mode 0 is the scaled Q K^T before softcap, as the spec and its
    function body say (onnx's reference evaluator returns the softcapped scores here)."""
    feeds = {"Q": rand(1, 1, 3, 4), "K": rand(1, 1, 5, 4), "V": rand(1, 1, 5, 4)}
    m = model("Attention", feeds, ("y", "", "", "qk"), softcap=0.5, scale=0.3)
    _, (y, qk) = run(m, feeds)
    raw = 0.3 * feeds["Q"][0, 0].astype(np.float64) @ feeds["K"][0, 0].T
    np.testing.assert_allclose(qk[0, 0], raw, rtol=1e-5, atol=1e-6)
    ref_y = ReferenceEvaluator(m).run(None, feeds)[0]
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)


def test_attention_values_of_their_own_float_type():
    """V (type T2) may differ from Q and K (T1): Y has Q's type, present_value V's."""
    feeds = {"Q": rand(1, 2, 3, 4), "K": rand(1, 2, 3, 4), "V": rand(1, 2, 3, 5, dtype="float16"),
             "attn_mask": None, "past_key": rand(1, 2, 2, 4),
             "past_value": rand(1, 2, 2, 5, dtype="float16")}
    m = model("Attention", feeds, ("y", "present_key", "present_value"), is_causal=1)
    check(m, feeds)


ATTENTION_ERRORS = [
    ({"Q": (2, 3, 12), "K": (2, 3, 12), "V": (2, 3, 12)}, {}, "attribute 'q_num_heads'"),
    ({"Q": (2, 3, 12), "K": (2, 3, 12), "V": (2, 3, 12)}, {"q_num_heads": 5,
                                                          "kv_num_heads": 3},
     "hidden size 12 is not a multiple of 5 heads"),
    ({"Q": (1, 3, 2, 4), "K": (1, 2, 2, 4), "V": (1, 2, 2, 4)}, {},
     "q_num_heads 3 is not a multiple of kv_num_heads 2"),
    ({"Q": (1, 2, 2, 4), "K": (1, 2, 3, 4), "V": (1, 2, 3, 4), "attn_mask": (2, 4)}, {},
     "attn_mask covers 4 keys, more than the 3"),
    ({"Q": (1, 2, 2, 4), "K": (1, 2, 3, 4), "V": (1, 2, 3, 4), "attn_mask": None,
      "past_key": (1, 2, 1, 4)}, {}, "past_key and past_value must be given together"),
    ({"Q": (1, 2, 2, 4), "K": (1, 2, 3, 4), "V": (1, 2, 3, 4)}, {"qk_matmul_output_mode": 4},
     "qk_matmul_output_mode must be one of"),
    ({"Q": (1, 2, 2, 4), "K": (1, 2, 3, 4), "V": (1, 2, 3, 4)}, {"softcap": -1.0},
     "softcap must be non-negative"),
]


@pytest.mark.parametrize("shapes, attrs, message", ATTENTION_ERRORS)
def test_attention_errors_name_node_and_problem(shapes, attrs, message):
    feeds = {n: None if s is None else np.zeros(s, np.float32) for n, s in shapes.items()}
    with pytest.raises(FrontendError, match="the_node") as err:
        from_onnx(model("Attention", feeds, **attrs))
    assert message in str(err.value)


def test_attention_bfloat16_softmax_is_unsupported():
    feeds = {"Q": rand(1, 1, 2, 4), "K": rand(1, 1, 2, 4), "V": rand(1, 1, 2, 4)}
    with pytest.raises(UnsupportedOpsError, match="softmax_precision=16"):
        from_onnx(model("Attention", feeds, softmax_precision=16))


# -- RotaryEmbedding, TensorScatter, CausalConvWithState -------------------------------------

def test_rotary_float16_3d_partial_interleaved_with_known_positions():
    angles = np.arange(10)[:, None] * 0.3 / (1.0 + np.arange(3))
    feeds = {"input": rand(2, 4, 2 * 10, dtype="float16")}
    inits = {"cos_cache": np.cos(angles).astype("float16"),
             "sin_cache": np.sin(angles).astype("float16"),
             "position_ids": np.array([[0, 1, 2, 3], [5, 6, 7, 9]], np.int64)}
    m = model("RotaryEmbedding", {**feeds, **dict.fromkeys(inits)}, inits=inits, opset=23,
              num_heads=2, rotary_embedding_dim=6, interleaved=1)
    check(m, feeds)


@pytest.mark.parametrize("dtype, mode, axis, with_indices", [
    ("int32", "circular", 1, True), ("float32", "linear", -2, False)])
def test_tensor_scatter_dtypes_axes_and_wrap(dtype, mode, axis, with_indices):
    """Circular writes wrap past the end of the cache; without write_indices rows land at 0."""
    cache = (R.integers(-50, 50, size=(3, 5, 2, 4))).astype(dtype)
    update_shape = list(cache.shape)
    update_shape[axis] = 2 if axis == -2 else 3
    feeds = {"past_cache": cache, "update": (R.integers(-50, 50, size=update_shape)
                                             ).astype(dtype),
             "write_indices": np.array([0, 3, 4], np.int64) if with_indices else None}
    check(model("TensorScatter", feeds, opset=24, mode=mode, axis=axis), feeds)


def test_causal_conv_bias_state_silu_short_input():
    """An input shorter than the kernel: the present state still holds the last K - 1 steps
    of past state and input together."""
    feeds = {"input": rand(2, 3, 2), "weight": rand(3, 1, 4), "bias": rand(3),
             "past_state": rand(2, 3, 3)}
    check(model("CausalConvWithState", feeds, ("y", "state"), opset=27, activation="silu"),
          feeds)


# -- LinearAttention -------------------------------------------------------------------------

def test_linear_attention_gated_delta_gqa_past_scalar_beta():
    """GQA (4 query heads, 2 state heads), per-head decay, a beta shared by the heads and a
    past state; output and present state after 3 tokens."""
    feeds = {"query": rand(2, 3, 4 * 4), "key": rand(2, 3, 2 * 4) * 0.5,
             "value": rand(2, 3, 2 * 3), "past_state": rand(2, 2, 4, 3),
             "decay": -np.abs(rand(2, 3, 2)), "beta": np.abs(rand(2, 3, 1)) / 2}
    check(model("LinearAttention", feeds, ("y", "state"), opset=27, q_num_heads=4,
                kv_num_heads=2), feeds, tol=(1e-4, 1e-5))


LINEAR_ERRORS = [
    ({"update_rule": "gated"}, "update_rule 'gated' needs decay input"),
    ({"update_rule": "linear", "q_num_heads": 3}, "must be a positive multiple"),
    ({"update_rule": "sum"}, "update_rule must be one of"),
]


@pytest.mark.parametrize("attrs, message", LINEAR_ERRORS)
def test_linear_attention_errors(attrs, message):
    feeds = {n: np.zeros((1, 2, 8), np.float32) for n in ("query", "key", "value")}
    attrs = {"q_num_heads": 2, "kv_num_heads": 2, **attrs}
    with pytest.raises(FrontendError, match="the_node") as err:
        from_onnx(model("LinearAttention", feeds, ("y", "state"), opset=27, **attrs))
    assert message in str(err.value)


def test_long_linear_attention_prefill_is_unsupported():
    feeds = {n: np.zeros((1, 65, 8), np.float32) for n in ("query", "key", "value")}
    with pytest.raises(UnsupportedOpsError, match="65 tokens"):
        from_onnx(model("LinearAttention", feeds, ("y", "state"), opset=27, q_num_heads=2,
                        kv_num_heads=2, update_rule="linear"))


def test_misc_errors_name_node_and_problem():
    bad = [model("TensorScatter", {"past_cache": np.zeros((2, 4, 3), np.float32),
                                   "update": np.zeros((2, 4, 3), np.float32)},
                 opset=24, axis=0),
           model("RotaryEmbedding", {"input": np.zeros((1, 1, 2, 6), np.float32),
                                     "cos_cache": np.zeros((1, 2, 1), np.float32),
                                     "sin_cache": np.zeros((1, 2, 1), np.float32)},
                 opset=23, rotary_embedding_dim=3),
           model("CausalConvWithState", {"input": np.zeros((1, 2, 3), np.float32),
                                         "weight": np.zeros((2, 1, 2), np.float32)},
                 ("y", "s"), opset=27, activation="gelu")]
    messages = ["axis 0 must name a non-batch axis", "rotary_embedding_dim 3 must be even",
                "activation must be 'none', 'silu' or 'swish'"]
    for m, message in zip(bad, messages):
        with pytest.raises(FrontendError, match="the_node") as err:
            from_onnx(m)
        assert message in str(err.value)

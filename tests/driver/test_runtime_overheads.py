"""Run-time overheads: reshapes that cost no kernel (views of their input's bytes) and the
fusion of injective producers into row-wise anchors (softmax, layer_norm).

Numeric results are compared with numpy at rtol = atol = 1e-5 (float32; only summation order,
exp and division round differently), 1e-4 for layer_norm (a variance of 32 values).
Kernel names are matched loosely where the dense pass (weight pre-packing) may rename them.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import kiln
from kiln.driver.compile import is_view_only
from kiln.graph import Function, IRModule, call, const, var
from kiln.graph.transform import PassContext
from kiln.runtime import GraphExecutor, load_module

TOL = dict(rtol=1e-5, atol=1e-5)


def _compile(body_fn, inputs, params=None, opt_level=3):
    mod = IRModule.from_expr(Function(inputs, body_fn))
    with PassContext(opt_level=opt_level):
        return kiln.compile(mod, params=params)


def _kernel_names(lib):
    return [k["func"].rsplit("_", 1)[0] for k in lib.graph["kernels"]]


def _views(lib):
    return [k for k, e in enumerate(lib.graph["entries"]) if e.get("view_of") is not None]


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_reshape_between_denses_is_a_view_not_a_kernel():
    # dense -> reshape -> dense: the reshape fuses with neither anchor, so it is a group of
    # its own, which needs no kernel.
    x = var("x", (2, 6))
    w1, w2 = var("w1", (12, 6)), var("w2", (5, 6))
    h = call("nn.relu", call("nn.dense", x, w1))
    y = call("nn.dense", call("reshape", h, newshape=(4, 6)), w2)
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((12, 6)).astype("float32"),
              "w2": rng.standard_normal((5, 6)).astype("float32")}
    lib = _compile(y, [x, w1, w2], params)
    names = _kernel_names(lib)
    assert len(names) == 2 and all("dense" in n for n in names) and "relu" in names[0]
    (view,) = _views(lib)
    entries = lib.graph["entries"]
    assert entries[view]["shape"] == [4, 6]
    assert entries[view]["storage"] == entries[entries[view]["view_of"]]["storage"] >= 0
    m = GraphExecutor(lib)
    # The view shares the bytes of the dense output it reshapes.
    arrays = m._buffers().arrays
    assert np.shares_memory(arrays[view], arrays[entries[view]["view_of"]])
    xv = rng.standard_normal((2, 6)).astype("float32")
    m.run(x=xv)
    ref = np.maximum(xv @ params["w1"].T, 0).reshape(4, 6) @ params["w2"].T
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, **TOL)


def test_view_only_detection():
    x = var("x", (2, 3))
    chain = call("expand_dims", call("squeeze", call("reshape", x, newshape=(1, 6)), axis=[0]),
                 axis=1)
    assert is_view_only(Function([x], chain))
    assert not is_view_only(Function([x], call("transpose", x)))
    assert not is_view_only(Function([x], call("reshape", call("nn.relu", x), newshape=(6,))))
    assert not is_view_only(Function([x], x))


def test_model_without_kernels_views_its_input_and_exports(tmp_path):
    # At opt_level 0 nothing is simplified away: reshape -> expand_dims of an input is a view
    # of the input's own array, and the model has no kernels at all.
    x = var("x", (2, 6))
    y = call("expand_dims", call("reshape", x, newshape=(3, 4)), axis=0)
    lib = _compile(y, [x], opt_level=0)
    assert lib.graph["kernels"] == []
    xv = np.arange(12, dtype="float32").reshape(2, 6)
    m = GraphExecutor(lib)
    for value in (xv, -xv):          # set_input writes in place, so the view follows it
        m.run(x=value)
        np.testing.assert_array_equal(m.get_output(0).numpy(), value.reshape(1, 3, 4))
    path = tmp_path / "views.so"
    lib.export_library(str(path))
    m2 = GraphExecutor(load_module(path))
    m2.run(x=xv)
    np.testing.assert_array_equal(m2.get_output(0).numpy(), xv.reshape(1, 3, 4))


def test_view_keeps_its_storage_alive_until_its_last_reader():
    # a is read only through its view v (two readers, so v fuses with neither). Were a's
    # storage released after its producer (a has no direct reader), kernel 1 would write p
    # over the bytes it reads through v.
    x = var("x", (4, 6))
    w, w4 = var("w", (6, 6)), var("w4", (4, 4))
    a = call("nn.dense", x, w)                              # kernel 0
    v = call("reshape", a, newshape=(6, 4))                 # view of a
    p = call("nn.relu", call("nn.dense", v, w4))            # kernel 1
    e = call("add", call("nn.dense", p, w4), v)             # kernel 2, reads v again
    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((6, 6)).astype("float32"),
              "w4": rng.standard_normal((4, 4)).astype("float32")}
    lib = _compile(e, [x, w, w4], params)
    assert len(lib.graph["kernels"]) == 3 and len(_views(lib)) == 1
    entries = lib.graph["entries"]
    kernel_outs = [k["outputs"][0] for k in lib.graph["kernels"]]
    assert len({entries[o]["storage"] for o in kernel_outs}) == 3
    m = GraphExecutor(lib)
    xv = rng.standard_normal((4, 6)).astype("float32")
    m.run(x=xv)
    v_ref = (xv @ params["w"].T).reshape(6, 4)
    ref = np.maximum(v_ref @ params["w4"].T, 0) @ params["w4"].T + v_ref
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, **TOL)


def test_output_that_is_a_view_keeps_its_own_storage():
    x = var("x", (3, 8))
    w, w2 = var("w", (8, 8)), var("w2", (8, 8))
    out1 = call("reshape", call("nn.dense", x, w), newshape=(24,))   # output: a view
    out2 = call("nn.dense", call("nn.dense", x, w2), w)  # must not reuse the viewed bytes
    rng = np.random.default_rng(2)
    params = {"w": rng.standard_normal((8, 8)).astype("float32"),
              "w2": rng.standard_normal((8, 8)).astype("float32")}
    with PassContext(opt_level=3, disabled_pass=["CombineParallelDense"]):
        lib = kiln.compile(IRModule.from_expr(Function([x, w, w2], kiln.graph.Tuple([out1, out2]))),
                           params=params)
    entries, (o1, _o2) = lib.graph["entries"], lib.graph["outputs"]
    assert entries[o1].get("view_of") is not None
    others = {entries[k["outputs"][0]]["storage"] for k in lib.graph["kernels"][1:]}
    assert entries[o1]["storage"] not in others
    m = GraphExecutor(lib)
    xv = rng.standard_normal((3, 8)).astype("float32")
    m.run(x=xv)
    np.testing.assert_allclose(m.get_output(0).numpy(), (xv @ params["w"].T).reshape(24), **TOL)
    np.testing.assert_allclose(m.get_output(1).numpy(), xv @ params["w2"].T @ params["w"].T, **TOL)


def test_executor_rejects_a_view_of_a_later_entry():
    x = var("x", (2, 6))
    lib = _compile(call("reshape", x, newshape=(3, 4)), [x], opt_level=0)
    view = _views(lib)[0]
    lib.graph["entries"][view]["view_of"] = view + 5
    with pytest.raises(kiln.runtime.model.ModelError, match=f"entry {view} is a view of entry"):
        GraphExecutor(lib)


SHAPES = [(4, 6), (6, 4), (24,), (2, 3, 4), (1, 24)]


@st.composite
def programs(draw):
    """Random graphs over 24-element tensors: relu / add / dense-free kernels and reshapes,
    with values used several times so that views get several readers."""
    kinds = st.sampled_from(["relu", "add", "reshape", "reshape", "exp_neg"])
    steps = draw(st.lists(st.tuples(kinds, st.integers(0, 100), st.integers(0, 100),
                                    st.sampled_from(SHAPES)), min_size=3, max_size=9))
    outs = draw(st.lists(st.integers(0, 100), max_size=1))
    return steps, [-1] + outs           # the last node, maybe one more


def _build(steps, outs):
    x = var("x", (4, 6))
    nodes, refs = [x], [lambda xv: xv]
    for kind, i, j, shape in steps:
        a, ra = nodes[i % len(nodes)], refs[i % len(refs)]
        if kind == "relu":
            nodes.append(call("nn.relu", a)); refs.append(lambda xv, ra=ra: np.maximum(ra(xv), 0))
        elif kind == "exp_neg":
            nodes.append(call("exp", call("negative", a)))
            refs.append(lambda xv, ra=ra: np.exp(-ra(xv)))
        elif kind == "reshape":
            nodes.append(call("reshape", a, newshape=shape))
            refs.append(lambda xv, ra=ra, shape=shape: ra(xv).reshape(shape))
        else:
            b, rb = nodes[j % len(nodes)], refs[j % len(refs)]
            shape_a = tuple(int(d) for d in a.checked_type.shape)
            b = call("reshape", b, newshape=shape_a)
            nodes.append(call("add", a, b))
            refs.append(lambda xv, ra=ra, rb=rb: ra(xv) + rb(xv).reshape(ra(xv).shape))
    picked = [len(nodes) - 1 if k < 0 else k % (len(nodes) - 1) + 1 for k in outs]
    body = nodes[picked[0]] if len(picked) == 1 else kiln.graph.Tuple([nodes[k] for k in picked])
    return x, body, [refs[k] for k in picked]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from([0, 3]))
# relu -> view -> negative, exp -> add(exp, view): the view is read after two kernels that
# could take its bytes if they were freed after relu.
@example(([("relu", 0, 0, (4, 6)), ("reshape", 1, 0, (24,)), ("exp_neg", 2, 0, (4, 6)),
           ("add", 3, 2, (4, 6))], [-1]), 0)
def test_random_graphs_with_views_match_numpy(program, opt_level):
    x, body, refs = _build(*program)
    lib = _compile(body, [x], opt_level=opt_level)
    m = GraphExecutor(lib)
    xv = np.random.default_rng(3).standard_normal((4, 6)).astype("float32")
    for _ in range(2):               # a second run must see the same buffers in the same state
        m.run(x=xv)
        for k, ref in enumerate(refs):
            np.testing.assert_allclose(m.get_output(k).numpy(), ref(xv), **TOL)


def test_reshape_and_scale_fuse_into_softmax():
    # BERT's attention scores: batch_matmul output [heads, S, S] -> reshape [1, heads, S, S]
    # -> divide by sqrt(d) -> softmax: one kernel after the matmul, not two.
    q = var("q", (4, 8, 16))
    k = var("k", (4, 8, 16))
    scores = call("nn.batch_matmul", q, k, transpose_b=True)
    scaled = call("divide", call("reshape", scores, newshape=(1, 4, 8, 8)),
                  const(np.float32(4.0)))
    y = call("nn.softmax", scaled, axis=-1)
    lib = _compile(y, [q, k])
    names = _kernel_names(lib)
    assert names == ["fused_nn_batch_matmul", "fused_reshape_divide_nn_softmax"]
    rng = np.random.default_rng(4)
    qv, kv = (rng.standard_normal((4, 8, 16)).astype("float32") for _ in range(2))
    m = GraphExecutor(lib)
    m.run(q=qv, k=kv)
    ref = _softmax((qv @ kv.transpose(0, 2, 1)).reshape(1, 4, 8, 8) / 4.0)
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, **TOL)


def test_embedding_adds_fuse_into_layer_norm():
    x = var("x", (16, 32))
    pos = var("pos", (16, 32))
    gamma, beta = var("gamma", (32,)), var("beta", (32,))
    y = call("nn.layer_norm", call("add", call("nn.relu", x), pos), gamma, beta, epsilon=1e-5)
    rng = np.random.default_rng(5)
    params = {"pos": rng.standard_normal((16, 32)).astype("float32"),
              "gamma": rng.standard_normal(32).astype("float32"),
              "beta": rng.standard_normal(32).astype("float32")}
    lib = _compile(y, [x, pos, gamma, beta], params)
    assert _kernel_names(lib) == ["fused_nn_relu_add_nn_layer_norm"]
    xv = rng.standard_normal((16, 32)).astype("float32")
    m = GraphExecutor(lib)
    m.run(x=xv)
    h = np.maximum(xv, 0) + params["pos"]
    mu, var_ = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    ref = (h - mu) / np.sqrt(var_ + 1e-5) * params["gamma"] + params["beta"]
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, rtol=1e-4, atol=1e-4)


def test_dense_does_not_absorb_injective_producers():
    # Only row-wise anchors inline their producers; dense's schedule does not.
    x = var("x", (6, 4))
    w = var("w", (5, 6))
    y = call("nn.dense", call("transpose", x), w)
    lib = _compile(y, [x, w], {"w": np.ones((5, 6), "float32")})
    names = _kernel_names(lib)
    assert len(names) == 2 and names[0] == "fused_transpose" and "dense" in names[1]

"""ConvertConvLayout (NCHW convolutions → blocked NCHW{b}c with packed weights) and the ops
it introduces: the converted graph must compute what the original does (compiled with kiln,
anchored to torch), with layout transforms only at the boundaries.

Tolerance: float32, inputs in [-1, 1), reductions of ≤ 600 terms: rtol 1e-4, atol 1e-4.
Where a Winograd convolution is in the chain, its error is bounded relative to the output's
magnitude, not per element (see tests/topi/test_winograd.py): atol 1e-5 * max|ref| (measured
up to 4.1e-6 * max|ref| against float64 over six seeds of the grouped 64-per-group case).
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln.graph import (Function, GraphTypeError, IRModule, Tuple, call, const, post_order,
                        var)
from kiln.graph.transform.convert_conv_layout import ConvertConvLayout, convert_conv_layout
from kiln.runtime import GraphExecutor
from kiln.target import Target
from pinned_targets import AVX512

RTOL = ATOL = 1e-4
WINOGRAD_TOL = 1e-5
rng = np.random.default_rng(7)


def _rand(*shape):
    return rng.uniform(-1, 1, size=shape).astype("float32")


def _ops(expr):
    return [e.op.name for e in post_order(expr) if hasattr(e, "op") and hasattr(e.op, "name")]


def _run(func, x):
    lib = kiln.compile(IRModule.from_expr(func))
    m = GraphExecutor(lib)
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def _net():
    """conv-bias-relu, conv-bias + residual add (from an NCHW max_pool) - relu, depthwise conv
    - clip, 1x1 conv with a per-channel scale, then an adaptive (global) pool; both pools run
    blocked."""
    w1, b1 = _rand(32, 8, 3, 3), _rand(32)
    w2, b2 = _rand(32, 32, 3, 3), _rand(32)
    wd, bd = _rand(32, 1, 3, 3), _rand(32)
    w3, s3 = _rand(24, 32, 1, 1), _rand(24, 1, 1)
    x = var("x", (1, 8, 18, 20))
    y = call("nn.relu", call("nn.bias_add", call("nn.conv2d", x, const(w1), padding=(1, 1)),
                             const(b1)))
    p = call("nn.max_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1))
    z = call("nn.bias_add", call("nn.conv2d", p, const(w2), padding=(1, 1)), const(b2))
    r = call("nn.relu", call("add", z, p))
    d = call("clip", call("nn.bias_add", call("nn.conv2d", r, const(wd), padding=(1, 1),
                                              strides=(2, 2), groups=32), const(bd)),
             a_min=0.0, a_max=6.0)
    o = call("multiply", call("nn.conv2d", d, const(w3)), const(s3))
    out = call("nn.adaptive_avg_pool2d", o, output_size=(1, 1))
    func = Function([x], out)

    def reference(xa):
        t = torch.from_numpy
        y = F.relu(F.conv2d(t(xa), t(w1), t(b1), padding=1))
        p = F.max_pool2d(y, 3, 2, 1)
        r = F.relu(F.conv2d(p, t(w2), t(b2), padding=1) + p)
        d = torch.clamp(F.conv2d(r, t(wd), t(bd), stride=2, padding=1, groups=32), 0, 6)
        o = F.conv2d(d, t(w3)) * t(s3)
        return o.mean(dim=(2, 3), keepdim=True).numpy()
    return func, reference


def test_converted_net_matches_torch(avx512):
    func, reference = _net()
    new = convert_conv_layout(func)           # blocks of 16 lanes where they fit
    ops = _ops(new.body)
    assert ops.count("nn.contrib_conv2d_nchwc") == 4 and "nn.conv2d" not in ops
    # Boundaries only: in, and out after the pool (the pools keep the blocked layout).
    assert ops.count("layout_transform") == 2
    pools = [e for e in post_order(new.body) if getattr(getattr(e, "op", None), "name", "")
             in ("nn.max_pool2d", "nn.adaptive_avg_pool2d")]
    assert [p.attrs.layout for p in pools] == ["NCHW16c", "NCHW8c"]  # 32 and 24 channels
    x = _rand(1, 8, 18, 20)
    ref = reference(x)
    np.testing.assert_allclose(_run(new, x), ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(_run(func, x), ref, rtol=RTOL, atol=ATOL)


def test_pass_object_and_untouched_cases():
    x, w = var("x", (1, 4, 6, 6)), var("w", (8, 4, 3, 3))
    # A weight that is an input (a training step's) is packed by ops in the graph, each run.
    dynamic_weight = Function([x, w], call("nn.conv2d", x, w, padding=(1, 1, 1, 1)))
    converted = convert_conv_layout(dynamic_weight)
    assert {"nn.contrib_conv2d_nchwc", "transpose"} <= set(_ops(converted.body))
    lib = kiln.compile(IRModule.from_expr(dynamic_weight))
    xs, ws = _rand(1, 4, 6, 6), _rand(8, 4, 3, 3)
    m = kiln.runtime.GraphExecutor(lib)
    m.run(x=xs, w=ws)
    want = torch.nn.functional.conv2d(torch.tensor(xs), torch.tensor(ws), padding=1).numpy()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)
    q, k = var("q", (1, 4, 6, 6), "uint8"), var("k", (8, 4, 3, 3), "int8")
    integer = Function([q, k], call("nn.conv2d", q, k, out_dtype="int32"))
    assert convert_conv_layout(integer) is integer         # integer weights: constants only
    mod = IRModule.from_expr(Function([x], call("nn.conv2d", x, const(_rand(8, 4, 3, 3)))))
    from kiln.graph.transform import PassContext
    with PassContext(opt_level=3):
        out = ConvertConvLayout()(mod)
    assert "nn.contrib_conv2d_nchwc" in _ops(out["main"].body)


# (channels in, out, groups, kernel, stride, padding, size): channels per group 2-64, blocks
# inside groups of 2, 4, 8 or the target's lanes.
GROUPED = [
    (16, 32, 2, 3, 1, 1, 9),        # 8 -> 16 per group
    (128, 128, 2, 3, 1, 1, 14),     # 64 per group: several blocks a group (Winograd)
    (240, 60, 3, 1, 1, 0, 6),       # ShuffleNet-v1 1x1: 80 -> 20 (blocks of 4 out)
    (64, 64, 32, 3, 1, 1, 8),       # ResNeXt: 2 per group
    (48, 96, 4, 3, 2, 1, 11),       # strided, 12 -> 24 per group
    (40, 40, 5, 5, 1, 2, 10),       # 8 per group, 5x5
]


@pytest.mark.parametrize("cin,cout,groups,k,stride,pad,size", GROUPED)
def test_grouped_convs_run_blocked_and_match_torch(cin, cout, groups, k, stride, pad, size):
    """A grouped convolution (1 < groups < channels) moves to the blocked layout with its
    channel blocks inside groups, between blocked neighbours, and computes what torch does."""
    w0, w1, b1 = _rand(cin, 3, 3, 3), _rand(cout, cin // groups, k, k), _rand(cout)
    w2 = _rand(16, cout, 1, 1)
    x = var("x", (1, 3, size, size))
    y0 = call("nn.relu", call("nn.conv2d", x, const(w0), padding=(1, 1)))
    y1 = call("nn.relu", call("nn.bias_add", call("nn.conv2d", y0, const(w1), strides=(stride,
                                                   stride), padding=(pad, pad), groups=groups),
                              const(b1)))
    func = Function([x], call("nn.conv2d", y1, const(w2)))
    new = convert_conv_layout(func)
    ops = _ops(new.body)
    assert "nn.conv2d" not in ops
    blocked_ops = ("nn.contrib_conv2d_nchwc", "nn.contrib_conv2d_winograd_nchwc")
    grouped = [e for e in post_order(new.body)
               if getattr(getattr(e, "op", None), "name", "") in blocked_ops
               and e.attrs.groups == groups]
    if k == 1 and (cout // groups) % 8:
        # Narrow blocks (fewer than 8 lanes): a 1x1 is one matrix product per group instead.
        assert grouped == [] and ops.count("nn.batch_matmul") == 1
        (mm,) = [e for e in post_order(new.body)
                 if getattr(getattr(e, "op", None), "name", "") == "nn.batch_matmul"]
        assert mm.args[0].checked_type.shape == (groups, cout // groups, cin // groups)
    else:
        assert len(grouped) == 1 and sum(ops.count(op) for op in blocked_ops) == 3
        _, _, _, _, ic = grouped[0].args[0].checked_type.shape
        *_, oc = grouped[0].checked_type.shape
        assert (cin // groups) % ic == 0 and (cout // groups) % oc == 0
    xa = _rand(1, 3, size, size)
    t = torch.from_numpy
    r = F.relu(F.conv2d(t(xa), t(w0), padding=1))
    r = F.relu(F.conv2d(r, t(w1), t(b1), stride=stride, padding=pad, groups=groups))
    ref = F.conv2d(r, t(w2)).numpy()
    atol = ATOL
    if "nn.contrib_conv2d_winograd_nchwc" in ops:
        atol = max(ATOL, WINOGRAD_TOL * float(np.abs(ref).max()))
    np.testing.assert_allclose(_run(new, xa), ref, rtol=RTOL, atol=atol)


def test_a_conv_reads_a_narrower_blocked_input_as_it_is():
    """ResNeXt's stage 1: 1x1 -> 3x3 with 4 channels a group (blocks of 4) -> 1x1. The last
    conv reads the grouped conv's 4-channel blocks directly (no layout_transform between
    them) and still writes full vector blocks; the result is torch's."""
    w1, w2, w3 = _rand(32, 16, 1, 1), _rand(32, 4, 3, 3), _rand(64, 32, 1, 1)
    x = var("x", (1, 16, 9, 9))
    y1 = call("nn.relu", call("nn.conv2d", x, const(w1)))
    y2 = call("nn.relu", call("nn.conv2d", y1, const(w2), padding=(1, 1), groups=8))
    func = Function([x], call("nn.relu", call("nn.conv2d", y2, const(w3))))
    new = convert_conv_layout(func)
    convs = [e for e in post_order(new.body)
             if getattr(getattr(e, "op", None), "name", "") == "nn.contrib_conv2d_nchwc"]
    assert [c.attrs.groups for c in convs] == [1, 8, 1]
    assert convs[1].checked_type.shape[-1] == 4 and convs[2].args[0].args[0] is convs[1]
    assert convs[2].args[1].data.shape[4] == 4 and convs[2].checked_type.shape[-1] >= 8
    assert _ops(new.body).count("layout_transform") == 3     # in, 8 -> 4, out
    xa = _rand(1, 16, 9, 9)
    t = torch.from_numpy
    r = F.relu(F.conv2d(F.relu(F.conv2d(t(xa), t(w1))), t(w2), padding=1, groups=8))
    np.testing.assert_allclose(_run(new, xa), F.relu(F.conv2d(r, t(w3))).numpy(), rtol=RTOL,
                               atol=ATOL)


@pytest.mark.parametrize("n", [1, 2])
def test_grouped_1x1_runs_as_a_product_per_group_with_its_epilogue(n):
    """A grouped 1x1 of an NCHW input feeding no conv: one batch_matmul over N x G batches
    (the weight repeated per image), its bias_add and per-channel scale in the flat layout."""
    w, b, scale = _rand(60, 80, 1, 1), _rand(60), _rand(60, 1, 1)
    x = var("x", (n, 240, 4, 6))
    y = call("nn.relu", call("multiply", call("nn.bias_add", call(
        "nn.conv2d", x, const(w), groups=3), const(b)), const(scale)))
    func = Function([x], y)
    new = convert_conv_layout(func)
    ops = _ops(new.body)
    assert "nn.conv2d" not in ops and "layout_transform" not in ops
    (mm,) = [e for e in post_order(new.body)
             if getattr(getattr(e, "op", None), "name", "") == "nn.batch_matmul"]
    assert mm.checked_type.shape == (n * 3, 20, 24)
    xa = _rand(n, 240, 4, 6)
    t = torch.from_numpy
    ref = F.relu(F.conv2d(t(xa), t(w), t(b), groups=3) * t(scale)).numpy()
    np.testing.assert_allclose(_run(new, xa), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("size,target,product", [(14, AVX512, True), (7, AVX512, False),
                                                  (14, "llvm -mcpu=haswell", False)])
def test_half_vector_1x1_blocks_are_products_on_wide_rows(size, target, product):
    """A grouped 1x1 with 24 outputs per group between convolutions: 8-lane blocks, half an
    AVX-512 vector, run as one product per group once the output has 8 vectors of pixels
    (14x14: 196), blocked below that (7x7) and on AVX2, where 8 lanes are a whole vector."""
    w0, w1, w2 = _rand(96, 3, 3, 3), _rand(96, 24, 1, 1), _rand(16, 96, 1, 1)
    x = var("x", (1, 3, size, size))
    y0 = call("nn.relu", call("nn.conv2d", x, const(w0), padding=(1, 1)))
    y1 = call("nn.relu", call("nn.conv2d", y0, const(w1), groups=4))
    func = Function([x], call("nn.conv2d", y1, const(w2)))
    with Target(target):
        new = convert_conv_layout(func)
    assert ("nn.batch_matmul" in _ops(new.body)) == product
    xa = _rand(1, 3, size, size)
    t = torch.from_numpy
    r = F.relu(F.conv2d(F.relu(F.conv2d(t(xa), t(w0), padding=1)), t(w1), groups=4))
    np.testing.assert_allclose(_run(new, xa), F.conv2d(r, t(w2)).numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("src,dst", [("NCHW", "NCHW8c"), ("NCHW16c", "NCHW4c"),
                                     ("NCHW4c", "NCHW")])
def test_layout_transform_op(src, dst):
    from kiln.topi.nn.conv2d_nchwc import nchw_to_nchwc, nchwc_to_nchw, parse_channel_layout
    base = _rand(1, 16, 3, 5)
    sb, db = parse_channel_layout(src), parse_channel_layout(dst)
    xin = nchw_to_nchwc(base, sb) if sb else base
    x = var("x", xin.shape)
    got = _run(Function([x], call("layout_transform", x, src_layout=src, dst_layout=dst)), xin)
    want = nchw_to_nchwc(base, db) if db else base
    np.testing.assert_array_equal(got, want)
    assert (nchwc_to_nchw(got) if db else got).shape == base.shape


def test_type_errors_name_the_problem():
    x = var("x", (1, 2, 5, 5, 16))
    with pytest.raises(GraphTypeError, match="input blocks"):
        call("nn.contrib_conv2d_nchwc", x, const(np.zeros((1, 4, 3, 3, 8, 16), "float32")))
    with pytest.raises(GraphTypeError, match=r"input blocks per group \(4 groups\)"):
        call("nn.contrib_conv2d_nchwc", x, const(np.zeros((1, 1, 3, 3, 1, 16), "float32")),
             groups=4)
    with pytest.raises(GraphTypeError, match="and 1 output blocks"):     # 1 block, 2 groups
        call("nn.contrib_conv2d_nchwc", x, const(np.zeros((1, 1, 3, 3, 16, 16), "float32")),
             groups=2)
    with pytest.raises(GraphTypeError, match="do not split"):
        call("layout_transform", var("y", (1, 20, 4, 4)), src_layout="NCHW",
             dst_layout="NCHW16c")
    with pytest.raises(GraphTypeError, match="NCHW<b>c"):
        call("layout_transform", var("y", (1, 20, 4, 4)), src_layout="NCHW",
             dst_layout="NHWC")


def test_tuple_outputs_get_nchw():
    """A tuple of a blocked value and its use: both fields come back in NCHW."""
    from kiln.graph import Tuple, TupleGetItem
    w = _rand(16, 4, 3, 3)
    x = var("x", (1, 4, 7, 9))
    y = call("nn.relu", call("nn.conv2d", x, const(w), padding=(1, 1)))
    t = Tuple([y, call("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2))])
    func = Function([x], TupleGetItem(t, 0))
    new = convert_conv_layout(func)
    assert new.body.checked_type.shape == (1, 16, 7, 9)
    assert "nn.contrib_conv2d_nchwc" in _ops(new.body)
    xa = _rand(1, 4, 7, 9)
    ref = F.relu(F.conv2d(torch.from_numpy(xa), torch.from_numpy(w), padding=1)).numpy()
    np.testing.assert_allclose(_run(new, xa), ref, rtol=RTOL, atol=ATOL)


_POOL_CASES = [
    ("nn.max_pool2d", dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1)),
     lambda t: F.max_pool2d(t, 3, 2, 1)),
    ("nn.max_pool2d", dict(pool_size=(2, 3), strides=(2, 2), ceil_mode=True, dilation=(1, 2)),
     lambda t: F.max_pool2d(t, (2, 3), 2, 0, dilation=(1, 2), ceil_mode=True)),
    ("nn.avg_pool2d", dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1), ceil_mode=True,
                           count_include_pad=False),
     lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
    ("nn.avg_pool2d", dict(pool_size=(3, 3), strides=(1, 1), padding=(1, 1),
                           count_include_pad=True),
     lambda t: F.avg_pool2d(t, 3, 1, 1, count_include_pad=True)),
    ("nn.global_avg_pool2d", {}, lambda t: t.mean(dim=(2, 3), keepdim=True)),
    ("nn.global_max_pool2d", {}, lambda t: t.amax(dim=(2, 3), keepdim=True)),
    ("nn.adaptive_avg_pool2d", dict(output_size=(2, 3)), lambda t: F.adaptive_avg_pool2d(t, (2, 3))),
]


@pytest.mark.parametrize("name,attrs,reference", _POOL_CASES)
def test_blocked_pool_ops_match_torch(name, attrs, reference):
    """Each pool with layout NCHW16c on blocked data equals torch's NCHW pool, blocked."""
    from kiln.topi.nn.conv2d_nchwc import nchw_to_nchwc, nchwc_to_nchw
    base = _rand(1, 32, 9, 11)
    xb = nchw_to_nchwc(base, 16)
    x = var("x", xb.shape)
    y = call(name, x, layout="NCHW16c", **attrs)
    want = reference(torch.from_numpy(base)).numpy()
    assert y.checked_type.shape == nchw_to_nchwc(want, 16).shape
    got = _run(Function([x], y), xb)
    np.testing.assert_allclose(nchwc_to_nchw(got), want, rtol=RTOL, atol=ATOL)


def test_blocked_pool_type_errors():
    with pytest.raises(GraphTypeError, match="5-d NCHW16c"):
        call("nn.max_pool2d", var("y", (1, 16, 4, 4)), pool_size=(2, 2), layout="NCHW16c")
    with pytest.raises(GraphTypeError, match="last axis 16"):
        call("nn.global_avg_pool2d", var("y", (1, 2, 4, 4, 8)), layout="NCHW16c")
    with pytest.raises(GraphTypeError, match="layout must be"):
        call("nn.avg_pool2d", var("y", (1, 16, 4, 4)), pool_size=(2, 2), layout="NHWC")


def test_pool_after_conv_stays_blocked_and_matches_torch():
    """conv - relu - avg_pool (ceil, excluding padding) - global max: one transform in, one
    out, nothing around the pools."""
    w = _rand(16, 4, 3, 3)
    x = var("x", (1, 4, 11, 13))
    y = call("nn.relu", call("nn.conv2d", x, const(w), padding=(1, 1)))
    p = call("nn.avg_pool2d", y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1),
             ceil_mode=True, count_include_pad=False)
    func = Function([x], call("nn.global_max_pool2d", p))
    new = convert_conv_layout(func)
    assert _ops(new.body).count("layout_transform") == 2
    assert new.body.checked_type.shape == (1, 16, 1, 1)
    xa = _rand(1, 4, 11, 13)
    t = F.relu(F.conv2d(torch.from_numpy(xa), torch.from_numpy(w), padding=1))
    ref = F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False).amax(
        dim=(2, 3), keepdim=True).numpy()
    np.testing.assert_allclose(_run(new, xa), ref, rtol=RTOL, atol=ATOL)


def test_lone_depthwise_stays_nchw_and_blocked_input_blocks_it():
    # Alone between NCHW tensors a depthwise conv runs in NCHW (no transforms around a
    # memory-bound op); after a blocked conv it runs blocked, with no transform in between.
    wd = _rand(32, 1, 3, 3)
    x = var("x", (1, 32, 12, 12))
    lone = Function([x], call("nn.relu", call("nn.conv2d", x, const(wd), padding=(1, 1),
                                              groups=32)))
    assert convert_conv_layout(lone) is lone
    w1 = _rand(32, 32, 1, 1)
    chained = Function([x], call("nn.conv2d", call("nn.conv2d", x, const(w1)), const(wd),
                                 padding=(1, 1), groups=32))
    ops = _ops(convert_conv_layout(chained).body)
    assert ops.count("nn.contrib_conv2d_nchwc") == 2 and ops.count("layout_transform") == 2
    xa = _rand(1, 32, 12, 12)
    t = torch.from_numpy
    ref = F.conv2d(F.conv2d(t(xa), t(w1)), t(wd), padding=1, groups=32).numpy()
    np.testing.assert_allclose(_run(convert_conv_layout(chained), xa), ref, rtol=RTOL, atol=ATOL)
    ref_lone = F.relu(F.conv2d(t(xa), t(wd), padding=1, groups=32)).numpy()
    np.testing.assert_allclose(_run(lone, xa), ref_lone, rtol=RTOL, atol=ATOL)


def test_winograd_chosen_for_3x3_stride1_unless_configured_off(avx512):
    from kiln.graph.transform import PassContext
    w = _rand(64, 64, 3, 3) * 0.1
    x = var("x", (1, 64, 14, 14))
    func = Function([x], call("nn.relu", call("nn.conv2d", x, const(w), padding=(1, 1))))
    strided = Function([x], call("nn.conv2d", x, const(w), padding=(1, 1), strides=(2, 2)))
    winograd = convert_conv_layout(func)
    assert "nn.contrib_conv2d_winograd_nchwc" in _ops(winograd.body)
    with Target("llvm -mcpu=haswell"):        # chosen where it was measured: AVX-512, AVX2
        assert "nn.contrib_conv2d_winograd_nchwc" in _ops(convert_conv_layout(func).body)
    with Target("llvm -mcpu=x86-64"):         # SSE2: not measured
        assert "nn.contrib_conv2d_winograd_nchwc" not in _ops(convert_conv_layout(func).body)
    assert "nn.contrib_conv2d_winograd_nchwc" not in _ops(convert_conv_layout(strided).body)
    with PassContext(opt_level=3, config={"ConvertConvLayout.winograd": False}):
        assert "nn.contrib_conv2d_winograd_nchwc" not in _ops(convert_conv_layout(func).body)
    xa = _rand(1, 64, 14, 14)
    t = torch.from_numpy
    ref = F.relu(F.conv2d(t(xa), t(w), padding=1)).numpy()
    # Winograd F(4x4, 3x3) rounds differently from a direct sum: errors ~1e-5 of max|ref|.
    np.testing.assert_allclose(_run(winograd, xa), ref, rtol=0, atol=5e-5 * np.abs(ref).max())


def _primitive_names(func):
    from kiln.driver.stages import module_at_stage
    fused = module_at_stage(IRModule.from_expr(func), "fused")
    return [e.attrs["Name"] for e in post_order(fused["main"].body)
            if isinstance(e, Function) and e.attrs and "Name" in e.attrs]


@pytest.mark.parametrize("stride", [1, 2])
def test_lone_1x1_conv_is_a_matmul_with_its_epilogue_fused(stride):
    # batch 2 (the weight broadcasts over it); bias, a residual from an NCHW tensor, a
    # per-channel scale and relu stay in the flat layout; the pool after it gets a reshape.
    w, b, s = _rand(48, 24, 1, 1), _rand(48), _rand(1, 48, 1, 1)
    x = var("x", (2, 24, 16, 16))
    r = var("r", (2, 48, 16 // stride, 16 // stride))
    y = call("nn.relu", call("multiply", call("add", call("nn.bias_add", call(
        "nn.conv2d", x, const(w), strides=(stride, stride)), const(b)), r), const(s)))
    func = Function([x, r], call("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2)))
    ops = _ops(convert_conv_layout(func).body)
    assert "nn.batch_matmul" in ops and "nn.contrib_conv2d_nchwc" not in ops
    assert "layout_transform" not in ops
    names = _primitive_names(func)
    assert "fused_nn_batch_matmul_nn_bias_add_add_multiply_nn_relu" in names, names
    xa, ra = _rand(2, 24, 16, 16), _rand(2, 48, 16 // stride, 16 // stride)
    lib = kiln.compile(IRModule.from_expr(func))
    m = GraphExecutor(lib)
    m.set_input("x", xa)
    m.set_input("r", ra)
    m.run()
    t = torch.from_numpy
    ref = F.max_pool2d(F.relu((F.conv2d(t(xa), t(w), t(b), stride=stride) + t(ra)) * t(s)), 2)
    np.testing.assert_allclose(m.get_output(0).numpy(), ref.numpy(), rtol=RTOL, atol=ATOL)


def test_1x1_conv_stays_blocked_when_configured_off_feeding_a_conv_or_on_ragged_rows():
    from kiln.graph.transform import PassContext
    w = _rand(32, 16, 1, 1)
    x = var("x", (1, 16, 8, 8))
    lone = Function([x], call("nn.conv2d", x, const(w)))
    assert "nn.batch_matmul" in _ops(convert_conv_layout(lone).body)
    with PassContext(opt_level=3, config={"ConvertConvLayout.gemm_1x1": False}):
        assert "nn.batch_matmul" not in _ops(convert_conv_layout(lone).body)
    # Its result feeds a 3x3 conv (through relu): the blocked chain needs no transform between.
    w3 = _rand(8, 32, 3, 3)
    chained = Function([x], call("nn.conv2d", call("nn.relu", call("nn.conv2d", x, const(w))),
                                 const(w3), padding=(1, 1)))
    assert "nn.batch_matmul" not in _ops(convert_conv_layout(chained).body)
    # 7x7 = 49 output columns do not fill whole vectors.
    x7 = var("x", (1, 16, 7, 7))
    assert "nn.batch_matmul" not in _ops(convert_conv_layout(
        Function([x7], call("nn.conv2d", x7, const(w)))).body)
    # Padded 1x1 convs are convolutions still.
    padded = Function([x], call("nn.conv2d", x, const(w), padding=(1, 1)))
    assert "nn.batch_matmul" not in _ops(convert_conv_layout(padded).body)


def test_flat_and_blocked_values_meet_in_a_residual_add():
    # x -> 1x1 (flat) and x -> 3x3 (blocked), added: the flat one is blocked for the add.
    w1, w3 = _rand(16, 8, 1, 1), _rand(16, 8, 3, 3)
    x = var("x", (1, 8, 12, 12))
    func = Function([x], call("nn.relu", call("add", call("nn.conv2d", x, const(w1)),
                                               call("nn.conv2d", x, const(w3), padding=(1, 1)))))
    ops = _ops(convert_conv_layout(func).body)
    assert "nn.batch_matmul" in ops
    xa = _rand(1, 8, 12, 12)
    t = torch.from_numpy
    ref = F.relu(F.conv2d(t(xa), t(w1)) + F.conv2d(t(xa), t(w3), padding=1)).numpy()
    np.testing.assert_allclose(_run(func, xa), ref, rtol=RTOL, atol=ATOL)


def test_strided_1x1_conv_of_an_nchw_input_is_sliced_before_the_transform():
    # 14x14 -> 7x7 (49 columns: blocked, not a matmul): the slice halves both axes before the
    # layout transform, and the conv runs at stride 1. After a blocked conv the stride stays.
    w, w3 = _rand(32, 16, 1, 1), _rand(16, 16, 3, 3)
    x = var("x", (1, 16, 14, 14))
    lone = convert_conv_layout(Function([x], call("nn.conv2d", x, const(w), strides=(2, 2))))
    convs = [e for e in post_order(lone.body) if getattr(getattr(e, "op", None), "name", "")
             == "nn.contrib_conv2d_nchwc"]
    assert len(convs) == 1 and tuple(convs[0].attrs.strides) == (1, 1)
    assert _ops(lone.body)[:2] == ["strided_slice", "layout_transform"]
    chained = convert_conv_layout(Function([x], call(
        "nn.conv2d", call("nn.conv2d", x, const(w3), padding=(1, 1), strides=(2, 2)), const(w),
        strides=(2, 2))))
    assert "strided_slice" not in _ops(chained.body)
    xa = _rand(1, 16, 14, 14)
    t = torch.from_numpy
    np.testing.assert_allclose(_run(lone, xa), F.conv2d(t(xa), t(w), stride=2).numpy(),
                               rtol=RTOL, atol=ATOL)
    ref = F.conv2d(F.conv2d(t(xa), t(w3), padding=1, stride=2), t(w), stride=2).numpy()
    np.testing.assert_allclose(_run(chained, xa), ref, rtol=RTOL, atol=ATOL)


def test_channel_concat_of_blocked_convs_stays_blocked_and_matches_torch():
    """A DenseNet step: concat(pool(x), conv(...)) along channels - scale, shift - relu - conv:
    joined in the blocked layout (no transform around the concat) when every input has whole
    blocks; a concat with a ragged input joins in NCHW as before."""
    w0, w1, w2 = _rand(16, 3, 3, 3), _rand(16, 16, 3, 3), _rand(8, 32, 1, 1)
    scale, shift = _rand(1, 32, 1, 1), _rand(1, 32, 1, 1)
    x = var("x", (1, 3, 12, 12))
    a = call("nn.relu", call("nn.conv2d", x, const(w0), padding=(1, 1)))
    b = call("nn.conv2d", a, const(w1), padding=(1, 1))
    cat = call("concatenate", Tuple([a, b]), axis=1)
    y = call("nn.relu", call("add", call("multiply", cat, const(scale)), const(shift)))
    func = Function([x], call("nn.conv2d", y, const(w2)))
    new = convert_conv_layout(func)
    cats = [e for e in post_order(new.body) if getattr(getattr(e, "op", None), "name", "")
            == "concatenate"]
    assert len(cats) == 1 and cats[0].checked_type.ndim == 5
    assert _ops(new.body).count("layout_transform") == 2       # the input and the output
    xa = _rand(1, 3, 12, 12)
    t = F.relu(F.conv2d(torch.from_numpy(xa), torch.from_numpy(w0), padding=1))
    t = torch.cat([t, F.conv2d(t, torch.from_numpy(w1), padding=1)], 1)
    t = F.relu(t * torch.from_numpy(scale) + torch.from_numpy(shift))
    ref = F.conv2d(t, torch.from_numpy(w2)).numpy()
    np.testing.assert_allclose(_run(new, xa), ref, rtol=RTOL, atol=ATOL)

    z = var("z", (1, 5, 12, 12))
    new = convert_conv_layout(Function([x, z], call("concatenate", Tuple([a, z]), axis=1)))
    cats = [e for e in post_order(new.body) if getattr(getattr(e, "op", None), "name", "")
            == "concatenate"]
    assert len(cats) == 1 and cats[0].checked_type.ndim == 4


@pytest.mark.parametrize("shape, groups", [((1, 64, 28, 28), 1), ((1, 64, 14, 14), 1),
                                           ((1, 128, 14, 14), 2)])
def test_integer_convs_are_exact_and_never_winograd(shape, groups):
    """int8 x int8 -> int32 3x3 convolutions of shapes where a float conv runs as Winograd: the
    transforms' fractions would be rounded away (a silent wrong result, seen before the fix),
    so they stay direct and equal numpy's integer result exactly."""
    r = np.random.default_rng(sum(shape) + groups)
    c = shape[1]
    xs = r.integers(-128, 128, shape).astype(np.int8)
    ws = r.integers(-128, 128, (c, c // groups, 3, 3)).astype(np.int8)
    x = var("x", shape, "int8")
    y = call("nn.conv2d", x, const(ws), strides=[1, 1], padding=[1, 1, 1, 1], groups=groups,
             out_dtype="int32")
    f = Function([x], y)
    typed = IRModule.from_expr(f)["main"]
    xf = var("x", shape)
    float_typed = IRModule.from_expr(Function([xf], call(
        "nn.conv2d", xf, const(ws.astype(np.float32)), strides=[1, 1], padding=[1, 1, 1, 1],
        groups=groups)))["main"]
    with Target("llvm"):
        assert "nn.contrib_conv2d_winograd_nchwc" in _ops(convert_conv_layout(float_typed).body)
        assert "nn.contrib_conv2d_winograd_nchwc" not in _ops(convert_conv_layout(typed).body)
    got = _run(f, xs)
    want = torch.nn.functional.conv2d(torch.from_numpy(xs.astype(np.int64)),
                                      torch.from_numpy(ws.astype(np.int64)), padding=1,
                                      groups=groups).numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)

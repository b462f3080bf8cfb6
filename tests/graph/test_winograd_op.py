"""nn.contrib_conv2d_winograd_nchwc as a graph op: type relation, and a compiled graph
(layout transforms, Winograd conv, bias + residual add + relu fused into it) against torch.

Tolerance: the Winograd transforms amplify float32 rounding (see tests/topi/test_winograd.py);
the error is bounded relative to the output's magnitude: |got - ref| <= 5e-5 * max|ref| for
F(4x4) and 5e-6 for F(2x2), reference in float64.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln.graph import Function, GraphTypeError, IRModule, call, const, post_order, var
from kiln.runtime import GraphExecutor
from kiln.topi.nn.conv2d_nchwc import nchw_to_nchwc
from kiln.topi.nn.winograd import winograd_weight_transform_numpy

TOL = {2: 5e-6, 4: 5e-5}
rng = np.random.default_rng(5)


def _rand(*shape):
    return rng.uniform(-1, 1, size=shape).astype("float32")


def _run(func, x):
    lib = kiln.compile(IRModule.from_expr(func))
    m = GraphExecutor(lib)
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


@pytest.mark.parametrize("tile", [2, 4])
def test_winograd_graph_matches_torch(tile):
    c, h, w = 32, 10, 13
    w1, b1 = _rand(c, c, 3, 3), _rand(c)
    x = var("x", (1, c, h, w))
    xb = call("layout_transform", x, src_layout="NCHW", dst_layout="NCHW16c")
    y = call("nn.contrib_conv2d_winograd_nchwc", xb,
             const(winograd_weight_transform_numpy(w1, tile, 16, 16)), padding=(1, 1))
    assert y.checked_type.shape == (1, 2, h, w, 16)
    y = call("nn.relu", call("add", call("add", y, const(b1.reshape(1, 2, 1, 1, 16))), xb))
    func = Function([x], call("layout_transform", y, src_layout="NCHW16c", dst_layout="NCHW"))
    xa = _rand(1, c, h, w)
    t = torch.from_numpy
    ref = F.relu(F.conv2d(t(xa).double(), t(w1).double(), t(b1).double(), padding=1)
                 + t(xa).double()).numpy()
    got = _run(func, xa)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err <= TOL[tile], f"max error {err:.2e} of max|ref|"


def test_winograd_graph_asymmetric_padding_alone():
    w1 = _rand(16, 16, 3, 3)
    x = var("x", (1, 1, 7, 9, 16))
    y = call("nn.contrib_conv2d_winograd_nchwc", x,
             const(winograd_weight_transform_numpy(w1, 4, 16, 16)), padding=(0, 1, 2, 1))
    assert y.checked_type.shape == (1, 1, 7, 9, 16)
    ops = [e.op.name for e in post_order(y) if hasattr(getattr(e, "op", None), "name")]
    assert ops == ["nn.contrib_conv2d_winograd_nchwc"]
    xa = _rand(1, 16, 7, 9)
    xt = F.pad(torch.from_numpy(xa).double(), (1, 1, 0, 2))
    ref = F.conv2d(xt, torch.from_numpy(w1).double()).numpy()
    got = _run(Function([x], y), nchw_to_nchwc(xa, 16))
    got = got.transpose(0, 1, 4, 2, 3).reshape(ref.shape)
    assert np.abs(got - ref).max() <= TOL[4] * np.abs(ref).max()


def test_winograd_type_errors():
    x = var("x", (1, 2, 8, 8, 16))
    u = const(np.zeros((6, 6, 1, 2, 16, 16), "float32"))
    op = "nn.contrib_conv2d_winograd_nchwc"
    with pytest.raises(GraphTypeError, match="strides 1"):
        call(op, x, u, strides=(2, 2))
    with pytest.raises(GraphTypeError, match="a x a"):
        call(op, x, const(np.zeros((5, 5, 1, 2, 16, 16), "float32")))
    with pytest.raises(GraphTypeError, match="input blocks"):
        call(op, x, const(np.zeros((6, 6, 1, 1, 16, 16), "float32")))
    with pytest.raises(GraphTypeError, match="6-d transformed weight"):
        call(op, x, const(np.zeros((6, 6, 1, 2, 16), "float32")))

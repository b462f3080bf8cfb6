"""3-d convolution and pooling (kiln/graph/ops/volume.py), legalized into 2-d ops: imported
from PyTorch and ONNX and compared with PyTorch (float32, 1e-5 x max|y|)."""
import numpy as np
import pytest
import torch

import kiln
from kiln.frontend import from_onnx, from_pytorch
from kiln.graph import GraphTypeError
from kiln.graph.op import call
from kiln.graph.expr import var

CONVS = [  # (in, out, kernel, stride, padding, dilation, groups)
    (3, 8, (3, 5, 5), (1, 2, 2), (1, 2, 2), 1, 1),
    (8, 16, 3, 2, 1, (2, 1, 1), 2),
    (6, 6, (3, 1, 1), 1, (1, 0, 0), 1, 6),          # depthwise, temporal only
    (4, 5, (1, 3, 3), 1, "same", 1, 1),
    (4, 5, (2, 2, 3), 1, "same", (1, 2, 1), 1),     # even kernels: more padding at the end
    (4, 4, 2, (2, 1, 1), 0, 1, 1),
]


def _run(model, x):
    mod, params = from_pytorch(model, (x,))
    lib = kiln.compile(mod, target="llvm", params=params)
    ex = kiln.runtime.GraphExecutor(lib)
    ex.set_input(0, x.numpy())
    ex.run()
    return ex.get_output(0).numpy()


def _check(model, x):
    with torch.inference_mode():
        ref = model(x).numpy()
    out = _run(model, x)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("cin,cout,kernel,stride,padding,dilation,groups", CONVS)
def test_conv3d_matches_torch(cin, cout, kernel, stride, padding, dilation, groups):
    torch.manual_seed(0)
    conv = torch.nn.Conv3d(cin, cout, kernel, stride, padding, dilation, groups).eval()
    _check(conv, torch.randn(1, cin, 7, 12, 11))


@pytest.mark.parametrize("pool", [
    torch.nn.MaxPool3d((2, 3, 3), stride=(2, 2, 2), padding=(0, 1, 1), ceil_mode=True),
    torch.nn.MaxPool3d(3, stride=1, padding=1, dilation=(1, 2, 1)),
    torch.nn.AvgPool3d(2, stride=1, padding=1, count_include_pad=False),
    torch.nn.AvgPool3d((3, 2, 2), stride=2, padding=(1, 1, 0), count_include_pad=True,
                       ceil_mode=True),
    torch.nn.AdaptiveAvgPool3d(1),
], ids=["max_ceil", "max_dilated", "avg_valid", "avg_padded_ceil", "adaptive"])
def test_pool3d_matches_torch(pool):
    _check(pool.eval(), torch.randn(2, 3, 7, 10, 9))


def test_video_block_matches_torch():
    """An R(2+1)D-style block: a spatial 1x3x3 conv, batch norm, ReLU, a temporal 3x1x1 conv,
    a residual add and a global pool, in one graph."""
    torch.manual_seed(1)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.spatial = torch.nn.Conv3d(8, 12, (1, 3, 3), padding=(0, 1, 1), bias=False)
            self.bn = torch.nn.BatchNorm3d(12)
            self.temporal = torch.nn.Conv3d(12, 8, (3, 1, 1), padding=(1, 0, 0))

        def forward(self, x):
            y = self.temporal(torch.relu(self.bn(self.spatial(x))))
            return torch.nn.functional.adaptive_avg_pool3d(torch.relu(x + y), 1).flatten(1)
    block = Block().eval()
    with torch.no_grad():
        block.bn.running_mean.uniform_(-0.2, 0.2)
        block.bn.running_var.uniform_(0.5, 1.5)
    _check(block, torch.randn(1, 8, 6, 14, 14))


def test_onnx_conv3d_matches_torch():
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 6, 9, 8)).astype("float32")
    w = rng.standard_normal((6, 2, 3, 3, 2)).astype("float32")
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 1, 2],
                            pads=[1, 1, 0, 0, 1, 1], dilations=[1, 2, 1], group=2)
    graph = helper.make_graph([node], "conv3d",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    lib = kiln.compile(mod, target="llvm", params=params)
    ex = kiln.runtime.GraphExecutor(lib)
    ex.set_input(0, x)
    ex.run()
    padded = np.pad(x, ((0, 0), (0, 0), (1, 0), (1, 1), (0, 1)))
    ref = torch.nn.functional.conv3d(torch.from_numpy(padded), torch.from_numpy(w),
                                     stride=(2, 1, 2), dilation=(1, 2, 1), groups=2).numpy()
    out = ex.get_output(0).numpy()
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


def test_conv3d_type_errors_name_the_problem():
    x = var("x", shape=(1, 4, 6, 8, 8))
    with pytest.raises(GraphTypeError, match="weight expects 3 x groups=1"):
        call("nn.conv3d", x, var("w", shape=(2, 3, 3, 3, 3))).checked_type
    with pytest.raises(GraphTypeError, match="5-d"):
        call("nn.conv3d", var("y", shape=(1, 4, 8, 8)), var("w", shape=(2, 4, 3, 3, 3))) \
            .checked_type
    with pytest.raises(GraphTypeError, match="empty"):
        call("nn.max_pool3d", x, pool_size=(7, 1, 1)).checked_type


def test_conv3d_legalizes_over_symbolic_sizes():
    """Batch, depth and height may be size variables: the frames are batched as n * Do."""
    from kiln.graph.expr import Function
    from kiln.graph.transform.legalize_qnn import legalize_qnn
    from kiln import te
    n, d, h = te.var("n"), te.var("d"), te.var("h")
    x = var("x", shape=(n, 4, d, h, 8))
    y = call("nn.conv3d", x, var("w", shape=(6, 2, 3, 3, 3)), padding=(1, 1, 1, 1, 1, 1),
             groups=2)
    f = legalize_qnn(Function([x], y))
    assert "nn.conv3d" not in str(f) and "nn.conv2d" in str(f)
    assert f.body.checked_type == y.checked_type

"""The paper's fusion rules on real architectures (reduced widths, same structure)."""
import numpy as np
import torch

import kiln
from kiln.frontend import from_pytorch
from kiln.runtime import GraphExecutor
from kiln.testing.models import bert, example_input, resnet18


def _compile(model, inputs):
    mod, params = from_pytorch(model, inputs)
    return kiln.compile(mod, target="llvm", params=params)


def _kernels(lib):
    return [k["func"].rsplit("_", 1)[0] for k in lib.graph["kernels"]]


def test_resnet18_conv_bn_relu_and_residual_add_are_single_kernels():
    model = resnet18(width=16)
    inputs = example_input(model, image_size=64)
    lib = _compile(model, inputs)
    kernels = _kernels(lib)
    # 20 convolutions (stem, 16 in blocks, 3 downsample), each one kernel with its epilogue:
    # batch_norm folded into the weights and a bias, then relu and/or the residual add. The
    # convolutions run in the blocked NCHW16c layout, with the bias as a broadcast add.
    convs = [k for k in kernels if "conv2d" in k]
    assert len(convs) == 20
    conv = "fused_nn_contrib_conv2d_nchwc"
    assert kernels.count(f"{conv}_add_nn_relu") == 9
    assert kernels.count(f"{conv}_add_add_nn_relu") == 8                # residual adds
    assert kernels.count(f"{conv}_add") == 3                            # downsample paths
    assert not any("batch_norm" in k for k in kernels)
    assert not any(k in ("fused_add", "fused_nn_relu", "fused_add_nn_relu") for k in kernels)
    # Layout transforms only at the boundaries: the input, and after the (blocked) global
    # pool, fused with the flatten before the dense; both pools run blocked.
    assert [k for k in kernels if "layout_transform" in k] == [
        "fused_layout_transform", "fused_layout_transform_reshape"]
    assert "fused_nn_max_pool2d" in kernels and "fused_nn_global_avg_pool2d" in kernels
    m = GraphExecutor(lib)
    m.run(**{m.get_input_names()[0]: inputs[0].numpy()})
    with torch.no_grad():
        ref = model(*inputs).numpy()
    assert np.abs(m.get_output(0).numpy() - ref).max() <= 1e-4 * np.abs(ref).max()


def test_bert_bias_gelu_fused_into_dense_and_qkv_combined():
    model = bert(layers=2, hidden=64, heads=4)
    inputs = example_input(model, seq_len=16)
    lib = _compile(model, inputs)
    kernels = _kernels(lib)
    # every dense reads its weight pre-packed at compile time (AlterOpLayout)
    assert not any("nn_dense" in k for k in kernels)
    kernels = [k.replace("nn_contrib_dense_pack", "nn_dense") for k in kernels]
    # Per layer: one combined Q/K/V dense, the attention output dense (+ residual add), the
    # intermediate dense with bias + GELU, and the output dense (+ residual add).
    assert kernels.count("fused_nn_dense_nn_bias_add_nn_gelu") == 2
    assert kernels.count("fused_nn_dense_nn_bias_add_add") == 4
    assert kernels.count("fused_nn_dense_nn_bias_add") == 2                   # Q/K/V, combined
    assert sum("dense" in k for k in kernels) == 8                           # not 12
    m = GraphExecutor(lib)
    m.run(**{n: v.numpy() for n, v in zip(m.get_input_names(), inputs)})
    with torch.no_grad():
        ref = model(*inputs)
    ref = (ref[0] if isinstance(ref, tuple) else ref).numpy()
    assert np.abs(m.get_output(0).numpy() - ref).max() <= 1e-4 * np.abs(ref).max()

"""Whole models exported from PyTorch with torch.onnx.export, imported with from_onnx, compiled
with kiln and compared with PyTorch.

Tolerance (issue 3): float32 max |error| <= 1e-4 x max |PyTorch output|; float64 max |error| <=
1e-10 x max |PyTorch output|. Small configurations cover the variants; the full-size models are
marked `full_model` (deselect with -m "not full_model").
"""
import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

import kiln  # noqa: E402
from kiln.frontend import from_onnx  # noqa: E402
from kiln.graph import post_order  # noqa: E402
from kiln.testing import models  # noqa: E402

full_only = pytest.mark.full_model


def export(model, args, opset=17, input_names=None):
    """The ONNX model of `model` (TorchScript exporter: no extra dependency)."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, buf, dynamo=False, opset_version=opset,
                          input_names=input_names)
    return onnx.load_from_string(buf.getvalue())


def compile_and_compare(model, args, onnx_model, float64=False):
    mod, params = from_onnx(onnx_model)
    main = mod["main"]
    assert all(p.checked_type.dtype in ("float64", "int64") for p in main.params) if float64 \
        else True
    lib = kiln.compile(mod, target="llvm", params=params)
    ex = kiln.runtime.GraphExecutor(lib)
    inputs = {v.name_hint: a.numpy() for v, a in zip(main.params, args)}
    ex.run(**inputs)
    out = ex.get_output(0).numpy()
    with torch.no_grad():
        ref = model(*args).numpy()
    assert out.shape == ref.shape and out.dtype == ref.dtype
    scale = np.abs(ref).max()
    tol = 1e-10 if float64 else 1e-4
    err = np.abs(out - ref).max()
    assert err <= tol * scale, f"max |error| {err:.3g} > {tol} x {scale:.3g}"
    return mod, params


def small_resnet():
    return models.resnet18(seed=0, num_classes=10, width=8, layers=(1, 1, 1, 1))


def small_mobilenet():
    return models.mobilenet_v2(seed=1, num_classes=10, width_mult=0.25,
                               settings=[(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 1, 2)])


def small_bert():
    return models.bert(seed=2, layers=2, hidden=64, heads=4, vocab_size=100, max_position=32)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_resnet18_small(dtype):
    model = small_resnet()
    if dtype == "float64":
        model = model.double()
    args = models.example_input(model, image_size=32)
    mod, params = compile_and_compare(model, args, export(model, args),
                                      float64=dtype == "float64")
    ops = {n.op.name for n in post_order(mod["main"]) if hasattr(n, "op")}
    assert {"nn.conv2d", "nn.max_pool2d", "nn.global_avg_pool2d", "nn.dense"} <= ops
    assert all(a.dtype == np.dtype(dtype) for a in params.values())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mobilenet_v2_small(dtype):
    model = small_mobilenet()
    if dtype == "float64":
        model = model.double()
    args = models.example_input(model, image_size=32)
    compile_and_compare(model, args, export(model, args), float64=dtype == "float64")


@pytest.mark.parametrize("opset", [13, 17])
def test_bert_small(opset):
    """opset 13 spells LayerNorm out (ReduceMean, Pow, Sqrt ...); 17 uses LayerNormalization.
    The attention mask's arithmetic and every reshape's shape fold to constants on import."""
    model = small_bert()
    ids = models.example_input(model, seq_len=16)[0]
    mask = torch.ones_like(ids)
    mask[0, -3:] = 0
    onnx_model = export(model, (ids, mask), opset, input_names=["input_ids", "attention_mask"])
    mod, _ = compile_and_compare(model, (ids, mask), onnx_model)
    ops = [n.op.name for n in post_order(mod["main"]) if hasattr(n, "op")]
    assert "nn.dense" in ops and "nn.batch_matmul" in ops and "transpose" in ops
    assert ops.count("nn.dense") == 2 * 6          # q, k, v, out, intermediate, output
    assert not any(name.startswith("shape") for name in ops)
    if opset >= 17:
        assert ops.count("nn.layer_norm") == 1 + 2 * 2


def test_bert_small_float64():
    model = small_bert().double()
    ids = models.example_input(model, seq_len=8)[0]
    compile_and_compare(model, (ids,), export(model, (ids,)), float64=True)


def test_bert_small_dynamo_exporter(tmp_path):
    """torch.onnx.export's default (dynamo) exporter: opset 20+, Gelu as one op, weights in an
    external-data file beside the model."""
    pytest.importorskip("onnxscript")
    model = small_bert()
    ids = models.example_input(model, seq_len=8)[0]
    path = tmp_path / "bert.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids,), str(path), dynamo=True)
    onnx_model = onnx.load(str(path))
    assert "Gelu" in {n.op_type for n in onnx_model.graph.node}
    mod, params = from_onnx(str(path))
    lib = kiln.compile(mod, target="llvm", params=params)
    ex = kiln.runtime.GraphExecutor(lib)
    ex.run(**{mod["main"].params[0].name_hint: ids.numpy()})
    with torch.no_grad():
        ref = model(ids).numpy()
    assert np.abs(ex.get_output(0).numpy() - ref).max() <= 1e-4 * np.abs(ref).max()


@full_only
def test_resnet18_full():
    model = models.resnet18(seed=0)
    args = models.example_input(model, image_size=224)
    compile_and_compare(model, args, export(model, args))


@full_only
def test_mobilenet_v2_full():
    model = models.mobilenet_v2(seed=0)
    args = models.example_input(model, image_size=224)
    compile_and_compare(model, args, export(model, args))


@full_only
def test_bert_base_full():
    model = models.bert(seed=0)
    args = models.example_input(model, seq_len=128)
    compile_and_compare(model, args, export(model, args))


@full_only
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert"])
def test_full_models_float64(name):
    model = getattr(models, name)(seed=0).double()
    args = models.example_input(model, image_size=224, seq_len=128)
    compile_and_compare(model, args, export(model, args), float64=True)

"""ResNet-18, MobileNet-V2 and BERT compiled for GPU targets, from PyTorch and from ONNX.

target="opencl": run on the OpenCL device (PoCL here) and compared with PyTorch, float32 max
|error| <= 1e-4 x max|output|. target="cuda": every kernel compiles through NVRTC, and ptxas
(sm_80) reports no register spills and shared memory within 48 KiB; on a machine with a CUDA
GPU the models also run there. Small configurations always; the real sizes marked full_model.
"""
import io
import warnings

import numpy as np
import pytest
import torch

import kiln
from kiln.frontend import from_onnx, from_pytorch
from kiln.testing.models import bert, example_input, mobilenet_v2, resnet18

TOL = 1e-4
SMALL = {
    "resnet18": lambda: resnet18(seed=1, width=8, num_classes=10),
    "mobilenet_v2": lambda: mobilenet_v2(seed=2, width_mult=0.25, num_classes=10),
    "bert": lambda: bert(seed=3, layers=2, hidden=32, heads=4, vocab_size=64, max_position=32),
}
FULL = {"resnet18": lambda: resnet18(seed=1), "mobilenet_v2": lambda: mobilenet_v2(seed=2),
        "bert": lambda: bert(seed=3)}
NAMES = list(SMALL)


def _model(name, full, seq_len=128):
    model = (FULL if full else SMALL)[name]()
    inputs = example_input(model, image_size=224 if full else 32, seq_len=seq_len if full else 12,
                           seed=5)
    with torch.no_grad():
        ref = model(*inputs)
    ref = getattr(ref, "last_hidden_state", ref)
    ref = (ref[0] if isinstance(ref, tuple) else ref).numpy()
    return model, inputs, ref


def _onnx(model, inputs):
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, buf, dynamo=False, opset_version=17)
    return from_onnx(buf.getvalue())


def _run(mod, params, inputs, target, device=None):
    lib = kiln.compile(mod, target=target, params=params)
    ex = kiln.runtime.GraphExecutor(lib, device)
    names = [p.name_hint for p in mod["main"].params if p.name_hint not in params]
    ex.run(**{n: x.numpy() for n, x in zip(names, inputs)})
    return ex.get_output(0).numpy()


def _check(got, ref):
    assert got.shape == ref.shape and got.dtype == ref.dtype
    err, scale = np.abs(got - ref).max(), np.abs(ref).max()
    assert err <= TOL * scale, f"max |error| {err:.3g} > {TOL} x {scale:.3g}"


@pytest.mark.parametrize("frontend", ["pytorch", "onnx"])
@pytest.mark.parametrize("name", NAMES)
def test_small_models_opencl(opencl_device, name, frontend):
    model, inputs, ref = _model(name, full=False)
    mod, params = from_pytorch(model, inputs) if frontend == "pytorch" else _onnx(model, inputs)
    _check(_run(mod, params, inputs, "opencl"), ref)


@pytest.mark.full_model
@pytest.mark.parametrize("frontend", ["pytorch", "onnx"])
@pytest.mark.parametrize("name", NAMES)
def test_full_models_opencl(opencl_device, name, frontend):
    # BERT-base over 32 tokens: PoCL runs kernels at a fraction of the CPU back-end's speed,
    # and the model's size (every weight, every kernel) is what the test is about.
    model, inputs, ref = _model(name, full=True, seq_len=32)
    mod, params = from_pytorch(model, inputs) if frontend == "pytorch" else _onnx(model, inputs)
    _check(_run(mod, params, inputs, "opencl"), ref)


def _ptxas_check(name, full):
    from kiln.codegen.cuda.nvrtc import ptxas_report
    model, inputs, _ = _model(name, full)
    mod, params = from_pytorch(model, inputs)
    lib = kiln.compile(mod, target="cuda -arch=sm_80", params=params)
    report = ptxas_report(lib.module.get_source("ptx"), "sm_80")
    kernels = [op[1] for f in lib.module.function_names()
               for op in _launches(lib.module, f)]
    assert sorted(report) == sorted(kernels)
    for kernel, res in report.items():
        assert res.spill_stores == 0 and res.spill_loads == 0, (kernel, res)
        assert res.shared_bytes <= 48 * 1024, (kernel, res)


def _launches(module, name):
    plan = module._functions[name][1]
    return [op for op in plan if op[0] == "launch"]


@pytest.mark.parametrize("name", NAMES)
def test_small_models_cuda_ptxas(ptxas, name):
    _ptxas_check(name, full=False)


@pytest.mark.full_model
@pytest.mark.parametrize("name", NAMES)
def test_full_models_cuda_ptxas(ptxas, name):
    _ptxas_check(name, full=True)


@pytest.mark.parametrize("name", NAMES)
def test_small_models_cuda_run(cuda_device, name):
    model, inputs, ref = _model(name, full=False)
    mod, params = from_pytorch(model, inputs)
    _check(_run(mod, params, inputs, "cuda"), ref)

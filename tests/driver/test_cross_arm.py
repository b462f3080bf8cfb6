"""Cross-compilation to 64-bit ARM: models compiled for aarch64 (NEON), exported with the cross
tool-chain and run through kiln's C runtime under user-mode QEMU give PyTorch's outputs
(<= 1e-4 x max|y|). QEMU runs the code, it does not time an ARM CPU. Small configurations
always run; the real sizes are `full_model`."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

import kiln
from kiln.runtime import NativeBuildError
from kiln.runtime.c.runner import run_exported
from kiln.runtime.toolchain import compiler_for, host_arch, missing
from kiln.target import Target
from kiln.testing.models import bert, example_input, mobilenet_v2, resnet18

TRIPLE = "aarch64-linux-gnu"
pytestmark = pytest.mark.skipif(host_arch() == "aarch64", reason="these tests cross-compile "
                                "to aarch64 from another machine; this one is aarch64")
needs_arm_tools = pytest.mark.skipif(missing(TRIPLE) is not None, reason=f"{missing(TRIPLE)}")


def _cross_compiler_missing() -> str | None:
    try:
        compiler_for(TRIPLE)
    except NativeBuildError as err:
        return str(err)
    return None

SMALL = {
    "resnet18": lambda: (resnet18(seed=1, width=8, num_classes=10), {"image_size": 32}),
    "mobilenet_v2": lambda: (mobilenet_v2(seed=2, width_mult=0.25, num_classes=10),
                             {"image_size": 32}),
    "bert": lambda: (bert(seed=3, layers=2, hidden=32, heads=4, vocab_size=64, max_position=32),
                     {"seq_len": 12}),
}
FULL = {
    "resnet18": lambda: (resnet18(seed=1), {"image_size": 224}),
    "mobilenet_v2": lambda: (mobilenet_v2(seed=2), {"image_size": 224}),
    "bert": lambda: (bert(seed=3), {"seq_len": 128}),
}
NEON_FMA = re.compile(r"\bfmla\s+v\d+\.4s")


def test_arm_targets_name_neon_cpus():
    t = Target("rasp4b")
    assert str(t) == "llvm -mattr=+neon -mcpu=cortex-a72 -mtriple=aarch64-linux-gnu"
    assert t.keys == ("arm_cpu", "cpu") and t.is_cross
    assert (t.vector_width_bits, t.vector_registers) == (128, 32)   # NEON: v0-v31, 4 floats
    generic = Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon")
    assert generic.mcpu == "generic" and generic == Target("arm_cpu")
    assert Target("arm_cpu -mcpu=cortex-a53") == Target("rasp3b")
    with pytest.raises(ValueError, match="presets: arm_cpu, rasp4b, rasp3b"):
        Target("raspberry")


def _compile(model, sizes, tmp_path, target="rasp4b"):
    inputs = example_input(model, seed=5, **sizes)
    mod, params = kiln.frontend.from_pytorch(model, inputs)
    lib = kiln.compile(mod, target=target, params=params)
    path = tmp_path / "model.so"
    lib.export_library(path)
    names = [i["name"] for i in json.loads(lib.graph_json)["inputs"]]
    return lib, path, dict(zip(names, (i.numpy() for i in inputs))), inputs


@pytest.mark.skipif(_cross_compiler_missing() is not None, reason=f"{_cross_compiler_missing()}")
def test_a_cross_compiled_model_cannot_run_here(tmp_path):
    model, sizes = SMALL["resnet18"]()
    lib, path, feeds, _ = _compile(model, sizes, tmp_path, "arm_cpu")
    with pytest.raises(kiln.codegen.CodegenError, match="compiled for aarch64-linux-gnu .* "
                                                        "kiln's C runtime"):
        kiln.runtime.GraphExecutor(lib)
    with pytest.raises(kiln.runtime.ModelError, match="built for aarch64, this machine is"):
        kiln.runtime.load_module(path)


def _check_under_qemu(name, table, tmp_path):
    model, sizes = table[name]()
    lib, path, feeds, inputs = _compile(model, sizes, tmp_path)
    assert NEON_FMA.search(lib.module.get_source("asm")), "no NEON fmla in the kernels"
    outputs, _ = run_exported(path, feeds, TRIPLE, timeout=600)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    (y,) = outputs
    assert y.shape == expected.shape
    assert np.abs(y - expected).max() <= 1e-4 * np.abs(expected).max()


@needs_arm_tools
@pytest.mark.parametrize("name", list(SMALL))
def test_small_models_run_under_qemu(name, tmp_path):
    _check_under_qemu(name, SMALL, tmp_path)


@needs_arm_tools
@pytest.mark.full_model
@pytest.mark.parametrize("name", list(FULL))
def test_full_size_models_run_under_qemu(name, tmp_path):
    _check_under_qemu(name, FULL, tmp_path)


@needs_arm_tools
def test_the_c_back_end_cross_compiles_too(tmp_path):
    model, sizes = SMALL["mobilenet_v2"]()
    lib, path, feeds, inputs = _compile(model, sizes, tmp_path,
                                        "c -mtriple=aarch64-linux-gnu -mcpu=cortex-a72")
    assert "-mcpu=cortex-a72" in kiln.codegen.c.build.compile_flags(lib.target)
    (y,), _ = run_exported(path, feeds, TRIPLE, timeout=600)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    assert np.abs(y - expected).max() <= 1e-4 * np.abs(expected).max()

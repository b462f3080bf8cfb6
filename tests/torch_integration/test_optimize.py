"""kiln.torch.optimize: a kiln-compiled nn.Module on torch tensors — results against eager
PyTorch, zero-copy inputs and outputs, input checks, repr.

Tolerances are those of the frontend's model tests (tests/frontend/conftest.py): float32
outputs within 1e-4 x max|eager output| (max abs error).
"""
import numpy as np
import pytest
import torch
from torch import nn

import kiln.torch
from kiln.runtime import ArgumentError
from kiln.testing.models import resnet18
from kiln.torch import InputError

TOL = 1e-4

# torch.export's own deprecation noise, as in tests/frontend
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")


def assert_close(got, want):
    assert isinstance(got, torch.Tensor), type(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    err = float((got.double() - want.double()).abs().max())
    scale = float(want.double().abs().max())
    assert err <= TOL * scale, f"max abs error {err:.3g} > {TOL} x {scale:.3g}"


@pytest.fixture(scope="module")
def resnet():
    model = resnet18(seed=1, width=8, layers=(1, 1, 1, 1), num_classes=10)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return model, kiln.torch.optimize(model, (x,))


class Pair(nn.Module):
    """Two inputs; returns a dict, an output sharing bytes with another, and an input as is."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, y):
        h = torch.relu(self.fc(x)) + y
        return {"h": h, "flat": h.reshape(-1), "y": y}


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    model = Pair().eval()
    return model, kiln.torch.optimize(model, (torch.randn(2, 4), torch.randn(2, 4)))


def test_resnet18_round_trip(resnet):
    model, fast = resnet
    assert isinstance(fast, nn.Module) and not fast.training
    gen = torch.Generator().manual_seed(1)
    x1, x2 = (torch.randn(1, 3, 32, 32, generator=gen) for _ in range(2))
    with torch.no_grad():
        y1 = fast(x1)
        kept = y1.clone()
        y2 = fast(x2)
        assert_close(y1, model(x1))
        assert_close(y2, model(x2))
    assert torch.equal(y1, kept), "the second call overwrote the first call's output"


def _addresses(executor, entry):
    """The addresses the executor's kernel calls pass for execution-graph entry `entry`."""
    graph, calls = executor.lib.graph, executor.kernel_calls()
    found = set()
    for k, kern in enumerate(graph["kernels"]):
        for slot, e in enumerate(kern["inputs"] + kern["outputs"]):
            if e == entry:
                found.add(calls.values(k)[slot])
    return found


def test_inputs_and_outputs_are_not_copied(resnet):
    _, fast = resnet
    x = torch.randn(1, 3, 32, 32)
    y = fast(x)
    ex = fast.runner.executor
    graph = fast.lib.graph
    # What the kernels read and write is the caller's memory, not the executor's buffers.
    assert _addresses(ex, graph["inputs"][0]["entry"]) == {x.data_ptr()}
    assert _addresses(ex, graph["outputs"][0]) == {y.data_ptr()}


def test_non_contiguous_input_is_accepted(resnet):
    model, fast = resnet
    x = torch.randn(1, 3, 32, 32).transpose(2, 3)
    assert not x.is_contiguous()
    with torch.no_grad():
        assert_close(fast(x), model(x))


def test_repr_says_what_it_holds(resnet):
    _, fast = resnet
    text = repr(fast)
    assert text.startswith("KilnModule(ResNet compiled by kiln for llvm")
    assert "(x: float32[1x3x32x32]) -> (float32[1x10])" in text
    kernels = len(fast.lib.graph["kernels"])
    assert f"{kernels} kernel calls, {len(fast.lib.params)} constants" in text


@pytest.mark.parametrize("bad, message", [
    (torch.randn(2, 3, 32, 32), r"input 'x': expected float32\[1x3x32x32\], got "
                                r"float32\[2x3x32x32\]"),
    (torch.randn(1, 3, 32, 32, dtype=torch.float64), r"input 'x': expected float32\[1x3x32x32"
                                                     r"\], got float64\[1x3x32x32\]"),
    ([[1.0]], r"input 'x': expected a torch.Tensor float32\[1x3x32x32\], got list"),
])
def test_bad_input_is_a_clear_error(resnet, bad, message):
    _, fast = resnet
    with pytest.raises(InputError, match=message):
        fast(bad)


def test_input_count_and_names_are_checked(resnet, pair):
    _, fast = resnet
    x = torch.randn(1, 3, 32, 32)
    with pytest.raises(InputError, match=r"ResNet takes 1 input\(s\) \(x\), got 2"):
        fast(x, x)
    with pytest.raises(InputError, match=r"ResNet has no input named 'img'; its inputs are "
                                         r"\['x'\]"):
        fast(img=x)
    _, fast2 = pair
    with pytest.raises(InputError, match=r"Pair: missing input\(s\) \['y'\]"):
        fast2(torch.randn(2, 4))
    with pytest.raises(InputError, match="input 'x' given both by position and by name"):
        fast2(torch.randn(2, 4), x=torch.randn(2, 4))


def test_inputs_requiring_grad_are_refused_when_grad_is_on(resnet):
    model, fast = resnet
    x = torch.randn(1, 3, 32, 32, requires_grad=True)
    with pytest.raises(InputError, match="input 'x' requires grad.*inference only"):
        fast(x)
    with torch.no_grad():
        assert_close(fast(x), model(x))


def test_output_structure_names_and_shared_bytes(pair):
    model, fast = pair
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    with torch.no_grad():
        got, want = fast(y=y, x=x), model(x, y)
    assert sorted(got) == ["flat", "h", "y"]
    for key in want:
        assert_close(got[key], want[key])
    # Returned as a new tensor: the caller's input is not aliased by an output.
    assert got["y"].data_ptr() != y.data_ptr()
    assert got["flat"].data_ptr() != got["h"].data_ptr()


def test_exported_library_runs_through_kiln_torch(pair, tmp_path):
    from kiln.runtime import load_module
    model, fast = pair
    path = tmp_path / "pair.so"
    fast.lib.export_library(str(path))
    loaded = kiln.torch.KilnModule(load_module(path), source="pair.so")
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    with torch.no_grad():
        h, flat, y_out = loaded(x, y)
        want = model(x, y)
    assert_close(h, want["h"])
    assert_close(flat, want["flat"])
    assert torch.equal(y_out, y)
    assert "pair.so compiled by kiln: (x: float32[2x4], y: float32[2x4])" in repr(loaded)


def test_zero_copy_bindings_are_checked(pair):
    _, fast = pair
    ex = fast.runner.executor
    with pytest.raises(ArgumentError, match=r"input 'x': expected float32\[2x4\], got "
                                            r"float32\[4x2\]"):
        ex.set_input_zero_copy("x", np.zeros((4, 2), np.float32))
    with pytest.raises(ArgumentError, match="output 0: the array is not C-contiguous"):
        ex.set_output_zero_copy(0, np.zeros((4, 2), np.float32).T)
    frozen = np.zeros((2, 4), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ArgumentError, match="output 0: the array is read-only"):
        ex.set_output_zero_copy(0, frozen)

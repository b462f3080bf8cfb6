"""ONNX models with dynamic dimensions (dim_param) kept symbolic with from_onnx(dim_ranges=):
one library for every size in the range, equal to PyTorch (float32: <= 1e-4 x max |y|),
including shape arithmetic (Shape -> Gather -> Concat -> Reshape, Range) over the sizes."""
import numpy as np
import pytest
import torch

import kiln
from kiln.frontend.common import FrontendError
from kiln.runtime import ArgumentError, GraphExecutor
from kiln.testing.models import bert

TOL = 1e-4


def _export(model, inputs, path, names, dynamic_axes):
    with torch.no_grad():
        torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=17,
                          input_names=names, output_names=["y"], dynamic_axes=dynamic_axes)
    return str(path)


def _close(m, model, inputs):
    m.run(**{n: x.numpy() for n, x in zip(m.get_input_names(), inputs)})
    with torch.no_grad():
        ref = model(*inputs).numpy()
    assert np.abs(m.get_output(0).numpy() - ref).max() <= TOL * np.abs(ref).max()


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 8), torch.nn.Softmax(-1)).eval()
    path = _export(model, (torch.randn(4, 16),), tmp_path_factory.mktemp("onnx") / "mlp.onnx",
                   ["x"], {"x": {0: "batch"}, "y": {0: "batch"}})
    return model, path


def test_a_dim_param_kept_symbolic_runs_every_batch(mlp):
    model, path = mlp
    mod, params = kiln.frontend.from_onnx(path, dim_ranges={"batch": (1, 64)})
    (dim, _) = mod["main"].params[0].checked_type.shape
    assert dim.name == "batch" and dict(mod["main"].attrs["dim_ranges"]) == {"batch": (1, 64)}
    m = GraphExecutor(kiln.compile(mod, params=params))
    for batch in (1, 5, 64):
        _close(m, model, (torch.randn(batch, 16),))
    with pytest.raises(ArgumentError, match=r"\(batch\) is 65, outside its range \[1, 64\]"):
        m.run(x=np.zeros((65, 16), "float32"))


@pytest.mark.parametrize("ranges, message", [
    (None, r"dynamic dimension 0 \('batch'\); give its shape with shape_dict=.*or keep it "
           r"symbolic with dim_ranges=\{'batch': \(low, high\)\}"),
    ({"batch": (1, 8), "seq": (1, 4)}, r"dim_ranges names \['seq'\], which no graph input has"),
    ({"batch": (0, 8)}, r"dim_ranges\['batch'\] = \(0, 8\) is not a range of sizes"),
    ({"batch": (9, 8)}, r"dim_ranges\['batch'\] = \(9, 8\) is not a range of sizes"),
    ({"batch": 8}, r"dim_ranges\['batch'\] = 8 is not a range of sizes"),
])
def test_dim_range_errors(mlp, ranges, message):
    with pytest.raises(FrontendError, match=message):
        kiln.frontend.from_onnx(mlp[1], dim_ranges=ranges)


def test_bert_with_shape_arithmetic_over_a_symbolic_sequence(tmp_path):
    model = bert(seed=3, layers=2, hidden=32, heads=4, vocab_size=64, max_position=64)
    ids = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(0))
    path = _export(model, (ids,), tmp_path / "bert.onnx", ["ids"],
                   {"ids": {1: "seq"}, "y": {1: "seq"}})
    mod, params = kiln.frontend.from_onnx(path, dim_ranges={"seq": (1, 64)})
    m = GraphExecutor(kiln.compile(mod, params=params))
    g = torch.Generator().manual_seed(1)
    for length in (1, 7, 64):
        _close(m, model, (torch.randint(0, 64, (1, length), generator=g),))


def test_shape_arithmetic_on_symbolic_sizes_folds_only_what_is_known():
    from kiln import te
    from kiln.frontend.onnx.fold import SymbolicSizeError, fold
    n = te.size_var("n")
    halves = fold("divide", [np.array([n * 4, 12], dtype=object), np.array([2, 5])], {})
    assert halves[1] == 2 and str(halves[0]) == str((n * 4) // 2)
    assert fold("equal", [np.array([n, 3], dtype=object), np.array([n, 3], dtype=object)],
                {}).tolist() == [True, True]
    with pytest.raises(SymbolicSizeError, match=r"comparing sizes \[n, 1\] needs their values"):
        fold("equal", [np.array([n], dtype=object), np.array([1])], {})

"""The PyTorch importer's graphs, names and errors (no compilation needed here)."""
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kiln.frontend import FrontendError, UnsupportedOpsError, from_pytorch
from kiln.graph import Call, Tuple, TupleType, post_order
from kiln.testing.models import bert, resnet18
from kiln.tir import Var


def ops_of(mod):
    return [e.op.name for e in post_order(mod["main"].body) if isinstance(e, Call)]


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def test_linear_becomes_dense_plus_bias_add():
    mod, params = from_pytorch(nn.Linear(4, 3).eval(), (torch.randn(2, 4),))
    assert ops_of(mod) == ["nn.dense", "nn.bias_add"]
    assert sorted(params) == ["bias", "weight"]
    assert [p.name_hint for p in mod["main"].params] == ["input", "weight", "bias"]


def test_decomposed_addmm_with_transposed_weight_is_dense():
    """A fully decomposed program (permute + addmm) still gives a dense, not a transpose."""
    ep = torch.export.export(nn.Linear(4, 3).eval(), (torch.randn(2, 4),)).run_decompositions()
    assert "aten.addmm.default" in {str(n.target) for n in ep.graph.nodes}
    mod, _ = from_pytorch(ep)
    assert ops_of(mod) == ["nn.dense", "nn.bias_add"]


def test_attention_reads_keys_transposed():
    mod, _ = from_pytorch(Fn(lambda q, k: q @ k.transpose(-1, -2)).eval(),
                          (torch.randn(1, 2, 5, 4), torch.randn(1, 2, 6, 4)))
    bmm = [e for e in post_order(mod["main"].body)
           if isinstance(e, Call) and e.op.name == "nn.batch_matmul"]
    assert len(bmm) == 1 and bmm[0].attrs.transpose_b
    assert "transpose" not in ops_of(mod)


def test_weights_are_params_named_from_the_state_dict():
    model = resnet18(seed=0, width=8, layers=(1, 1, 1, 1), num_classes=10)
    mod, params = from_pytorch(model, (torch.randn(1, 3, 32, 32),))
    state = model.state_dict()
    main = mod["main"]
    assert main.params[0].name_hint == "x"
    assert [p.name_hint for p in main.params[1:]] == list(params)
    # Every weight and running statistic used, none of the unused counters.
    expected = {k for k in state if not k.endswith("num_batches_tracked")}
    assert set(params) == expected
    for k, v in params.items():
        np.testing.assert_array_equal(v, state[k].numpy())
        assert v.dtype == np.float32


def test_params_are_copies():
    model = nn.Linear(2, 2).eval()
    _, params = from_pytorch(model, (torch.randn(1, 2),))
    with torch.no_grad():
        model.weight.add_(1.0)
    assert not np.array_equal(params["weight"], model.weight.detach().numpy())


def test_spans_name_node_and_module():
    mod, _ = from_pytorch(resnet18(width=8, layers=(1, 1, 1, 1)), (torch.randn(1, 3, 32, 32),))
    spans = [e.span for e in post_order(mod["main"].body)
             if isinstance(e, Call) and e.op.name == "nn.conv2d"]
    assert any(s and "(layer1.0.conv1)" in s for s in spans), spans
    assert all(s for s in spans)


def test_float64_model_stays_float64():
    model = bert(layers=1, hidden=16, heads=2, vocab_size=20, max_position=16).double()
    inputs = (torch.randint(0, 20, (1, 8)), torch.ones(1, 8, dtype=torch.int64))
    mod, params = from_pytorch(model, inputs)
    float_types = {e.checked_type.dtype for e in post_order(mod["main"].body)
                   if hasattr(e.checked_type, "dtype") and "float" in e.checked_type.dtype}
    assert float_types == {"float64"}
    assert {v.dtype for v in params.values()} == {np.dtype("float64")}


def test_multiple_outputs_become_a_tuple():
    mod, _ = from_pytorch(Fn(lambda x: (x + 1, x.sum(), [x * 2])).eval(), (torch.randn(2, 3),))
    body = mod["main"].body
    assert isinstance(body, Tuple) and isinstance(body.checked_type, TupleType)
    assert [tuple(f.shape) for f in body.checked_type.fields] == [(2, 3), (), (2, 3)]


def test_input_names():
    mod, _ = from_pytorch(Fn(torch.add).eval(), (torch.randn(2), torch.randn(2)),
                          input_names=["a", "b"])
    assert [p.name_hint for p in mod["main"].params] == ["a", "b"]
    with pytest.raises(FrontendError, match="input_names has 1 names but the model takes 2"):
        from_pytorch(Fn(torch.add).eval(), (torch.randn(2), torch.randn(2)), input_names=["a"])


def test_exported_program_is_accepted():
    ep = torch.export.export(nn.ReLU().eval(), (torch.randn(3),))
    mod, params = from_pytorch(ep)
    assert ops_of(mod) == ["nn.relu"] and params == {}


def test_inplace_ops_on_intermediates_need_no_decomposition():
    from kiln.frontend.pytorch.importer import _needs_decomposition
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True)).eval()
    ep = torch.export.export(model, (torch.randn(1, 3, 8, 8),))
    assert "aten.relu_.default" in {str(n.target) for n in ep.graph.nodes}
    assert not _needs_decomposition(ep)
    mod, _ = from_pytorch(ep)
    assert ops_of(mod) == ["nn.conv2d", "nn.bias_add", "nn.relu"]


def test_inplace_op_whose_input_is_read_again_is_functionalized(verify):
    class AddInPlace(nn.Module):
        def forward(self, x):
            y = x * 2
            z = y.add_(1.0)     # y itself is read below: the update must not be lost
            return y + z
    verify(AddInPlace().eval(), (torch.randn(3),))


def test_unsupported_ops_are_all_listed():
    class Bad(nn.Module):
        def forward(self, x):
            a = torch.logcumsumexp(x, 0)
            b = torch.logcumsumexp(x, 1)
            c = torch.cummax(x, 0).values
            return torch.relu(a + b + c).cummin(-1).values
    with pytest.raises(UnsupportedOpsError) as info:
        from_pytorch(Bad().eval(), (torch.randn(3, 4),))
    err = info.value
    assert isinstance(err, NotImplementedError)
    assert err.op_types == ["aten.cummax.default", "aten.cummin.default",
                            "aten.logcumsumexp.default"]
    assert err.nodes_of("aten.logcumsumexp.default") == ["logcumsumexp", "logcumsumexp_1"]
    msg = str(err)
    assert msg.startswith("3 unsupported op types in PyTorch model (4 nodes):")
    assert "aten.logcumsumexp.default: logcumsumexp, logcumsumexp_1" in msg and "aten.cummax.default: cummax" in msg


def test_unsupported_form_of_a_supported_op():
    model = Fn(lambda x: F.dropout(x, 0.5, training=True)).eval()
    with pytest.raises(UnsupportedOpsError, match=r"aten.dropout.default \(dropout in training "
                                                   r"mode with p = 0.5 \(random; kiln.torch."
                                                   r"optimize\(..., training=True\) compiles "
                                                   r"it\)\): dropout"):
        from_pytorch(model, (torch.randn(1, 1, 4, 4),))


def test_unused_indices_output_is_fine_and_used_indices_are_computed(verify):
    mod, _ = from_pytorch(Fn(lambda x: F.max_pool2d(x, 2)).eval(), (torch.randn(1, 1, 4, 4),))
    assert ops_of(mod) == ["nn.max_pool2d"]
    verify(Fn(lambda x: F.max_pool2d(x, 2, return_indices=True)[1] + 1).eval(),
           (torch.randn(1, 1, 4, 4),))


def test_training_mode_is_refused():
    with pytest.raises(FrontendError, match=r"BatchNorm2d is in training mode; call model.eval"):
        from_pytorch(nn.BatchNorm2d(3), (torch.randn(1, 3, 2, 2),))


class _TrainingBlock(nn.Module):
    # batch norm (batch statistics, running statistics updated), dropout, attention dropout
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(6)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        h = self.drop(self.norm(x))
        q = h.reshape(2, 1, 3, 2)
        return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).reshape(2, 6)


def test_a_training_mode_import_takes_pytorchs_masks_and_returns_buffer_updates():
    import kiln
    from kiln.frontend.pytorch import import_for_training
    from kiln.runtime import GraphExecutor
    # seeded: batch norm over 2 rows can divide by a tiny variance, which magnifies rounding
    torch.manual_seed(0)
    model, x = _TrainingBlock().train(), torch.randn(2, 6)
    imported = import_for_training(model, (x,))
    assert [(m.shape, m.p) for m in imported.masks] == [((2, 6), 0.3), ((2, 1, 3, 3), 0.5)]
    assert imported.mutations == ("norm.running_mean", "norm.running_var",
                                  "norm.num_batches_tracked")
    names = [p.name_hint for p in imported.mod["main"].params]
    assert names[:3] == ["x", *(m.name for m in imported.masks)]
    ex = GraphExecutor(kiln.compile(imported.mod, target="llvm", params=imported.params))
    torch.manual_seed(3)
    for m in imported.masks:            # drawn in eager's order: the same masks as eager's
        ex.set_input(m.name, m.draw().numpy())
    ex.set_input("x", x.numpy())
    ex.run()
    torch.manual_seed(3)
    want = model(x)
    np.testing.assert_allclose(ex.get_output(0).numpy(), want.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    for k, name in enumerate(imported.mutations, 1):
        np.testing.assert_allclose(ex.get_output(k).numpy(), model.get_buffer(name).numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_a_training_mode_import_of_several_outputs_and_what_it_refuses():
    from kiln.frontend.pytorch import import_for_training
    imported = import_for_training(_TwoOutputs().train(), (torch.randn(2, 3),))
    assert imported.num_outputs == 2 and imported.mutations == (
        "norm.running_mean", "norm.running_var", "norm.num_batches_tracked")
    assert len(imported.mod["main"].body.fields) == 5      # the outputs, then the updates
    with pytest.raises(UnsupportedOpsError, match="feature_alpha_dropout.* in training mode"):
        import_for_training(nn.FeatureAlphaDropout(0.2).train(), (torch.randn(2, 3, 4),))


class _TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(3)

    def forward(self, x):
        y = self.norm(x)
        return y, y * 2


def test_bad_arguments():
    with pytest.raises(FrontendError, match="needs example_inputs"):
        from_pytorch(nn.ReLU().eval())
    with pytest.raises(FrontendError, match="takes an nn.Module or an ExportedProgram, got str"):
        from_pytorch("model.pt", ())


def test_dynamic_shapes_import_as_size_variables():
    # (tests/frontend/test_pytorch_dynamic.py compiles and runs such models)
    batch = torch.export.Dim("batch", min=2)
    ep = torch.export.export(nn.Linear(3, 2).eval(), (torch.randn(4, 3),),
                             dynamic_shapes={"input": {0: batch}})
    mod, _ = from_pytorch(ep)
    dim = mod["main"].params[0].checked_type.shape[0]
    assert isinstance(dim, Var) and mod["main"].body.checked_type.shape[0] is dim
    assert dict(mod["main"].attrs["dim_ranges"]) == {dim.name: (2, None)}


def test_data_dependent_shapes_are_refused():
    class DataDependent(nn.Module):
        def forward(self, x):
            return x[x > 0]
    with pytest.raises(FrontendError, match="dynamic value"):
        from_pytorch(DataDependent().eval(), (torch.randn(5),))


def test_control_flow_is_reported_as_unsupported():
    class Cond(nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x - 1, (x,))
    with pytest.raises(UnsupportedOpsError, match="torch.ops.higher_order.cond: cond"):
        from_pytorch(Cond().eval(), (torch.randn(5),))


def test_error_lists_are_capped_per_op():
    err = UnsupportedOpsError([("aten.foo", f"foo_{i}") for i in range(20)])
    assert "foo_7, ... (12 more)" in str(err)
    assert len(err.unsupported) == 20


def test_importing_kiln_frontend_does_not_import_torch():
    code = ("import sys, kiln.frontend; assert 'torch' not in sys.modules; "
            "assert 'onnx' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_inplace_op_on_a_view_is_functionalized(verify):
    class ViewInPlace(nn.Module):
        def forward(self, x):
            y = x * 2
            v = y.view(2, 3)
            v.relu_()           # mutates y through the view
            return y + 1
    verify(ViewInPlace().eval(), (torch.randn(6),))

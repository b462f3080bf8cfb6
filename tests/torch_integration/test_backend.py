"""torch.compile(model, backend="kiln"): results against eager PyTorch, and the per-graph
fallback with its one log line.

Tolerances are those of the frontend's model tests (tests/frontend/conftest.py): float32
outputs within 1e-4 x max|eager output| (max abs error), integers equal.
"""
import logging
import subprocess
import sys

import pytest
import torch
from torch import nn

from kiln.testing.models import bert, resnet18
from kiln.torch import kiln_backend

TOL = {torch.float32: 1e-4, torch.float64: 1e-10}

# torch.export's own deprecation noise, as in tests/frontend
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def assert_close(got, want):
    assert isinstance(got, torch.Tensor), type(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    err = float((got.double() - want.double()).abs().max())
    scale = float(want.double().abs().max())
    tol = TOL[want.dtype]
    assert err <= tol * scale, f"max abs error {err:.3g} > {tol} x {scale:.3g}"


def kiln_records(caplog, level):
    return [r for r in caplog.records if r.name == "kiln.torch" and r.levelno == level]


def compiled_graphs(caplog):
    return [r.getMessage() for r in kiln_records(caplog, logging.INFO)
            if r.getMessage().startswith("compiled graph")]


def fallbacks(caplog):
    return [r.getMessage() for r in kiln_records(caplog, logging.WARNING)]


def test_backend_found_through_the_entry_point_without_importing_kiln():
    script = """
import logging, sys
import torch
logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
assert not [m for m in sys.modules if m == "kiln" or m.startswith("kiln.")]
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
fast = torch.compile(model, backend="kiln")
x = torch.randn(2, 4)
with torch.no_grad():
    got, want = fast(x), model(x)
assert "kiln.torch.backend" in sys.modules
assert (got - want).abs().max() <= 1e-4 * want.abs().max(), (got, want)
print("OK")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "OK" in done.stdout
    assert "kiln.torch compiled graph" in done.stderr, done.stderr[-3000:]
    assert "cannot compile" not in done.stderr


def test_resnet18_matches_eager(caplog):
    caplog.set_level(logging.INFO, logger="kiln.torch")
    model = resnet18(seed=1, width=8, layers=(1, 1, 1, 1), num_classes=10)
    fast = torch.compile(model, backend="kiln")
    gen = torch.Generator().manual_seed(0)
    x1, x2 = (torch.randn(1, 3, 32, 32, generator=gen) for _ in range(2))
    with torch.no_grad():
        y1 = fast(x1)
        kept = y1.clone()
        y2 = fast(x2)
        assert_close(y1, model(x1))
        assert_close(y2, model(x2))
    # The second call wrote a new tensor: the first result is not overwritten.
    assert torch.equal(y1, kept) and not torch.equal(y1, y2)
    assert len(compiled_graphs(caplog)) == 1 and fallbacks(caplog) == []


def test_bert_matches_eager(caplog):
    caplog.set_level(logging.INFO, logger="kiln.torch")
    model = bert(seed=3, layers=2, hidden=32, heads=4, vocab_size=64, max_position=32)
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 64, (1, 12), generator=gen)
    mask = torch.ones(1, 12, dtype=torch.int64)
    mask[:, 9:] = 0
    fast = torch.compile(model, backend="kiln")
    with torch.no_grad():
        assert_close(fast(ids, mask), model(ids, mask))
    assert len(compiled_graphs(caplog)) == 1 and fallbacks(caplog) == []


class ScanHead(nn.Module):
    """A conv net with torch.cummax (aten.cummax.default), which kiln does not translate."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(torch.cummax(self.conv(x), dim=2).values.flatten(1))


def test_unsupported_op_runs_in_pytorch_between_kiln_parts(caplog):
    caplog.set_level(logging.INFO, logger="kiln.torch")
    from kiln.frontend.pytorch import supported_ops
    assert "aten.cummax.default" not in supported_ops()
    torch.manual_seed(0)
    model = ScanHead().eval()
    x = torch.randn(2, 3, 8, 8)
    fast = torch.compile(model, backend="kiln")
    with torch.no_grad():
        assert_close(fast(x), model(x))
        assert_close(fast(x + 1), model(x + 1))
    (line,) = fallbacks(caplog)
    assert line.startswith("compiled graph") and "in parts: 2 part(s) compiled by kiln" in line
    assert line.endswith("PyTorch runs aten.cummax.default") and "\n" not in line


class ScanOnly(nn.Module):
    def forward(self, x):
        return torch.cummax(x, dim=1).values


def test_a_graph_with_nothing_kiln_compiles_falls_back_whole(caplog):
    x = torch.randn(3, 5)
    with torch.no_grad():
        assert_close(torch.compile(ScanOnly(), backend="kiln")(x),
                     torch.cummax(x, dim=1).values)
    (line,) = fallbacks(caplog)
    assert "kiln cannot compile graph" in line and "aten.cummax.default" in line


class TwoOutputsAroundScan(nn.Module):
    """Parts with several outputs and inputs, a weight used after the PyTorch op, and an op
    whose converter refuses it only for its arguments (bicubic grid sampling with border
    padding): the part holding it fails, and the graph is split again without it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(6, 5)

    def forward(self, x, grid):
        y = torch.relu(self.conv(x))
        c = torch.cummax(y, 2).values
        g = nn.functional.grid_sample(y, grid, mode="bicubic", padding_mode="border",
                                      align_corners=False)
        return torch.tanh(self.fc(c)) * g.mean(), c.sum(dim=(2, 3)) + y.mean()


def _around_scan_inputs():
    return torch.randn(2, 3, 8, 8), torch.rand(2, 5, 5, 2) * 2 - 1


def test_parts_with_several_outputs_and_an_op_refused_for_its_arguments(caplog):
    caplog.set_level(logging.INFO, logger="kiln.torch")
    torch.manual_seed(2)
    model = TwoOutputsAroundScan().eval()
    x, grid = _around_scan_inputs()
    fast = torch.compile(model, backend="kiln")
    with torch.no_grad():
        for g, w in zip(fast(x, grid), model(x, grid)):
            assert_close(g, w)
        model.fc.weight.mul_(-1)            # an in-place update reaches the kiln part
        for g, w in zip(fast(x, grid), model(x, grid)):
            assert_close(g, w)
    (line,) = [m for m in fallbacks(caplog) if "in parts" in m]
    assert line.endswith("2 part(s) compiled by kiln (8 kernel calls); PyTorch runs "
                         "aten.cummax.default, aten.grid_sampler_2d.default"), line


def test_a_part_kiln_fails_on_runs_in_pytorch_and_is_named(caplog, monkeypatch):
    import kiln.torch.backend as backend
    real = backend.KilnGraph

    def failing_on_tanh(gm, inputs, settings, name="graph"):
        ops = {str(n.target) for n in gm.graph.nodes}
        if "/" in name and "aten.tanh.default" in ops:
            raise RuntimeError("no tanh today")
        return real(gm, inputs, settings, name)
    monkeypatch.setattr(backend, "KilnGraph", failing_on_tanh)
    torch.manual_seed(3)
    model = TwoOutputsAroundScan().eval()
    x, grid = _around_scan_inputs()
    with torch.no_grad():
        for g, w in zip(torch.compile(model, backend="kiln")(x, grid), model(x, grid)):
            assert_close(g, w)
    (line,) = [m for m in fallbacks(caplog) if "in parts" in m]
    assert "kiln failed on 1 part(s), run by PyTorch: kiln failed to compile it: " \
        "RuntimeError: no tanh today" in line


class TwoHalves(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        return torch.tanh(self.b(h)) * 2


def test_graph_break_gives_two_kiln_graphs(caplog):
    caplog.set_level(logging.INFO, logger="kiln.torch")
    torch.manual_seed(1)
    model = TwoHalves().eval()
    x = torch.randn(3, 6)
    fast = torch.compile(model, backend="kiln")
    with torch.no_grad():
        assert_close(fast(x), model(x))
    assert len(compiled_graphs(caplog)) == 2 and fallbacks(caplog) == []


def test_weights_as_graph_attributes(caplog):
    """With freezing on, dynamo hands weights over as get_attr nodes instead of inputs."""
    caplog.set_level(logging.INFO, logger="kiln.torch")
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.ReLU()).eval()
    seen = []

    def spy(gm, example_inputs):
        seen.extend(n.op for n in gm.graph.nodes)
        return kiln_backend(gm, example_inputs)

    x = torch.randn(3, 4)
    with torch._inductor.config.patch(freezing=True), torch.no_grad():
        assert_close(torch.compile(model, backend=spy)(x), model(x))
    assert seen.count("get_attr") == 6 and seen.count("placeholder") == 1
    assert len(compiled_graphs(caplog)) == 1 and fallbacks(caplog) == []


def test_a_graph_that_needs_gradients_trains_in_kiln_like_eager(caplog):
    # kiln's own gradient pass: forward and backward compiled by kiln, gradients reaching the
    # parameters (dynamo's graph inputs), dropout drawing eager's masks, batch norm updating
    # its running statistics in place
    import copy
    caplog.set_level(logging.INFO, logger="kiln.torch")
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Dropout(0.25), nn.Linear(4 * 6 * 6, 3)).train()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8)
    fast = torch.compile(model, backend="kiln")
    for step in range(2):
        torch.manual_seed(step)
        y = fast(x)
        torch.manual_seed(step)
        want = reference(x)
        assert_close(y.detach(), want.detach())
        y.pow(2).sum().backward()
        want.pow(2).sum().backward()
    # (the convolution's bias, before batch norm, has a gradient of 0 up to rounding: gradients
    # are compared against the largest)
    largest = max(float(q.grad.abs().max()) for q in reference.parameters())
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        err = float((p.grad - q.grad).abs().max())
        assert err <= 1e-4 * largest, f"{name}: {err:.3g} > 1e-4 x {largest:.3g}"
    for (name, b), c in zip(model.named_buffers(), reference.buffers()):
        assert_close(b, c) if b.is_floating_point() else torch.testing.assert_close(b, c)
    assert fallbacks(caplog) == []
    (line,) = compiled_graphs(caplog)
    assert "forward and backward" in line


def test_a_graph_with_two_outputs_that_needs_gradients_trains_in_kiln(caplog):
    import copy

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x):
            y = self.linear(x)
            return y, y.tanh()
    caplog.set_level(logging.INFO, logger="kiln.torch")
    torch.manual_seed(0)
    model, x = Two(), torch.randn(2, 4)
    reference = copy.deepcopy(model)
    a, b = torch.compile(model, backend="kiln")(x)
    c, d = reference(x)
    assert_close(a.detach(), c.detach()), assert_close(b.detach(), d.detach())
    (a.sum() + b.pow(2).sum()).backward()
    (c.sum() + d.pow(2).sum()).backward()
    assert_close(model.linear.weight.grad, reference.linear.weight.grad)
    assert fallbacks(caplog) == [] and len(compiled_graphs(caplog)) == 1


def test_dynamic_shapes_compile_once_for_every_size(caplog):
    caplog.set_level(logging.INFO, logger="kiln.torch")
    model = bert(seed=3, layers=2, hidden=32, heads=4, vocab_size=64, max_position=64).eval()
    fast = torch.compile(model, backend="kiln", dynamic=True)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for length in (5, 9, 40, 3):
            ids = torch.randint(0, 64, (1, length), generator=g)
            assert_close(fast(ids), model(ids))
    assert fallbacks(caplog) == []
    (line,) = compiled_graphs(caplog)         # one compile serves every length
    assert "for every size" in line and "once" in line


def test_a_number_dynamo_passes_as_a_tensor_is_compiled_in_and_watched(caplog):
    # dynamic=True makes a module's float attributes graph inputs (layer norm's eps here):
    # kiln compiles them in and compiles again should one change
    caplog.set_level(logging.INFO, logger="kiln.torch")
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)).eval()
    fast = torch.compile(model, backend="kiln", dynamic=True)
    with torch.no_grad():
        for rows in (3, 6):
            x = torch.randn(rows, 8)
            assert_close(fast(x), model(x))
        model[1].eps = 0.5
        assert_close(fast(x), model(x))
    assert fallbacks(caplog) == []


def test_dynamic_shapes_in_training_fall_back(caplog):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    x = torch.randn(5, 4)
    assert_close(torch.compile(model, backend="kiln", dynamic=True)(x).detach(),
                 model(x).detach())
    (line,) = fallbacks(caplog)
    assert "dynamic shapes in a training graph" in line and "dynamic=False" in line


def test_unsupported_dtype_falls_back(caplog):
    model = nn.Linear(4, 3).to(torch.bfloat16).eval()
    x = torch.randn(2, 4, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(torch.compile(model, backend="kiln")(x), model(x))
    (line,) = fallbacks(caplog)
    assert "dtype torch.bfloat16 is not supported by kiln" in line


def test_weights_changed_in_place_are_recompiled(caplog):
    caplog.set_level(logging.INFO, logger="kiln.torch")
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    x = torch.randn(2, 4)
    fast = torch.compile(model, backend="kiln")
    with torch.no_grad():
        assert_close(fast(x), model(x))
        model[0].bias.add_(1.0)
        assert_close(fast(x), model(x))
    assert any("weight inputs changed" in r.getMessage()
               for r in kiln_records(caplog, logging.INFO))
    assert fallbacks(caplog) == []


def test_two_instances_of_one_class_keep_their_own_weights(caplog):
    """Dynamo may run one compiled graph for both modules (weights are unguarded inputs)."""
    caplog.set_level(logging.INFO, logger="kiln.torch")
    torch.manual_seed(5)
    a, b = (nn.Sequential(nn.Linear(4, 3), nn.Tanh()).eval() for _ in range(2))
    fast_a, fast_b = torch.compile(a, backend="kiln"), torch.compile(b, backend="kiln")
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(2):
            assert_close(fast_a(x), a(x))
            assert_close(fast_b(x), b(x))
    assert fallbacks(caplog) == [] and compiled_graphs(caplog)
    # Each weight set is compiled once, however the calls alternate.
    changed = [r for r in kiln_records(caplog, logging.INFO)
               if "weight inputs changed" in r.getMessage()]
    assert len(changed) <= 1


def test_options_reach_kiln_and_bad_ones_are_errors(tmp_path):
    model = nn.Linear(3, 2).eval()
    x = torch.randn(1, 3)
    with torch.no_grad():
        fast = torch.compile(model, backend="kiln", options={"opt_level": 1})
        assert_close(fast(x), model(x))
        torch._dynamo.reset()
        with pytest.raises(Exception, match="unknown kiln option"):
            torch.compile(model, backend="kiln", options={"colour": "red"})(x)
        torch._dynamo.reset()
        with pytest.raises(Exception, match="no mode 'max-autotune'"):
            torch.compile(model, backend="kiln", mode="max-autotune")(x)
        torch._dynamo.reset()
        with pytest.raises(Exception, match="vulkan"):
            torch.compile(model, backend="kiln", options={"target": "vulkan"})(x)
        torch._dynamo.reset()
        missing = tmp_path / "none.jsonl"
        with pytest.raises(Exception, match="tuning log .*none.jsonl does not exist"):
            torch.compile(model, backend="kiln", options={"tuning_log": str(missing)})(x)


def test_reason_of_many_unsupported_ops_is_one_line():
    from kiln.frontend.common import UnsupportedOpsError
    from kiln.torch.backend import _reason_of
    err = UnsupportedOpsError([(f"aten.op{k}.default", f"n{j}") for k in range(6)
                               for j in range(5)])
    reason = _reason_of(err)
    assert "\n" not in reason
    assert reason.startswith("unsupported ops aten.op0.default (nodes n0, n1, n2, ...)")
    assert reason.endswith("and 2 more")
    assert reason.count("aten.op") == 4

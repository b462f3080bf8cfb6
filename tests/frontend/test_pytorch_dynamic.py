"""PyTorch models exported with dynamic dimensions (torch.export Dims): one kiln library runs
every size in the Dim's range and equals PyTorch (float32: max |err| <= 1e-4 x max |y|)."""
import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
from kiln.runtime import ArgumentError, GraphExecutor
from kiln.testing.models import bert, resnet18

TOL = 1e-4


def _check(m, model, inputs):
    m.run(**{name: x.numpy() for name, x in zip(m.get_input_names(), inputs)})
    with torch.no_grad():
        ref = model(*inputs).numpy()
    out = m.get_output(0).numpy()
    assert out.shape == ref.shape
    assert np.abs(out - ref).max() <= TOL * np.abs(ref).max()


@pytest.fixture(scope="module")
def small_bert():
    model = bert(seed=3, layers=2, hidden=32, heads=4, vocab_size=64, max_position=64)
    ids = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(1, 16, dtype=torch.int64)
    seq = Dim("seq", min=1, max=64)
    mod, params = kiln.frontend.from_pytorch(model, (ids, mask),
                                             dynamic_shapes=({1: seq}, {1: seq}))
    return model, mod, kiln.compile(mod, params=params)


def test_bert_with_a_symbolic_sequence_length_equals_pytorch_at_every_length(small_bert):
    model, mod, lib = small_bert
    main = mod["main"]
    seq = main.params[0].checked_type.shape[1]
    assert seq.name == "seq" and main.params[1].checked_type.shape[1] is seq
    assert dict(main.attrs["dim_ranges"]) == {"seq": (1, 64)}
    assert lib.graph["dims"] == {"seq": [1, 64]}
    m = GraphExecutor(lib)
    g = torch.Generator().manual_seed(1)
    for length in (1, 7, 16, 64, 3):
        ids = torch.randint(0, 64, (1, length), generator=g)
        mask = torch.ones(1, length, dtype=torch.int64)
        mask[:, length * 3 // 4 + 1:] = 0          # padding at the end
        _check(m, model, (ids, mask))


def test_a_length_outside_the_dims_range_is_named(small_bert):
    _, _, lib = small_bert
    m = GraphExecutor(lib)
    ids = np.zeros((1, 65), "int64")
    with pytest.raises(ArgumentError, match=r"dimension 1 \(seq\) is 65, outside its range "
                                            r"\[1, 64\]"):
        m.run(input_ids=ids, attention_mask=ids)
    with pytest.raises(ArgumentError, match="disagree on seq: 5 and 6"):
        m.run(input_ids=np.zeros((1, 5), "int64"), attention_mask=np.zeros((1, 6), "int64"))


def test_resnet_with_a_symbolic_batch_equals_pytorch():
    model = resnet18(seed=1, width=8, layers=(1, 1, 1, 1), num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    mod, params = kiln.frontend.from_pytorch(model, (x,),
                                             dynamic_shapes=({0: Dim("batch", max=8)},))
    lib = kiln.compile(mod, params=params)
    assert list(lib.graph["dims"]) == ["batch"]
    m = GraphExecutor(lib)
    for batch in (1, 2, 5):
        _check(m, model, (torch.randn(batch, 3, 32, 32,
                                      generator=torch.Generator().manual_seed(batch)),))


def test_an_exported_program_with_dynamic_shapes_imports_with_torchs_symbol_names():
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.GELU()).eval()
    x = torch.randn(3, 8)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: Dim("rows", max=100)},))
    mod, params = kiln.frontend.from_pytorch(program)
    (name,) = dict(mod["main"].attrs["dim_ranges"])
    assert name.startswith("s")           # torch's symbol: the Dim's name is not kept
    m = GraphExecutor(kiln.compile(mod, params=params))
    for rows in (1, 100):
        _check(m, model, (torch.randn(rows, 8),))


def test_flattening_a_dynamic_dimension_gives_a_size_expression():
    class Flatten(torch.nn.Module):
        def forward(self, x):
            return torch.flatten(x, 0, 1).exp()

    x = torch.randn(3, 4, 5)
    mod, _ = kiln.frontend.from_pytorch(Flatten().eval(), (x,), dynamic_shapes=({0: Dim("n")},))
    dim = mod["main"].body.checked_type.shape[0]
    assert str(dim) in ("4*n", "n*4")
    lib = kiln.compile(mod)
    m = GraphExecutor(lib)
    for n in (2, 9):
        _check(m, Flatten(), (torch.randn(n, 4, 5),))


def test_optimize_with_dynamic_shapes_serves_every_batch():
    import kiln.torch
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.GELU()).eval()
    fast = kiln.torch.optimize(model, (torch.randn(3, 16),),
                               dynamic_shapes=({0: Dim("batch", max=40)},))
    assert [str(s) for s in fast.input_specs] == ["float32[batchx16]"]
    for batch in (1, 9, 40, 2):
        x = torch.randn(batch, 16)
        with torch.no_grad():
            want = model(x)
        got = fast(x)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ArgumentError, match=r"\(batch\) is 41, outside its range \[1, 40\]"):
        fast(torch.randn(41, 16))


def test_slices_at_dynamic_offsets():
    # positions of new tokens after a past of dynamic length (a KV cache's position ids): the
    # kernel that slices at `past` takes it as an argument, since no buffer of it has that size
    class Positions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.randn(1, 64, 4))

        def forward(self, x, past):
            start = past.shape[1]
            return x[:, 1:].exp(), (x + self.table[:, start:start + x.shape[1]])[:, :-1]

    model = Positions().eval()
    x, past = torch.randn(1, 9, 4), torch.randn(1, 5, 4)
    mod, params = kiln.frontend.from_pytorch(model, (x, past), dynamic_shapes=(
        {1: Dim("n", min=3, max=32)}, {1: Dim("past", min=2, max=40)}))
    lib = kiln.compile(mod, params=params)
    (kernel,) = [k for k in lib.graph["kernels"] if k.get("sizes") == ["past"]]
    m = GraphExecutor(lib)
    for n, p in ((3, 2), (20, 30), (32, 32)):
        a, b = torch.randn(1, n, 4), torch.randn(1, p, 4)
        m.run(x=a.numpy(), past=b.numpy())
        for k, want in enumerate(model(a, b)):
            np.testing.assert_allclose(m.get_output(k).numpy(), want.numpy(), rtol=1e-6,
                                       atol=1e-6)
    # 40 + 30 > 64 rows of the table: refused before any kernel reads past its end
    with pytest.raises(ArgumentError, match="put a slice outside its tensor"):
        m.run(x=np.zeros((1, 30, 4), "float32"), past=np.zeros((1, 40, 4), "float32"))
    # the slicing kernel called directly: its size argument keeps its compiled range
    f = lib.get_function(kernel["func"])
    n_args = len(f.info.params) - 1
    with pytest.raises(ArgumentError, match=r"41 is outside \[2, 40\]"):
        f(*[np.zeros(tuple(d if isinstance(d, int) else 3 for d in p.shape), p.dtype)
            for p in f.info.params[:n_args]], 41)


def test_a_concatenation_along_a_dynamic_axis():
    class Cache(torch.nn.Module):
        def forward(self, past, new):
            k = torch.cat([past, new], 1)
            return k * 2.0 + torch.cat([new, new], 1).sum()

    model = Cache().eval()
    mod, _ = kiln.frontend.from_pytorch(model, (torch.randn(1, 5, 8), torch.randn(1, 3, 8)),
                                        dynamic_shapes=({1: Dim("past", max=64)},
                                                        {1: Dim("new", max=16)}))
    m = GraphExecutor(kiln.compile(mod))
    for p, n in ((2, 1), (64, 16)):
        _check(m, model, (torch.randn(1, p, 8), torch.randn(1, n, 8)))

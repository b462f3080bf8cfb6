"""ResNet-18, MobileNet-V2 and a BERT encoder from PyTorch: imported, compiled, run, compared.

Small configurations (same architectures, fewer channels/layers) always run; the real sizes
(ResNet-18 and MobileNet-V2 at 224x224, BERT-base: 12 layers, hidden 768, 12 heads, sequence
128) are marked `full_model`. Bounds are the issue's: float32 max abs error <= 1e-4 x
max|output|, float64 <= 1e-10 relative.
"""
import pytest
import torch

from kiln.testing.models import bert, example_input, mobilenet_v2, resnet18

SMALL = {
    "resnet18": lambda: resnet18(seed=1, width=8, num_classes=10),
    "mobilenet_v2": lambda: mobilenet_v2(seed=2, width_mult=0.25, num_classes=10),
    "bert": lambda: bert(seed=3, layers=2, hidden=32, heads=4, vocab_size=64, max_position=32),
}

FULL = {
    "resnet18": lambda: resnet18(seed=1),
    "mobilenet_v2": lambda: mobilenet_v2(seed=2),
    "bert": lambda: bert(seed=3),
}


def _inputs(model, dtype, image_size, seq_len, masked):
    inputs = example_input(model, image_size=image_size, seq_len=seq_len, seed=5, dtype=dtype)
    if masked and inputs[0].dtype == torch.int64:
        mask = torch.ones(inputs[0].shape, dtype=torch.int64)
        mask[:, seq_len * 3 // 4:] = 0    # padding tokens at the end, as a tokenizer makes them
        inputs = inputs + (mask,)
    return inputs


def _check(verify, model, dtype, image_size, seq_len, masked=True):
    if dtype == torch.float64:
        model = model.double()
    inputs = _inputs(model, dtype, image_size, seq_len, masked)
    mod, params, errs = verify(model, inputs)
    main = mod["main"]
    assert main.ret_type.dtype == str(dtype).removeprefix("torch.")
    # Every weight is a parameter of main, named as in the state_dict.
    state = model.state_dict()
    for name, value in params.items():
        assert name in state
        assert value.shape == tuple(state[name].shape)
    return errs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert"])
def test_small_models(verify, name, dtype):
    _check(verify, SMALL[name](), dtype, image_size=32, seq_len=12)


def test_bert_without_mask(verify):
    _check(verify, SMALL["bert"](), torch.float32, image_size=None, seq_len=12, masked=False)


def test_bert_mask_changes_output(run_kiln):
    """The mask reaches the graph: masked positions must not influence unmasked outputs."""
    from kiln.frontend import from_pytorch
    model = SMALL["bert"]()
    ids, mask = _inputs(model, None, None, 12, True)
    mod, params = from_pytorch(model, (ids, mask))
    changed = ids.clone()
    changed[:, 9:] = (changed[:, 9:] + 1) % 64    # only the masked-out tokens differ
    a = run_kiln(mod, params, [ids.numpy(), mask.numpy()])[0]
    b = run_kiln(mod, params, [changed.numpy(), mask.numpy()])[0]
    assert abs(a[:, :9] - b[:, :9]).max() <= 1e-4 * abs(a).max()
    assert abs(a[:, 9:] - b[:, 9:]).max() > 1e-3


@pytest.mark.full_model
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert"])
def test_full_size_models(verify, name, dtype):
    _check(verify, FULL[name](), dtype, image_size=224, seq_len=128)


def _layers():
    torch.manual_seed(4)
    nn = torch.nn
    return {
        "multihead_attention": (nn.MultiheadAttention(16, 4, batch_first=True),
                                (torch.randn(2, 5, 16),) * 3),
        "transformer_encoder_layer": (nn.TransformerEncoderLayer(16, 4, 32, batch_first=True),
                                      (torch.randn(2, 5, 16),)),
        "lstm": (nn.LSTM(8, 16, batch_first=True), (torch.randn(2, 5, 8),)),
        "gru": (nn.GRU(8, 16), (torch.randn(5, 2, 8),)),
        "decoder_block": (nn.Sequential(nn.ConvTranspose2d(3, 4, 4, 2, 1), nn.BatchNorm2d(4),
                                        nn.LeakyReLU(), nn.Upsample(scale_factor=2),
                                        nn.Conv2d(4, 2, 3, padding=1), nn.Hardswish()),
                          (torch.randn(1, 3, 8, 8),)),
        "instance_norm_pixel_shuffle": (nn.Sequential(nn.InstanceNorm2d(8, affine=True),
                                                      nn.PixelShuffle(2), nn.Mish()),
                                        (torch.randn(1, 8, 4, 4),)),
    }


@pytest.mark.parametrize("name", sorted(_layers()))
def test_common_layers(verify, name):
    """torch.nn layers beyond the three models (their ATen decompositions included)."""
    model, inputs = _layers()[name]
    verify(model.eval(), inputs)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert"])
def test_reference_models_are_seeded(name):
    a, b = SMALL[name](), SMALL[name]()
    assert not a.training
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(va, vb), k
    norms = [m for m in a.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    # Running statistics away from (0, 1), so a batch norm dropped or misapplied shows.
    assert all(float((m.running_var - 1).abs().max()) > 0.05 for m in norms)
    assert all(float(m.running_mean.abs().max()) > 0.01 for m in norms)
    other = {"resnet18": lambda: resnet18(seed=9, width=8, num_classes=10),
             "mobilenet_v2": lambda: mobilenet_v2(seed=9, width_mult=0.25, num_classes=10),
             "bert": lambda: bert(seed=9, layers=2, hidden=32, heads=4, vocab_size=64,
                                  max_position=32)}[name]()
    assert any(not torch.equal(va, vo) for va, vo in zip(a.state_dict().values(),
                                                         other.state_dict().values()))

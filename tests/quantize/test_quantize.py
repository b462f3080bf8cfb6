"""kiln.quantize: observers, calibration into a QDQ graph that compiles to integer kernels, the
per-layer report, and the errors for bad input.

The agreement check uses a small ResNet (kiln.testing.models, seeded random weights) whose float
predictions are decisive (its top-1 margins are far above the quantization noise): the
quantized model must pick the same class on at least 95% of 64 seeded inputs. A full-size
random-weight ResNet-18 is not a fair judge: its float model's own top-2 margin is a few
hundredths of its logits' range (see bench/quant.py's note).
"""
import numpy as np
import pytest
import torch

import kiln
from kiln.driver.stages import module_at_stage
from kiln.frontend import from_pytorch
from kiln.graph import post_order
from kiln.quantize import Entropy, MinMax, Percentile, make_observer, quantize
from kiln.target import Target
from kiln.testing import models

RNG = np.random.default_rng(0)


# ------------------------------------------------------------------------------ observers
def test_every_range_includes_zero_and_percentile_clips_outliers():
    data = np.abs(RNG.standard_normal(20000)) + 1.0          # all positive
    data[:5] = 1000.0                                         # outliers
    ranges = {}
    for obs in (MinMax(), Percentile(99.9), Entropy()):
        obs.observe(data[:10000])
        obs.observe(data[10000:] * 1.5)                      # the histogram widens
        lo, hi = obs.range()
        scale, zero = obs.qparams()
        assert lo <= 0 <= hi and zero == 0 and scale > 0
        ranges[obs.name] = hi
    assert ranges["minmax"] == 1000.0
    assert ranges["percentile"] < 20 and ranges["entropy"] < 1000.0


def test_entropy_keeps_most_of_a_relu_distribution():
    relu = np.maximum(RNG.standard_normal(200000), 0)        # half the values are zero
    obs = Entropy()
    obs.observe(relu)
    hi = obs.range()[1]
    assert np.quantile(relu, 0.99) < hi <= relu.max()


def test_unknown_observer_is_named():
    with pytest.raises(ValueError, match="unknown observer 'kl'.*minmax"):
        make_observer("kl")


# ------------------------------------------------------------------------------ quantize
@pytest.fixture(scope="module")
def small_resnet():
    model = models.resnet18(seed=0, width=16).eval()
    mod, params = from_pytorch(model, (torch.randn(1, 3, 64, 64),))
    batches = [RNG.standard_normal((1, 3, 64, 64)).astype("float32") for _ in range(6)]
    return mod, params, batches


def _top1(lib, name, inputs):
    ex = kiln.runtime.GraphExecutor(lib)
    out = []
    for x in inputs:
        ex.run(**{name: x})
        out.append(int(ex.get_output(0).numpy().argmax()))
    return np.array(out)


@pytest.mark.parametrize("observer", ["minmax", "percentile", "entropy"])
def test_a_quantized_resnet_agrees_with_float_and_runs_integer_kernels(small_resnet, observer):
    mod, params, batches = small_resnet
    mod8, params8, report = quantize(mod, params, batches, observer=observer)
    assert len(report.layers) == 21 and all(np.isfinite(r.sqnr_db) for r in report.layers)
    assert min(r.sqnr_db for r in report.layers) > 15, str(report)
    text = str(report)
    assert "21 layers quantized" in text and "SQNR dB" in text

    optimized = module_at_stage(mod8, "optimized", params=params8)
    ops = [e.op.name for e in post_order(optimized["main"]) if hasattr(getattr(e, "op", None),
                                                                        "name")]
    if Target("llvm").has_feature("avx2"):
        assert ops.count("nn.contrib_conv2d_nchwc_int8") == 20, ops

    name = mod["main"].params[0].name_hint
    inputs = [np.random.default_rng(100 + k).standard_normal((1, 3, 64, 64)).astype("float32")
              for k in range(64)]
    same = _top1(kiln.compile(mod8, params=params8), name, inputs) == \
        _top1(kiln.compile(mod, params=params), name, inputs)
    assert same.mean() >= 0.95, same.mean()


def test_skipped_layers_stay_float(small_resnet):
    mod, params, batches = small_resnet
    result = quantize(mod, params, batches[:2], skip=["nn.dense"])
    assert len(result.report.layers) == 20 and result.report.skipped == ["nn.dense"]
    assert "left in float32: nn.dense" in str(result.report)
    ops = [e.op.name for e in post_order(result.mod["main"]) if hasattr(getattr(e, "op", None),
                                                                        "name")]
    assert ops.count("nn.dense") == 1


def test_bad_calibration_data_is_named(small_resnet):
    mod, params, _ = small_resnet
    with pytest.raises(ValueError, match="at least one calibration batch"):
        quantize(mod, params, [])
    with pytest.raises(ValueError, match="lacks input"):
        quantize(mod, params, [{"image": np.zeros((1, 3, 64, 64), "float32")}])
    with pytest.raises(ValueError, match="weight_bits must be 7 or 8"):
        quantize(mod, params, [np.zeros((1, 3, 64, 64), "float32")], weight_bits=4)


def test_a_skip_name_that_matches_nothing_is_an_error(small_resnet):
    mod, params, batches = small_resnet
    with pytest.raises(ValueError, match="skip names no op or node of the model: conv9"):
        quantize(mod, params, batches[:1], skip=["conv9"])

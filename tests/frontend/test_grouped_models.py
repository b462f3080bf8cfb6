"""Models with grouped (not depthwise) convolutions, from PyTorch: ResNeXt, ShuffleNet-v1 and
-v2, RegNetX (kiln.testing.grouped_models), small versions of the real architectures, imported,
compiled and compared with torch. Every grouped convolution must run in the blocked layout or
as a matrix product (issue 34), not in the NCHW fallback.

Bound: float32 max abs error <= 1e-4 x max|output| (conftest TOL).
"""
import pytest

from kiln.graph import post_order
from kiln.testing.grouped_models import (channel_shuffle, regnet_x_400mf, resnext50_32x4d,
                                         shufflenet_v1, shufflenet_v2)
from kiln.testing.models import example_input

SMALL = {
    # 32 groups of 2, 4, 8, 16 channels over the stages
    "resnext": lambda: resnext50_32x4d(seed=1, width=32, layers=(1, 1, 1, 1), base_width=4,
                                       num_classes=10),
    # grouped 1x1s: 20 -> 15 ... per group (g=3), 6 -> 45 (g=8)
    "shufflenet_v1_g3": lambda: shufflenet_v1(seed=2, groups=3, scale=0.25, repeats=(2, 1, 1),
                                              num_classes=10),
    "shufflenet_v1_g8": lambda: shufflenet_v1(seed=3, groups=8, scale=0.25, repeats=(1, 2, 1),
                                              num_classes=10),
    "shufflenet_v2": lambda: shufflenet_v2(seed=4, repeats=(1, 2, 1),
                                           channels=(8, 16, 32, 64, 128), num_classes=10),
    "regnet_x": lambda: regnet_x_400mf(seed=5, depths=(1, 1, 2, 1), widths=(16, 32, 48, 64),
                                       group_width=8, num_classes=10),
}


def _grouped_in_nchw(mod, params) -> list:
    """The grouped nn.conv2d calls left after kiln's graph passes (the NCHW fallback)."""
    from kiln.driver.stages import module_at_stage
    fn = module_at_stage(mod, "optimized", "llvm", params)["main"]
    return [e for e in post_order(fn.body)
            if getattr(getattr(e, "op", None), "name", "") == "nn.conv2d"
            and 1 < e.attrs.groups < e.args[0].checked_type.shape[1]]


@pytest.mark.parametrize("name", list(SMALL))
def test_small_grouped_models_match_torch(verify, name):
    model = SMALL[name]()
    mod, params, errs = verify(model, example_input(model, image_size=64, seed=6))
    assert _grouped_in_nchw(mod, params) == []


def test_channel_shuffle_interleaves_groups():
    import torch
    x = torch.arange(12.).reshape(1, 12, 1, 1)
    assert channel_shuffle(x, 3).flatten().tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]

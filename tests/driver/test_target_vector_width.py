"""The AVX2 fallback: kiln.compile for a target with 256-bit vectors (here -mcpu=haswell, which
this AVX-512 machine also runs) picks 8-lane channel blocks and register tiles that fit 16
ymm registers, uses no zmm register, and gives the same results."""
import numpy as np
import torch
import torch.nn as nn

import kiln
from kiln.frontend import from_pytorch
from kiln.target import Target, current_target
from kiln.topi.x86.conv2d_nchwc import channel_tile
from kiln.topi.x86.utils import vector_lanes, vector_registers

RTOL = ATOL = 1e-4
AVX2 = "llvm -mcpu=haswell"


def test_current_target_context_nests_and_defaults_to_host():
    host = current_target()
    assert host == Target("llvm")
    with Target(AVX2) as t:
        assert current_target() is t and vector_lanes("float32") == 8 and vector_registers() == 16
        with Target("llvm -mcpu=skylake-avx512"):
            assert vector_lanes("float32") == 16 and vector_registers() == 32
        assert current_target() is t
    assert current_target() == host
    assert channel_tile(4, 56, 56, 16)[0] * np.prod(channel_tile(4, 56, 56, 16)[1:]) <= 12


class _Net(nn.Module):
    """conv-bn-relu, depthwise after a blocked conv, residual add, global pool, dense."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, 2, 1)
        self.bn = nn.BatchNorm2d(32)
        self.dw = nn.Conv2d(32, 32, 3, 1, 1, groups=32)
        self.c2 = nn.Conv2d(32, 32, 1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        z = torch.relu(self.c2(torch.clamp(self.dw(y), 0, 6)) + y)
        return self.fc(z.mean(dim=(2, 3)))


def test_avx2_target_compiles_blocked_by_8_without_zmm():
    torch.manual_seed(0)
    model = _Net().eval()
    x = torch.randn(1, 3, 30, 30)
    mod, params = from_pytorch(model, (x,))
    lib = kiln.compile(mod, target=AVX2, params=params)
    blocked = {tuple(e["shape"])[-1] for e in lib.graph["entries"] if len(e["shape"]) == 5}
    assert blocked == {8, 3}                 # 32 channels in blocks of 8; the RGB input whole
    asm = lib.module.get_source("asm")
    assert "%ymm" in asm and "%zmm" not in asm
    ex = kiln.runtime.GraphExecutor(lib)
    ex.set_input(ex.get_input_names()[0], x.numpy())
    ex.run()
    with torch.inference_mode():
        ref = model(x).numpy()
    np.testing.assert_allclose(ex.get_output(0).numpy(), ref, rtol=RTOL, atol=ATOL)
    assert current_target() == Target("llvm")      # compile left the context

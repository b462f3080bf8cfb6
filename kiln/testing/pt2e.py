"""PyTorch 2 export quantization (PT2E) of a model, as a user of torchao does it, for kiln's
tests and benchmarks: static quantization with the X86InductorQuantizer's default configuration
(uint8 activations, per-channel int8 weights), calibrated on seeded random inputs.

Example:
    >>> converted = pt2e_quantize(model.eval(), (1, 3, 224, 224))    # doctest: +SKIP
    >>> mod, params = kiln.frontend.from_pytorch(torch.export.export(converted, (x,)))
    ... # doctest: +SKIP
"""
from __future__ import annotations

import torch

__all__ = ["pt2e_quantize"]


def pt2e_quantize(model, shape, batches: int = 4, seed: int = 0):
    """model (eval mode) quantized by torchao's prepare_pt2e / convert_pt2e, calibrated on
    `batches` seeded random inputs of `shape`; PyTorch's converted GraphModule.

    Example:
        >>> converted = pt2e_quantize(resnet18(width=8), (1, 3, 32, 32))   # doctest: +SKIP
    """
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq
    gen = torch.Generator().manual_seed(seed)
    example = torch.randn(shape, generator=gen)
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, (example,)).module(), quantizer)
    for _ in range(batches):
        prepared(torch.randn(shape, generator=gen))
    return convert_pt2e(prepared)

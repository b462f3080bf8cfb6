"""kiln from PyTorch: `torch.compile(model, backend="kiln")` and `kiln.torch.optimize`.

Both run inference with kiln-compiled code on torch tensors, passing them through DLPack
without copies. torch.compile keeps PyTorch's flexibility (graph breaks; ops kiln lacks run in
PyTorch between kiln-compiled parts; a fallback to PyTorch for any graph kiln cannot take);
optimize() compiles the whole model once and fails loudly instead.

Example:
    >>> import kiln.torch
    >>> fast = kiln.torch.optimize(model.eval(), (torch.randn(1, 3, 224, 224),))  # doctest: +SKIP
    >>> fast                                                                       # doctest: +SKIP
    KilnModule(ResNet compiled by kiln for llvm: (x: float32[1x3x224x224]) -> ...)
    >>> fast2 = torch.compile(model.eval(), backend="kiln")                        # doctest: +SKIP
"""
from .backend import kiln_backend
from .optimize import InputError, KilnModule, optimize

__all__ = ["optimize", "KilnModule", "InputError", "kiln_backend"]

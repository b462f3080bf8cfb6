"""PyTorch frontend: torch.export programs (ATen ops) into kiln's graph IR.

Example:
    >>> from kiln.frontend.pytorch import from_pytorch
    >>> mod, params = from_pytorch(model.eval(), (torch.randn(1, 3, 224, 224),))  # doctest: +SKIP
"""
from .importer import export_program, from_pytorch, import_for_training
from .registry import CONVERTERS

__all__ = ["from_pytorch", "export_program", "import_for_training", "supported_ops"]


def supported_ops() -> list:
    """The ATen overloads this frontend translates.

    Example:
        >>> "aten.convolution.default" in supported_ops()
        True
    """
    return sorted(CONVERTERS)

"""Model importers: PyTorch (torch.export) and ONNX into kiln's graph IR.

Each returns `(IRModule, params)`; params maps the names of main's weight Vars to numpy arrays.

Example:
    >>> mod, params = kiln.frontend.from_pytorch(model, (x,))          # doctest: +SKIP
    >>> mod, params = kiln.frontend.from_onnx("model.onnx")            # doctest: +SKIP
    >>> program = kiln.frontend.load_exported_program("model.pt2")     # doctest: +SKIP

load_exported_program reads a saved torch.export program, refusing one whose loading would run
code from the file (pickles, native code) unless trust=True.

Importers load on first use, so importing kiln.frontend does not import torch or onnx.
"""
import importlib

from .common import FrontendError, StaticValueError, UnsupportedOpsError

_LAZY = {
    "from_pytorch": ("kiln.frontend.pytorch", "from_pytorch"),
    "from_onnx": ("kiln.frontend.onnx", "from_onnx"),
    "load_exported_program": ("kiln.frontend.pt2", "load_exported_program"),
    "UntrustedModelError": ("kiln.frontend.pt2", "UntrustedModelError"),
}


def __getattr__(name):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'kiln.frontend' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_LAZY))


__all__ = ["FrontendError", "StaticValueError", "UnsupportedOpsError", "UntrustedModelError",
           "from_pytorch", "from_onnx", "load_exported_program"]

"""ONNX importer: `from_onnx(model_or_path, shape_dict=None, dtype=None) -> (IRModule, params)`.

Opsets 13-21 are the target (older and newer ones import where the op definitions agree).
Converters live in kiln/frontend/onnx/ops, one module per area. Adding one is a function
registered with `@converter("OpType")` that reads inputs and attributes from its NodeContext
and builds catalog ops with `ctx.op(name, *values, **attrs)` (which folds in numpy when every
input is known); `supported_ops()` lists the op types covered.

Example:
    >>> from kiln.frontend.onnx import from_onnx
    >>> mod, params = from_onnx("model.onnx")          # doctest: +SKIP
"""
from .importer import from_onnx
from .registry import supported_ops

__all__ = ["from_onnx", "supported_ops"]

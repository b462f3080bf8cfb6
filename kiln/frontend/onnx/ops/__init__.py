"""ONNX op converters, one module per area; importing this package registers them all."""
from . import (attention, bitwise, control_flow, elementwise, indexing, linalg, loss,  # noqa: F401
               nn, normalization, quantize, quantize_contrib, reduce, rnn, signal, tensor,
               vision)

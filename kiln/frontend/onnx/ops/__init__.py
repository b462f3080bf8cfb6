"""ONNX op converters, one module per area; importing this package registers them all."""
from . import elementwise, linalg, nn, reduce, rnn, tensor  # noqa: F401

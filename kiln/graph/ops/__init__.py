"""Operator definitions, one module per area; importing this package registers them all."""
from . import elemwise, nn, transform  # noqa: F401

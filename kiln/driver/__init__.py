"""kiln.driver: kiln.lower and kiln.build, the entry points of the operator compiler."""
from .build import build
from .lower import LoweringError, lower
from .pipeline import PassInstrument, PrintIR, TimePasses, register_pass

__all__ = ["build", "lower", "LoweringError", "PassInstrument", "PrintIR", "TimePasses",
           "register_pass"]

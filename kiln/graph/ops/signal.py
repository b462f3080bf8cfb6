"""Signal-processing operators (DFT ...)."""
from __future__ import annotations

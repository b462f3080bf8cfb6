"""Cumulative (scan) operators: cumsum, cumprod."""
from __future__ import annotations

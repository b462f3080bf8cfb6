"""Bitwise and bit-shift ONNX ops."""
from __future__ import annotations

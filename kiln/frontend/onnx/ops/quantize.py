"""Quantization ONNX ops: QuantizeLinear, DequantizeLinear, the integer matmul / conv ops."""
from __future__ import annotations

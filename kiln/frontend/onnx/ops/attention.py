"""Attention-family ONNX ops (Attention, RotaryEmbedding ...), built from matmul, softmax and
elementwise catalog ops."""
from __future__ import annotations

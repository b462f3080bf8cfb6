"""Normalization ONNX ops beyond nn.py's: RMSNormalization, GroupNormalization,
MeanVarianceNormalization, LRN and friends."""
from __future__ import annotations

"""Signal-processing ONNX ops: window functions, DFT, STFT, MelWeightMatrix."""
from __future__ import annotations

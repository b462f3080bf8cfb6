"""Control-flow ONNX ops (If, Loop, Scan) where shapes allow."""
from __future__ import annotations

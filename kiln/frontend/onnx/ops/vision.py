"""Vision ONNX ops: GridSample, AffineGrid, RoiAlign, NonMaxSuppression, Col2Im ..."""
from __future__ import annotations

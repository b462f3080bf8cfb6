"""Indexing ONNX ops: TopK, OneHot, Compress, GatherND, the Scatter family, NonZero, Unique ..."""
from __future__ import annotations

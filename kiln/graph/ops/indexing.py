"""Indexing operators: topk, one_hot, gather_nd, the scatter family ..."""
from __future__ import annotations

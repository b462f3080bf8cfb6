"""Vision operators: grid_sample, roi_align ..."""
from __future__ import annotations

"""A small template for tests and examples: "test.matmul" (C = A . B, A n x k, B k x m).

Knobs: tile_y / tile_x / tile_k (2-way splits, exact factors), "order" (the inner loops
yi, ki, xi in one of two orders, xi always innermost so it can be vectorized), "ann"
(unroll yi; unroll or vectorize xi) and "auto_unroll" in {0, 8, 32} (the
auto_unroll_max_step pragma on the outer loop). Loop nest: yo, xo, ko, <order of yi ki xi>.

Example:
    >>> import kiln.autotvm.testing
    >>> from kiln.autotvm.task import Task
    >>> len(Task("test.matmul", (64, 64, 64, "float32")).config_space)
    12348
"""
from __future__ import annotations

from .. import te
from ..target import current_target
from .task import get_config, template

__all__ = ["matmul"]


@template("test.matmul")
def matmul(n, m, k, dtype="float32"):
    """C[i, j] = sum_r A[i, r] * B[r, j]; returns (schedule, [A, B, C])."""
    for what, v in (("n", n), ("m", m), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"test.matmul: {what} must be a positive int, got {v!r}")
    A = te.placeholder((n, k), dtype, name="A")
    B = te.placeholder((k, m), dtype, name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    y, x = C.op.axis

    cfg = get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    cfg.define_split("tile_k", r, num_outputs=2)
    if cfg.is_fallback:
        lanes = max(1, current_target().vector_width_bits // 32)
        cfg.fallback_split("tile_y", [-1, 4])
        cfg.fallback_split("tile_x", [-1, lanes])
        cfg.fallback_split("tile_k", [-1, 4])
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    ko, ki = cfg["tile_k"].apply(s, C, r)
    s[C].reorder(yo, xo, ko, yi, ki, xi)

    cfg.define_reorder("order", [yi, ki, xi], "candidate",
                       candidate=[[yi, ki, xi], [ki, yi, xi]])
    cfg["order"].apply(s, C, [yi, ki, xi])

    cfg.define_annotate("ann", [yi, xi], policy="try_unroll_vec")
    if cfg.is_fallback:
        cfg.fallback_with("ann", ["none", "vec"])
    cfg["ann"].apply(s, C, [yi, xi])

    cfg.define_knob("auto_unroll", [0, 8, 32])
    if cfg["auto_unroll"].val:
        s[C].pragma(yo, "auto_unroll_max_step", cfg["auto_unroll"].val)
    return s, [A, B, C]

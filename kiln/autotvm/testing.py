"""Generic templates for tests, examples and the tuner comparison (bench/tuner_compare.py).

"test.matmul" is small: C = A . B, A n x k, B k x m.

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

__all__ = ["matmul", "generic_dense", "generic_conv2d"]


def _check_positive(name: str, **values) -> None:
    for what, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: {what} must be a positive int, got {v!r}")


def _matmul_compute(rows: int, cols: int, k: int, dtype: str):
    """A (rows x k), B (k x cols) and C = A @ B as a reduction over k."""
    A = te.placeholder((rows, k), dtype, name="A")
    B = te.placeholder((k, cols), dtype, name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((rows, cols), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


@template("test.matmul")
def matmul(n, m, k, dtype="float32"):
    """C[i, j] = sum_r A[i, r] * B[r, j]; returns (schedule, [A, B, C])."""
    _check_positive("test.matmul", n=n, m=m, k=k)
    A, B, C = _matmul_compute(n, m, k, dtype)
    (r,) = C.op.reduce_axis
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


# -- the search spaces of the TVM paper's Figure 12 -------------------------------------------
# Written as TVM's tutorials write x86 templates: every tile size, the inner loop order and
# the unroll / vectorize choices are knobs over all their candidates, instead of a
# neighbourhood of kiln's heuristics as in kiln.autotvm.templates. The spaces hold 10^5-10^6
# configs, most of them far from the best (scalar loops, spilled or tiny register tiles),
# which is the setting where the paper compares its tuners.

@template("generic.dense")
def generic_dense(m, n, k, dtype="float32"):
    """C[i, j] = sum_r A[i, r] * B[r, j] (A m x k, B k x n) with a register tile (cache_write)
    computed per (row, column) tile. Knobs: 3-way splits of rows and columns (outer tiles in
    parallel), a 2-way split of k, the order of the accumulator loops, unroll / vectorize of
    them and of the copy-out loop.

    Example:
        >>> from kiln.autotvm.task import Task
        >>> Task("generic.dense", (128, 3072, 768)).config_space.size > 10 ** 5
        True
    """
    _check_positive("generic.dense", m=m, n=n, k=k)
    A, B, C = _matmul_compute(m, n, k, dtype)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    y, x = C.op.axis

    cfg = get_config()
    cfg.define_split("tile_y", y, num_outputs=3, max_factor=16)
    cfg.define_split("tile_x", x, num_outputs=3, max_factor=64)
    if cfg.is_fallback:
        cfg.fallback_split("tile_y", [-1, 1, 8])
        cfg.fallback_split("tile_x", [-1, 1, 32])
    yo, ym, yi = cfg["tile_y"].apply(s, C, y)
    xo, xm, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, ym, xm, yi, xi)
    s[C].parallel(s[C].fuse(yo, xo))
    s[CC].compute_at(s[C], xm)

    cy, cx = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    cfg.define_split("tile_k", ck, num_outputs=2, max_factor=16)
    if cfg.is_fallback:
        cfg.fallback_split("tile_k", [-1, 4])
    ko, ki = cfg["tile_k"].apply(s, CC, ck)
    cfg.define_reorder("order", [ko, ki, cy, cx], "candidate",
                       candidate=[[ko, ki, cy, cx], [ko, cy, ki, cx], [cy, ko, ki, cx]])
    cfg["order"].apply(s, CC, [ko, ki, cy, cx])
    cfg.define_annotate("ann", [ki, cy, cx], policy="try_unroll_vec")
    cfg.define_annotate("ann_out", [xi], policy="try_vec")
    if cfg.is_fallback:
        cfg.fallback_with("ann", ["unroll", "unroll", "vec"])
        cfg.fallback_with("ann_out", ["vec"])
    cfg["ann"].apply(s, CC, [ki, cy, cx])
    cfg["ann_out"].apply(s, C, [xi])
    return s, [A, B, C]


@template("generic.conv2d")
def generic_conv2d(channels, out_channels, size, kernel, pad, dtype="float32"):
    """A stride-1 NCHW convolution of a (1, channels, size, size) input with a register tile
    (cache_write) per (channel, row, column) tile and the padding computed once. Knobs: a 3-way
    split of the output channels, 2-way splits of rows, columns and input channels, the order
    of the accumulator loops, unroll / vectorize of them and of the copy-out loop.

    Example:
        >>> from kiln.autotvm.task import Task
        >>> Task("generic.conv2d", (128, 128, 28, 3, 1)).config_space.size > 10 ** 5
        True
    """
    from ..topi.nn.conv2d import conv2d_nchw
    _check_positive("generic.conv2d", channels=channels, out_channels=out_channels, size=size,
                    kernel=kernel)
    data = te.placeholder((1, channels, size, size), dtype, name="data")
    weight = te.placeholder((out_channels, channels, kernel, kernel), dtype, name="weight")
    conv = conv2d_nchw(data, weight, 1, pad, 1)
    s = te.create_schedule(conv.op)
    for t in conv.op.input_tensors():
        if t.op.input_tensors():          # the padding stage: at the root, rows in parallel
            st = s[t]
            st.parallel(st.fuse(*st.op.axis[:3]))
    CC = s.cache_write(conv, "local")
    n, f, y, x = conv.op.axis

    cfg = get_config()
    cfg.define_split("tile_f", f, num_outputs=3, max_factor=16)
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    if cfg.is_fallback:
        cfg.fallback_split("tile_f", [-1, 1, 8])
        cfg.fallback_split("tile_y", [-1, 1])
        cfg.fallback_split("tile_x", [-1, 16])
    fo, fm, fi = cfg["tile_f"].apply(s, conv, f)
    yo, yi = cfg["tile_y"].apply(s, conv, y)
    xo, xi = cfg["tile_x"].apply(s, conv, x)
    s[conv].reorder(n, fo, yo, fm, xo, fi, yi, xi)
    s[conv].parallel(s[conv].fuse(n, fo, yo))
    s[CC].compute_at(s[conv], xo)

    _, cf, cy, cx = s[CC].op.axis
    rc, ry, rx = s[CC].op.reduce_axis
    cfg.define_split("tile_rc", rc, num_outputs=2, max_factor=16)
    if cfg.is_fallback:
        cfg.fallback_split("tile_rc", [-1, 1])
    rco, rci = cfg["tile_rc"].apply(s, CC, rc)
    cfg.define_reorder("order", [rco, rci, ry, rx, cf, cy, cx], "candidate",
                       candidate=[[rco, rci, ry, rx, cf, cy, cx], [rco, ry, rx, rci, cf, cy, cx],
                                  [ry, rx, rco, rci, cf, cy, cx], [rco, cf, rci, ry, rx, cy, cx]])
    cfg["order"].apply(s, CC, [rco, rci, ry, rx, cf, cy, cx])
    cfg.define_annotate("ann", [rx, cf, cy, cx], policy="try_unroll_vec")
    cfg.define_annotate("ann_out", [xi], policy="try_vec")
    if cfg.is_fallback:
        cfg.fallback_with("ann", ["none", "unroll", "unroll", "vec"])
        cfg.fallback_with("ann_out", ["vec"])
    cfg["ann"].apply(s, CC, [rx, cf, cy, cx])
    cfg["ann_out"].apply(s, conv, [xi])
    return s, [data, weight, conv]

"""GPU templates of the GEMM anchors (kiln.topi.gpu.dense's schedule): "dense.gpu",
"matmul.gpu", "batch_matmul.gpu".

Args: as the x86 templates' (templates/gemm.py): dense — data shape, weight shape (units, in),
units, dtype; matmul and batch_matmul — a shape, b shape, transpose_a, transpose_b, dtype.
Knobs (the paper's GPU matrix multiply):
- "tile_y", "tile_x": output rows / columns split four ways, [blocks, virtual threads,
  threads, outputs per thread] (common.define_tile);
- "tile_k": reduction steps per shared-memory fetch;
- "auto_unroll_max_step": 0, 512 or 1500.
A config whose block has more threads, or more shared memory, than the target allows fails to
build (compile_error, with the limit named) and the tuner goes on. The fallback config is
kiln.topi.gpu.dense's heuristic tile, cut to the output where that is smaller.

Example:
    >>> from kiln.autotvm import Task
    >>> t = Task("dense.gpu", [[128, 768], [3072, 768], 3072, "float32"], "opencl")
    >>> sorted(t.config_space.knobs)
    ['auto_unroll_max_step', 'tile_k', 'tile_x', 'tile_y']
"""
from __future__ import annotations

from .... import te
from ....topi import tags
from ....topi.gpu.dense import K_TILE, DenseTile, default_tile, schedule_dense_tile
from ....topi.nn.dense import batch_matmul, dense, matmul
from ....topi.utils import get_const_tuple
from ...task import get_config, template
from ..gemm import dense_pack_args, matmul_args
from ..registry import register_anchor
from .common import UNROLL_STEPS, define_tile, fit_tile, tile_of

__all__ = ["DENSE_GPU_TEMPLATE", "MATMUL_GPU_TEMPLATE", "BATCH_MATMUL_GPU_TEMPLATE"]

DENSE_GPU_TEMPLATE = "dense.gpu"
MATMUL_GPU_TEMPLATE = "matmul.gpu"
BATCH_MATMUL_GPU_TEMPLATE = "batch_matmul.gpu"
MAX_K_TILE = 64


def _knobs(cfg, op) -> DenseTile:
    """Declare the knobs on cfg (fallback: the heuristic tile); returns the tile."""
    *_, m, n = (int(d) for d in get_const_tuple(op.output(0).shape))
    (k,) = op.reduce_axis
    kext = int(get_const_tuple((k.dom.extent,))[0])
    define_tile(cfg, "tile_y", m)
    define_tile(cfg, "tile_x", n)
    cfg.define_split("tile_k", kext, num_outputs=2, policy="verbose", max_factor=MAX_K_TILE)
    cfg.define_knob("auto_unroll_max_step", list(UNROLL_STEPS))
    if cfg.is_fallback:
        heuristic = default_tile(op)
        cfg.fallback_with("tile_y", fit_tile(heuristic.y, m))
        cfg.fallback_with("tile_x", fit_tile(heuristic.x, n))
        cfg.fallback_with("tile_k", [-1, min(K_TILE, kext)])
    return dense_values(cfg)


def dense_values(cfg) -> DenseTile:
    """The DenseTile of a config of these templates.

    Example:
        >>> dense_values(task.default_config())                # doctest: +SKIP
        DenseTile(y=(1, 8, 2), x=(1, 16, 2), k_tile=16, unroll=0)
    """
    return DenseTile(tile_of(cfg, "tile_y"), tile_of(cfg, "tile_x"), cfg["tile_k"].size[-1],
                     cfg["auto_unroll_max_step"].val)


def _scheduled(out, operands):
    return schedule_dense_tile([out], out.op, _knobs(get_config(), out.op)), [*operands, out]


@template(DENSE_GPU_TEMPLATE)
def dense_gpu(data_shape, weight_shape, units, dtype="float32"):
    """dense (kiln.topi.nn.dense) with the GPU tile as knobs; returns (schedule, [data,
    weight, out])."""
    if len(data_shape) < 2 or len(weight_shape) != 2:
        raise ValueError(f"template '{DENSE_GPU_TEMPLATE}' takes data of 2 or more dimensions "
                         f"and a (units, in) weight, got {data_shape} and {weight_shape}")
    data = te.placeholder(data_shape, dtype, name="data")
    weight = te.placeholder(weight_shape, dtype, name="weight")
    return _scheduled(dense(data, weight), [data, weight])


@template(MATMUL_GPU_TEMPLATE)
def matmul_gpu(a_shape, b_shape, transpose_a=False, transpose_b=False, dtype="float32"):
    """matmul (kiln.topi.nn.matmul) with the GPU tile as knobs; returns (schedule, [a, b,
    out])."""
    a = te.placeholder(a_shape, dtype, name="a")
    b = te.placeholder(b_shape, dtype, name="b")
    return _scheduled(matmul(a, b, transpose_a, transpose_b), [a, b])


@template(BATCH_MATMUL_GPU_TEMPLATE)
def batch_matmul_gpu(a_shape, b_shape, transpose_a=False, transpose_b=False, dtype="float32"):
    """batch_matmul (kiln.topi.nn.batch_matmul) with the GPU tile as knobs; returns
    (schedule, [a, b, out])."""
    a = te.placeholder(a_shape, dtype, name="a")
    b = te.placeholder(b_shape, dtype, name="b")
    return _scheduled(batch_matmul(a, b, transpose_a, transpose_b), [a, b])


def _dense_args(anchor_op):
    # the GPU schedule tiles two output dimensions of an unpacked weight
    args = dense_pack_args(anchor_op)
    return args if args is not None and len(args[0]) >= 2 and len(args[1]) == 2 else None


register_anchor(tags.DENSE, DENSE_GPU_TEMPLATE, _dense_args, dense_values, target_key="gpu")
register_anchor(tags.MATMUL, MATMUL_GPU_TEMPLATE, matmul_args, dense_values, target_key="gpu")
register_anchor(tags.BATCH_MATMUL, BATCH_MATMUL_GPU_TEMPLATE, matmul_args, dense_values,
                target_key="gpu")

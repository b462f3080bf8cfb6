"""The VDLA template: int8 conv2d with requantization (kiln.accel.vdla.conv2d's schedule),
tuned on simulated cycles.

Args: batch, channels, height, width, out_channels, kernel, stride, pad, shift (the
requantization's right shift), relu (clip at 0, not -128) — channels and out_channels multiples
of VDLA's 16-channel block.
Knobs:
- "tile_rows", "tile_out_blocks", "tile_in_blocks": output rows and output channel blocks per
  tile, input channel blocks per accumulation chunk (divisors of each extent);
- "vthreads": 1, 2 or 4 virtual threads (latency hiding), sharing out the tile's "split":
  "rows" or output channel "blocks".
A config whose tile does not divide among its virtual threads, or whose buffers overflow VDLA's,
fails to build (compile_error, naming the reason). The fallback config is
kiln.accel.vdla.conv2d.default_tiling with 2 virtual threads (1 where the tile cannot split). A candidate's measured time is
the simulator's (cycles at VDLA's clock), so tuning needs no accelerator; it is deterministic.

Example:
    >>> from kiln.autotvm import Task
    >>> t = Task("conv2d_int8.vdla", [1, 64, 14, 14, 64, 3, 1, 1, 8, False], "vdla")
    >>> sorted(t.config_space.knobs)
    ['split', 'tile_in_blocks', 'tile_out_blocks', 'tile_rows', 'vthreads']
"""
from __future__ import annotations

from ...accel.vdla.conv2d import conv_geometry, default_tiling, schedule_conv2d
from ...accel.vdla.isa import VDLAConfig
from ..task import get_config, template
from .registry import divisors

__all__ = ["CONV2D_INT8_VDLA_TEMPLATE", "conv2d_int8_vdla", "fallback_tiling"]

CONV2D_INT8_VDLA_TEMPLATE = "conv2d_int8.vdla"
VTHREADS = (1, 2, 4)
DEFAULT_VTHREADS = 2


def _flop(batch, channels, height, width, out_channels, kernel, stride, pad, shift, relu):
    oh, ow = conv_geometry(height, width, kernel, stride, pad)
    return 2 * batch * out_channels * oh * ow * channels * kernel * kernel


def fallback_tiling(channels, height, width, out_channels, kernel, stride, pad,
                    config: VDLAConfig = VDLAConfig()):
    """(virtual threads, tile) of the fallback config: default_tiling with 2 virtual threads,
    or with 1 where no tile splits in two (an odd number of rows and of channel blocks).

    Example:
        >>> fallback_tiling(64, 7, 7, 48, 3, 1, 1)
        (1, (7, 3, 4, 'rows'))
    """
    for vthreads in (DEFAULT_VTHREADS, 1):
        try:
            return vthreads, default_tiling(channels, height, width, out_channels, kernel,
                                            stride, pad, vthreads, config)
        except ValueError:
            if vthreads == 1:
                raise


@template(CONV2D_INT8_VDLA_TEMPLATE, flop=_flop)
def conv2d_int8_vdla(batch, channels, height, width, out_channels, kernel, stride, pad,
                     shift, relu):
    """The VDLA int8 convolution with its tiling as knobs; returns (schedule, [data, weight,
    out]) in VDLA's packed layouts (kiln.accel.vdla.conv2d)."""
    cfg = get_config()
    config = VDLAConfig()
    oh, _ = conv_geometry(height, width, kernel, stride, pad)
    cfg.define_knob("tile_rows", divisors(oh, oh))
    cfg.define_knob("tile_out_blocks", divisors(out_channels // config.block_out, 1 << 30))
    cfg.define_knob("tile_in_blocks", divisors(channels // config.block_in, 1 << 30))
    cfg.define_knob("vthreads", list(VTHREADS))
    cfg.define_knob("split", ["rows", "blocks"])
    if cfg.is_fallback:
        vthreads, (rows, obt, ibt, split) = fallback_tiling(
            channels, height, width, out_channels, kernel, stride, pad, config)
        for name, value in (("tile_rows", rows), ("tile_out_blocks", obt),
                            ("tile_in_blocks", ibt), ("vthreads", vthreads),
                            ("split", split)):
            cfg.fallback_with(name, value)
    return schedule_conv2d(batch, channels, height, width, out_channels, kernel, stride, pad,
                           rows=cfg["tile_rows"].val, out_blocks=cfg["tile_out_blocks"].val,
                           in_blocks=cfg["tile_in_blocks"].val, vthreads=cfg["vthreads"].val,
                           split=cfg["split"].val, shift=shift, relu=bool(relu))

"""What the GPU templates share: four-way tile splits and fitting a heuristic tile to them."""
from __future__ import annotations

# Each factor of a tile split (virtual threads, threads, outputs per thread) at most this:
# past it a block outgrows every GPU's thread limit or a thread its registers.
MAX_FACTOR = 32
UNROLL_STEPS = (0, 512, 1500)       # auto_unroll_max_step candidates (the paper's templates)


def define_tile(cfg, name: str, extent: int) -> None:
    """A knob splitting an output axis four ways: [blocks, virtual threads, threads, outputs
    per thread], powers of two (a tail is allowed).

    Example:
        >>> define_tile(cfg, "tile_x", 768)                   # doctest: +SKIP
    """
    cfg.define_split(name, extent, num_outputs=4, policy="power2", max_factor=MAX_FACTOR)


def fit_tile(tile: tuple, extent: int) -> list:
    """`tile` (virtual threads, threads, per thread) as a candidate of define_tile's knob:
    each factor cut to the largest power of two the extent leaves room for, innermost first.

    Example:
        >>> fit_tile((1, 8, 2), 4)
        [-1, 1, 2, 2]
    """
    fitted, used = [], 1
    for factor in reversed(tile):
        room = min(MAX_FACTOR, max(1, extent // used))
        f = min(factor, 1 << (room.bit_length() - 1))
        fitted.append(f)
        used *= f
    return [-1, *reversed(fitted)]


def tile_of(cfg, name: str) -> tuple:
    """(virtual threads, threads, per thread) of a define_tile knob's value.

    Example:
        >>> tile_of(cfg, "tile_x")                             # doctest: +SKIP
        (1, 16, 2)
    """
    return tuple(cfg[name].size[1:])

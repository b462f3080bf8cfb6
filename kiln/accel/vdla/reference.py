"""Hand-written VDLA programs: an int8 matrix product with requantization, in tiles, with one
or two buffers per operand. They show the token protocol that lets the modules overlap, and
they are the reference the compiled programs are checked against.

The product y = clip((x · wᵀ) >> shift, -128, 127) of x (M × K) and w (N × K), int8, runs
in tiles of `tm` rows × `tn` column blocks, accumulated over chunks of `tk` k blocks. With
`buffers=2`, chunk c uses buffer half c % 2 and tile t accumulator half t % 2, so the load
module fills one half while the GEMM core reads the other: the paper's latency hiding.

Example:
    >>> p, regions = gemm_program(32, 32, 64, tm=16, tn=2, tk=2, buffers=2)
    >>> sorted(regions)
    ['w', 'x', 'y']
"""
from __future__ import annotations

import numpy as np

from .isa import Alu, Deps, Finish, Gemm, Load, Program, Store, VDLAConfig


def gemm_program(m: int, n: int, k: int, tm: int, tn: int, tk: int, shift: int = 8,
                 buffers: int = 1, config: VDLAConfig = VDLAConfig()):
    """(Program, {region: kind}) of the tiled product; m a multiple of tm, n of
    tn * block_out, k of tk * block_in."""
    bi, bo = config.block_in, config.block_out
    if k % (tk * bi) or n % (tn * bo) or m % tm:
        raise ValueError(f"gemm_program: {m}x{n}x{k} is not whole tiles of {tm} rows, "
                         f"{tn}x{bo} columns, {tk}x{bi} k")
    kb, nb = k // bi, n // bo
    tiles = [(mo, no) for mo in range(m // tm) for no in range(nb // tn)]
    chunks = kb // tk
    inp_slot, wgt_slot, acc_slot = tm * tk, tn * tk, tm * tn
    if buffers * inp_slot > config.inp_entries or buffers * wgt_slot > config.wgt_entries \
            or buffers * acc_slot > config.acc_entries:
        raise ValueError("gemm_program: the tiles do not fit the on-chip buffers")
    prog = []
    total = len(tiles) * chunks
    step = 0
    for t, (mo, no) in enumerate(tiles):
        acc = (t % buffers) * acc_slot
        tile_uops = tuple((acc + i * tn + j, 0, 0) for i in range(tm) for j in range(tn))
        # The accumulator half is free once the store of tile t - buffers is done.
        prog.append(Gemm(True, tile_uops, deps=Deps(pop_next=t >= buffers)))
        for c in range(chunks):
            slot = step % buffers
            first_use = step < buffers
            inp, wgt = slot * inp_slot, slot * wgt_slot
            prog.append(Load("inp", inp, "x", mo * tm * kb + c * tk, tm, tk, kb,
                             deps=Deps(pop_next=not first_use)))
            prog.append(Load("wgt", wgt, "w", no * tn * kb + c * tk, tn, tk, kb,
                             deps=Deps(push_next=True)))
            uops = tuple((acc + i * tn + j, inp + i * tk + q, wgt + j * tk + q)
                         for i in range(tm) for j in range(tn) for q in range(tk))
            prog.append(Gemm(False, uops, deps=Deps(pop_prev=True,
                                                    push_prev=step + buffers < total)))
            step += 1
        acc_uops = tuple((acc + e, 0) for e in range(acc_slot))
        prog.append(Alu("shr", acc_uops, imm=shift))
        prog.append(Alu("min", acc_uops, imm=127))
        prog.append(Alu("max", acc_uops, imm=-128, deps=Deps(push_next=True)))
        prog.append(Store(acc, "y", mo * tm * nb + no * tn, tm, tn, nb,
                          deps=Deps(pop_prev=True, push_prev=t + buffers < len(tiles))))
    prog.append(Finish())
    regions = {"x": ("inp", m * kb), "w": ("wgt", nb * kb), "y": ("out", m * nb)}
    return Program(tuple(prog), regions, config), regions


def pack_data(x: np.ndarray, config: VDLAConfig = VDLAConfig()) -> np.ndarray:
    """(M, K) int8 -> (M, K / block_in, block_in): rows of input entries."""
    m, k = x.shape
    return np.ascontiguousarray(x.reshape(m, k // config.block_in, config.block_in))


def pack_weight(w: np.ndarray, config: VDLAConfig = VDLAConfig()) -> np.ndarray:
    """(N, K) int8 -> (N / block_out, K / block_in, block_out, block_in): weight entries."""
    n, k = w.shape
    bo, bi = config.block_out, config.block_in
    return np.ascontiguousarray(w.reshape(n // bo, bo, k // bi, bi).transpose(0, 2, 1, 3))


def gemm_dram(x: np.ndarray, w: np.ndarray, config: VDLAConfig = VDLAConfig()) -> dict:
    """The DRAM regions of gemm_program for x (M × K) and w (N × K) int8: x as rows of k
    blocks, w as (column block, k block) tiles, y zeroed."""
    bi, bo = config.block_in, config.block_out
    m, k = x.shape
    n = w.shape[0]
    return {"x": pack_data(x, config).reshape(-1, bi),
            "w": pack_weight(w, config).reshape(-1, bo, bi),
            "y": np.zeros((m * (n // bo), bo), np.int8)}


def gemm_reference(x: np.ndarray, w: np.ndarray, shift: int = 8) -> np.ndarray:
    """numpy's answer, clip((x · wᵀ) >> shift) as int8 (M × N)."""
    acc = x.astype(np.int64) @ w.astype(np.int64).T
    return np.clip(acc >> shift, -128, 127).astype(np.int8)

"""Dependence tokens for a VDLA instruction stream written in sequential order.

The compiler emits a program as if one module ran it all, instruction after instruction.
This pass makes the three modules' concurrent run compute the same thing. Wherever an
instruction uses on-chip entries that an earlier instruction of another module wrote, or
writes entries that one read or wrote, it must not start before that one ends. That is
read-after-write, write-after-read or write-after-write. The pass orders each such pair with
a token: the producer pushes it when it ends, and the consumer pops it before it starts.

Tokens are FIFO counters between neighbouring modules, so the k-th pop on a queue takes the
k-th push. The pass walks the program in order. For each consumer it takes the latest
producer per queue, and adds a token only when no earlier pop of the consumer's module
already waits for that producer or a later one. Pushes then come in the same order as their
pops, and each instruction pushes at most once per queue. No token is added that the
dependences do not need.

Example:
    >>> from kiln.accel.vdla.reference import gemm_program
    >>> p, _ = gemm_program(32, 32, 64, tm=16, tn=2, tk=2, buffers=2)
    >>> insert_tokens(strip_tokens(p)) == p
    True
"""
from __future__ import annotations

import dataclasses

from .isa import Deps, Program, VDLAProgramError
from .sim import accesses, conflict

# (producer module, consumer module) -> (producer's push flag, consumer's pop flag)
_FLAGS = {("load", "compute"): ("push_next", "pop_prev"),
          ("compute", "load"): ("push_prev", "pop_next"),
          ("compute", "store"): ("push_next", "pop_prev"),
          ("store", "compute"): ("push_prev", "pop_next")}


def strip_tokens(program: Program) -> Program:
    """The same program without any dependence token (the sequential form)."""
    return dataclasses.replace(program, instructions=tuple(
        dataclasses.replace(i, deps=Deps()) for i in program.instructions))


def insert_tokens(program: Program) -> Program:
    """`program`, written without tokens, with the dependence tokens its sequential order
    needs (strip_tokens first to redo a program's tokens).

    Example:
        >>> synced = insert_tokens(strip_tokens(program))   # doctest: +SKIP
    """
    if any(i.deps != Deps() for i in program.instructions):
        raise VDLAProgramError("insert_tokens takes a program without tokens (its FIFO order "
                               "would mix theirs with the new ones): strip_tokens it first")
    instructions = list(program.instructions)
    touched = [accesses(i) for i in instructions]
    flags = [dataclasses.asdict(Deps()) for _ in instructions]
    by_module: dict = {}     # module -> indices of its instructions so far
    synced: dict = {}        # (producer module, consumer module) -> producer index waited for
    for j, ins in enumerate(instructions):
        for producer, mine in by_module.items():
            if producer == ins.module:
                continue
            pair = (producer, ins.module)
            done = synced.get(pair, -1)
            # The latest earlier instruction of `producer` this one conflicts with; those
            # up to `done` are already waited for.
            i = next((i for i in reversed(mine) if i > done and
                      conflict(touched[i], touched[j])), None)
            if i is None:
                continue
            # Load and store share no on-chip entries (acc loads run on compute), so every
            # pair here has a queue.
            push, pop = _FLAGS[pair]
            flags[i][push] = True
            flags[j][pop] = True
            synced[pair] = i
        by_module.setdefault(ins.module, []).append(j)
    return dataclasses.replace(program, instructions=tuple(
        dataclasses.replace(ins, deps=Deps(**f)) for ins, f in zip(instructions, flags)))


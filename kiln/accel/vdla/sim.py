"""The VDLA simulator: bit-exact results (numpy integer arithmetic) and a cycle model of the
load, compute and store modules running concurrently.

Each module takes its instructions in program order. An instruction starts when its module is
free and the tokens it pops are there; a load or store also waits for the one DRAM port, which
a transfer holds for bytes / bandwidth cycles, after `dram_latency` cycles of latency. An
instruction reads its operands when it starts and its writes land when it ends, so a program
whose tokens do not order two instructions can read stale or half-updated data, as hardware
would. Whichever ready instruction can start first goes next. When none can start and some
remain, the program is deadlocked: VDLADeadlockError says which module waits where, on which
queue. Two modules touching the same on-chip entries at overlapping times, one writing, is a
race, and VDLARaceError names both instructions: a missing token is reported either way, or
shows as a wrong result where the unordered instructions happened not to overlap.

Example:
    >>> from kiln.accel.vdla.isa import Finish, Program
    >>> simulate(Program((Finish(),), {}), {}).cycles
    0
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .isa import (ALU_OPS, MODULES, Alu, Deps, Finish, Gemm, Load, Program, Store,
                  VDLAProgramError)


class VDLADeadlockError(RuntimeError):
    """No module can go on: each waits for a token that will never come."""


class VDLARaceError(RuntimeError):
    """Two modules used the same on-chip entries at overlapping times, one of them writing:
    no dependence token orders them."""


@dataclass
class RunStats:
    """What a simulated run did: cycles, busy cycles per module, GEMM work, DRAM traffic."""
    cycles: int = 0
    busy: dict = field(default_factory=lambda: dict.fromkeys(MODULES, 0))
    gemm_uop_cycles: int = 0
    ops: int = 0
    dram_bytes: int = 0
    leftover_tokens: dict = field(default_factory=dict)
    clock_mhz: float = 200.0

    @property
    def seconds(self) -> float:
        return self.cycles / (self.clock_mhz * 1e6)

    @property
    def utilization(self) -> float:
        """The fraction of cycles the GEMM core multiplies."""
        return self.gemm_uop_cycles / self.cycles if self.cycles else 0.0

    @property
    def gops(self) -> float:
        return self.ops / self.seconds / 1e9 if self.cycles else 0.0

    def __str__(self):
        busy = ", ".join(f"{m} {c}" for m, c in self.busy.items())
        return (f"{self.cycles} cycles ({self.seconds * 1e6:.1f} us at {self.clock_mhz:g} MHz), "
                f"GEMM utilization {self.utilization:.1%}, {self.gops:.2f} GOPS, "
                f"{self.dram_bytes} DRAM bytes; busy: {busy}")


# Which queue each flag of each module uses: (pop_prev, pop_next, push_prev, push_next).
_QUEUE_OF = {"load": (None, "c2l", None, "l2c"), "compute": ("l2c", "s2c", "c2l", "c2s"),
             "store": ("c2s", None, "s2c", None)}


def _queues(ins, module):
    names = _QUEUE_OF[module]
    d = ins.deps
    pops = [q for q, f in zip(names[:2], (d.pop_prev, d.pop_next)) if f]
    pushes = [q for q, f in zip(names[2:], (d.push_prev, d.push_next)) if f]
    if None in pops or None in pushes:
        raise VDLAProgramError(f"`{ins}`: the {module} module has no "
                               f"{'previous' if module == 'load' else 'next'} module to exchange "
                               "tokens with")
    return pops, pushes


def _points(loops, width):
    """The offsets a micro-op takes over up to two loop levels of (extent, `width` steps)."""
    if len(loops) > 2:
        raise VDLAProgramError(f"at most two loop levels, got {len(loops)}")
    pts = [(0,) * width]
    for loop in loops:
        extent, steps = loop[0], loop[1:]
        if len(steps) != width or extent < 0:
            raise VDLAProgramError(f"a loop is (extent, {width} steps), got {loop}")
        pts = [tuple(p + k * s for p, s in zip(pt, steps)) for pt in pts for k in range(extent)]
    return pts


def accesses(ins) -> list:
    """(buffer, first entry, last entry, writes) of each on-chip range `ins` touches (a
    bounding range per buffer).

    Example:
        >>> accesses(Load("inp", 4, "x", 0, 1, 2, 2))
        [('inp', 4, 5, True)]
    """
    if isinstance(ins, Load):
        top, bottom, left, right = ins.pads
        n = (ins.rows + top + bottom) * (ins.cols + left + right)
        return [(ins.buffer, ins.sram, ins.sram + n - 1, True)]
    if isinstance(ins, Store):
        return [("acc", ins.sram, ins.sram + ins.rows * ins.cols - 1, False)]
    if isinstance(ins, Gemm):
        t = np.array([[a + da, x + dx, w + dw] for da, dx, dw in _points(ins.loops, 3)
                      for a, x, w in ins.uops]).reshape(-1, 3)
        if not t.size:
            return []
        out = [("acc", int(t[:, 0].min()), int(t[:, 0].max()), True)]
        if not ins.reset:
            out += [("inp", int(t[:, 1].min()), int(t[:, 1].max()), False),
                    ("wgt", int(t[:, 2].min()), int(t[:, 2].max()), False)]
        return out
    if isinstance(ins, Alu):
        t = np.array([(d + dd, s + ds) for dd, ds in _points(ins.loops, 2)
                      for d, s in ins.uops]).reshape(-1, 2)
        if not t.size:
            return []
        used = t if ins.imm is None else t[:, :1]
        return [("acc", int(used.min()), int(used.max()), True)]
    return []


def conflict(a: list, b: list) -> bool:
    """Whether two access lists touch a common entry, one of them writing."""
    return any(buf == buf2 and (w or w2) and lo <= hi2 and lo2 <= hi
               for buf, lo, hi, w in a for buf2, lo2, hi2, w2 in b)


class _Machine:
    def __init__(self, program: Program, dram: dict):
        self.p, self.c = program, program.config
        c = self.c
        self.inp = np.zeros((c.inp_entries, c.block_in), np.int8)
        self.wgt = np.zeros((c.wgt_entries, c.block_out, c.block_in), np.int8)
        self.acc = np.zeros((c.acc_entries, c.block_out), np.int32)
        self.buffers = {"inp": self.inp, "wgt": self.wgt, "acc": self.acc}
        self.dram = dram
        for name, (kind, n) in program.regions.items():
            want = program.region_array(name)
            have = dram.get(name)
            if have is None:
                raise VDLAProgramError(f"DRAM region '{name}' ({kind}, {n} entries) is not given")
            if have.shape != want.shape or have.dtype != want.dtype:
                raise VDLAProgramError(f"DRAM region '{name}' must be {want.dtype} {want.shape}, "
                                       f"got {have.dtype} {have.shape}")
        self.stats = RunStats(clock_mhz=c.clock_mhz)

    # ---------------------------------------------------------------- checks
    def _entries(self, ins, buffer, first, count):
        if first < 0 or first + count > self.c.entries(buffer):
            raise VDLAProgramError(f"`{ins}` uses {buffer} entries {first}..{first + count - 1}; "
                                   f"the buffer has {self.c.entries(buffer)}")

    def _region(self, ins, name, indices):
        if name not in self.p.regions:
            raise VDLAProgramError(f"`{ins}` names DRAM region '{name}', which the program does "
                                   f"not declare ({', '.join(self.p.regions) or 'none'})")
        n = self.p.regions[name][1]
        if indices.size and (indices.min() < 0 or indices.max() >= n):
            raise VDLAProgramError(f"`{ins}` reaches entries {indices.min()}..{indices.max()} of "
                                   f"region '{name}', which has {n}")
        return self.dram[name]

    # ---------------------------------------------------------------- semantics
    # Each returns (duration, dram bytes, commit) where commit() lands the writes.
    def _load(self, ins: Load):
        if ins.buffer not in ("inp", "wgt", "acc"):
            raise VDLAProgramError(f"`{ins}`: no on-chip buffer '{ins.buffer}' (inp, wgt, acc)")
        if min(ins.rows, ins.cols, *ins.pads) < 0:
            raise VDLAProgramError(f"`{ins}`: negative rows, columns or padding")
        top, bottom, left, right = ins.pads
        rows, cols = ins.rows + top + bottom, ins.cols + left + right
        self._entries(ins, ins.buffer, ins.sram, rows * cols)
        idx = ins.offset + np.arange(ins.rows)[:, None] * ins.stride + np.arange(ins.cols)[None, :]
        src = self._region(ins, ins.region, idx)
        kind = self.p.regions[ins.region][0]
        if kind != ins.buffer:
            raise VDLAProgramError(f"`{ins}` loads a {kind} region into the {ins.buffer} buffer"
                                   + (" (results are not read back: DRAM is not ordered by "
                                      "tokens)" if kind == "out" else ""))
        block = np.zeros((rows, cols) + src.shape[1:], src.dtype)
        block[top:top + ins.rows, left:left + ins.cols] = src[idx]
        block = block.reshape((rows * cols,) + src.shape[1:])
        buf = self.buffers[ins.buffer]

        def commit():
            buf[ins.sram:ins.sram + rows * cols] = block
        return 0, idx.size * self.c.entry_bytes(kind), commit

    def _gemm(self, ins: Gemm):
        triples = np.array([[a + da, x + dx, w + dw] for da, dx, dw in _points(ins.loops, 3)
                            for a, x, w in ins.uops], dtype=np.int64).reshape(-1, 3)
        for col, buf in zip(range(3), ("acc", "inp", "wgt")):
            if triples.size:
                self._entries(ins, buf, int(triples[:, col].min()),
                              int(triples[:, col].max() - triples[:, col].min() + 1))
        n = len(triples)
        if ins.reset:
            def commit():
                self.acc[triples[:, 0]] = 0
        else:
            self.stats.gemm_uop_cycles += n
            self.stats.ops += 2 * n * self.c.block_in * self.c.block_out
            prod = np.einsum("nij,nj->ni", self.wgt[triples[:, 2]].astype(np.int32),
                             self.inp[triples[:, 1]].astype(np.int32))
            # Micro-ops may add into one accumulator several times; int32 wraps.
            rows, which = np.unique(triples[:, 0], return_inverse=True)
            values = self.acc[rows].copy()
            np.add.at(values, which.reshape(-1), prod)

            def commit():
                self.acc[rows] = values
        return self.c.gemm_setup + n, 0, commit

    def _alu(self, ins: Alu):
        if ins.op not in ALU_OPS:
            raise VDLAProgramError(f"`{ins}`: unknown ALU op '{ins.op}'")
        if ins.op == "shr" and not (ins.imm is None or 0 <= ins.imm < 32):
            raise VDLAProgramError(f"`{ins}`: a shift of {ins.imm} is not 0..31")
        pairs = np.array([(d + dd, s + ds) for dd, ds in _points(ins.loops, 2)
                          for d, s in ins.uops], dtype=np.int64).reshape(-1, 2)
        used = pairs if ins.imm is None else pairs[:, :1]
        if pairs.size:
            self._entries(ins, "acc", int(used.min()), int(used.max() - used.min() + 1))
        acc = self.acc.copy()
        for d, s in pairs:      # in order: a micro-op may read what an earlier one wrote
            a = acc[d].astype(np.int64)
            b = np.int64(ins.imm) if ins.imm is not None else acc[s].astype(np.int64)
            r = {"add": lambda: a + b, "max": lambda: np.maximum(a, b),
                 "min": lambda: np.minimum(a, b), "shr": lambda: a >> b,
                 "mul": lambda: a * b, "mov": lambda: np.broadcast_to(b, a.shape)}[ins.op]()
            acc[d] = (np.asarray(r) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
        rows = np.unique(pairs[:, 0])
        values = acc[rows]

        def commit():
            self.acc[rows] = values
        return self.c.alu_setup + len(pairs), 0, commit

    def _store(self, ins: Store):
        self._entries(ins, "acc", ins.sram, ins.rows * ins.cols)
        idx = ins.offset + np.arange(ins.rows)[:, None] * ins.stride + np.arange(ins.cols)[None, :]
        dst = self._region(ins, ins.region, idx)
        if self.p.regions[ins.region][0] != "out":
            raise VDLAProgramError(f"`{ins}` stores into region '{ins.region}', which is not an "
                                   "out region")
        values = self.acc[ins.sram:ins.sram + ins.rows * ins.cols].astype(np.int8)  # low 8 bits

        def commit():
            dst[idx.reshape(-1)] = values
        return 0, idx.size * self.c.entry_bytes("out"), commit

    def execute(self, ins):
        if isinstance(ins, Load):
            return self._load(ins)
        if isinstance(ins, Gemm):
            return self._gemm(ins)
        if isinstance(ins, Alu):
            return self._alu(ins)
        if isinstance(ins, Store):
            return self._store(ins)
        if isinstance(ins, Finish):
            return 0, 0, lambda: None
        raise VDLAProgramError(f"not a VDLA instruction: {ins!r}")


def simulate(program: Program, dram: dict, trace: list | None = None) -> RunStats:
    """Run `program` on the DRAM regions in `dram` (name -> numpy array, updated in place by
    stores); returns the run's RunStats. A `trace` list gets (module, instruction index,
    start cycle, end cycle) of every instruction.

    Example:
        >>> stats = simulate(program, {"x": x, "w": w, "y": y})  # doctest: +SKIP
    """
    m = _Machine(program, dram)
    c = program.config
    streams = {mod: deque() for mod in MODULES}
    for k, ins in enumerate(program.instructions):
        if ins.module not in streams:
            raise VDLAProgramError(f"instruction {k} `{ins}` has no module")
        streams[ins.module].append((k, ins, *_queues(ins, ins.module)))
    tokens = {q: deque() for q in ("l2c", "c2l", "c2s", "s2c")}
    free = dict.fromkeys(MODULES, 0)
    dram_free = 0
    pending: list = []           # (time, order, commit)
    order = 0
    recent: list = []            # (start, end, module, k, ins, accesses) of other modules' work
    while any(streams.values()):
        best = None
        for mod in MODULES:
            if not streams[mod]:
                continue
            k, ins, pops, _ = streams[mod][0]
            if any(not tokens[q] for q in pops):
                continue
            start = max([free[mod]] + [tokens[q][0] for q in pops])
            if isinstance(ins, (Load, Store)):
                start = max(start, dram_free)
            if best is None or (start, k) < best[0]:
                best = ((start, k), mod)
        if best is None:
            raise VDLADeadlockError(_deadlock(streams, tokens))
        (start, _), mod = best
        k, ins, pops, pushes = streams[mod].popleft()
        while pending and pending[0][0] <= start:
            heapq.heappop(pending)[2]()
        for q in pops:
            tokens[q].popleft()
        duration, nbytes, commit = m.execute(ins)
        if isinstance(ins, (Load, Store)):
            transfer = math.ceil(nbytes / c.dram_bytes_per_cycle)
            dram_free = start + transfer
            duration = c.dram_latency + transfer
            m.stats.dram_bytes += nbytes
        end = start + duration
        mine = accesses(ins)
        recent = [r for r in recent if r[1] > start]    # starts never decrease
        for other in recent:
            if other[2] != mod:
                _check_race((start, end, mod, k, ins, mine), other)
        recent.append((start, end, mod, k, ins, mine))
        if trace is not None:
            trace.append((mod, k, start, end))
        heapq.heappush(pending, (end, order, commit))
        order += 1
        free[mod] = end
        m.stats.busy[mod] += duration
        m.stats.cycles = max(m.stats.cycles, end)
        for q in pushes:
            tokens[q].append(end)
    while pending:
        heapq.heappop(pending)[2]()
    m.stats.leftover_tokens = {q: len(t) for q, t in tokens.items() if t}
    return m.stats


def _check_race(a, b):
    if not conflict(a[5], b[5]):
        return
    first, second = sorted((a, b), key=lambda r: r[3])
    where = next((buf, max(lo, lo2), min(hi, hi2)) for buf, lo, hi, w in a[5]
                 for buf2, lo2, hi2, w2 in b[5]
                 if buf == buf2 and (w or w2) and lo <= hi2 and lo2 <= hi)
    raise VDLARaceError(
        f"VDLA race on {where[0]} entries {where[1]}..{where[2]}: instruction {first[3]} "
        f"`{first[4]}` ({first[2]}, cycles {first[0]}-{first[1]}) and instruction {second[3]} "
        f"`{second[4]}` ({second[2]}, cycles {second[0]}-{second[1]}) overlap and one writes; "
        "a dependence token must order them")


def _deadlock(streams, tokens) -> str:
    lines = []
    for mod in MODULES:
        if streams[mod]:
            k, ins, pops, _ = streams[mod][0]
            empty = [q for q in pops if not tokens[q]]
            lines.append(f"{mod} waits at instruction {k} `{ins}` for a token on "
                         f"{' and '.join(empty)}")
        else:
            lines.append(f"{mod} has finished")
    return "VDLA program deadlocked: " + "; ".join(lines)


__all__ = ["simulate", "RunStats", "VDLADeadlockError", "VDLARaceError", "Deps"]

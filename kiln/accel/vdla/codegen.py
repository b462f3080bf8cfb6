"""VDLA code generation: a lowered loop program -> a VDLA instruction stream.

The code generator runs the program's loops itself, as VTA's runtime does on its host CPU, and
emits one instruction per piece of work:
- a loop nest under `pragma dma_copy` that copies between a DRAM argument and an on-chip
  buffer becomes a LOAD, or a STORE from the accumulators. Its index arithmetic must be affine
  in the loops, and reduce to rows × columns of whole entries.
- a loop nest under `pragma alu` that computes accumulator entries from accumulator entries
  (shift right, min, max, add, multiply by a constant) becomes ALU instructions: a `mov` when
  source and destination differ, then one instruction per operation.
- the tensorized GEMM's micro-ops (`vdla_gemm` calls) between two other instructions form one
  GEMM instruction.

On-chip buffers are the allocations in the scopes local.inp_buffer / local.wgt_buffer /
local.acc_buffer, placed one after another. The stream is written in program order and then
gets its dependence tokens (tokens.py), so the modules overlap wherever the order allows:
after virtual threads are interleaved, that is the latency hiding of the TVM paper's Fig. 9.

Example:
    >>> program, layout = generate(kiln.lower(s, [A, W, C], target="vdla"))  # doctest: +SKIP
"""
from __future__ import annotations

import functools
import itertools
import math

from ...codegen.common import CodegenError
from ...tir.buffer import Buffer
from ...tir import expr as E
from ...tir.stmt import (Allocate, AttrStmt, BufferStore, Evaluate, For, IfThenElse, LetStmt,
                         SeqStmt)
from .intrin import BUFFER_OF_SCOPE, GEMM_CALL
from .isa import Alu, Finish, Gemm, Load, Program, Store, VDLAConfig
from .tokens import insert_tokens
from ...tir.transform.virtual_thread import is_vthread_loop


class VDLACodegenError(CodegenError):
    """A statement VDLA cannot run, or a copy / ALU nest that does not fit its instructions."""


_BINARY = {E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
           E.FloorDiv: lambda a, b: a // b, E.FloorMod: lambda a, b: a % b,
           E.Div: lambda a, b: int(a / b), E.Mod: lambda a, b: int(math.fmod(a, b)),
           E.Min: min, E.Max: max, E.LT: lambda a, b: a < b, E.LE: lambda a, b: a <= b,
           E.GT: lambda a, b: a > b, E.GE: lambda a, b: a >= b, E.EQ: lambda a, b: a == b,
           E.NE: lambda a, b: a != b, E.And: lambda a, b: a and b, E.Or: lambda a, b: a or b}


def evaluate(e, env: dict) -> int:
    """The integer value of an index or condition expression with the loops at `env`."""
    if isinstance(e, E.IntImm):
        return e.value
    if isinstance(e, E.Var):
        if e not in env:
            raise VDLACodegenError(f"`{e.name}` has no value here; VDLA programs run with "
                                   "every loop extent and size known")
        return env[e]
    fn = _BINARY.get(type(e))
    if fn is not None:
        return int(fn(evaluate(e.a, env), evaluate(e.b, env)))
    if isinstance(e, E.Not):
        return int(not evaluate(e.a, env))
    if isinstance(e, E.Cast):
        return evaluate(e.value, env)
    if isinstance(e, E.Select):
        return evaluate(e.true_value if evaluate(e.condition, env) else e.false_value, env)
    if isinstance(e, E.Call) and e.op == "likely":
        return evaluate(e.args[0], env)
    raise VDLACodegenError(f"cannot compute `{e}` ahead of the run")


def _affine(e, loops, env):
    """(value at the first iteration, step per loop) of `e`, checked at the last iteration."""
    at = {**env, **{v: 0 for v, _ in loops}}
    base = evaluate(e, at)
    steps = [evaluate(e, {**at, v: 1}) - base for v, _ in loops]
    # Along every loop, and at the far corner (a floormod of a sum folds only there).
    points = [{**at, v: k} for v, n in loops for k in range(2, n)]
    points.append({**env, **{v: n - 1 for v, n in loops}})
    for p in points:
        if evaluate(e, p) != base + sum(s * p[v] for s, (v, _) in zip(steps, loops)):
            raise VDLACodegenError(f"index `{e}` is not affine in the copy's loops")
    return base, steps


def _nest(s, env):
    """The loops and the single store of a perfect loop nest (under its pragma)."""
    loops = []
    if isinstance(s, AttrStmt):
        s = s.body
    while isinstance(s, For):
        loops.append((s.loop_var, evaluate(s.extent, env)))
        s = s.body
    if not isinstance(s, BufferStore):
        raise VDLACodegenError(f"a dma_copy / alu nest holds one store, found `{type(s).__name__}`")
    return loops, s


class _Generator:
    def __init__(self, func, config: VDLAConfig):
        self.func, self.c = func, config
        self.args = {p.data: p for p in func.params if isinstance(p, Buffer)}
        for p in func.params:
            if not isinstance(p, Buffer):
                raise VDLACodegenError(f"argument `{p}` is a scalar; a VDLA program's arguments "
                                       "are tensors of known shape")
        self.regions: dict = {}            # buffer name -> (kind, entries)
        self.onchip: dict = {}             # buffer data var -> (kind, first entry)
        self.top = dict.fromkeys(("inp", "wgt", "acc"), 0)
        self.out: list = []                # (run, instruction)
        self.run = (0, None)               # (count, module) of the runs of one module's work
        self.gemm = None                   # (reset, [uops]) being gathered
        self.vthreads: tuple = ()          # the virtual thread indices being generated
        self.placed: dict = {}             # (allocation, vthreads) -> first entry

    # ---------------------------------------------------------------- helpers
    def entry(self, kind):
        return {"inp": self.c.block_in, "wgt": self.c.block_out * self.c.block_in,
                "acc": self.c.block_out, "out": self.c.block_out}[kind]

    def emit(self, ins):
        self.flush()
        self.append(ins)

    def append(self, ins):
        count, module = self.run
        if ins.module != module:
            self.run = (count + 1, ins.module)
        self.out.append((self.run[0], ins))

    def flush(self):
        if self.gemm is not None:
            reset, uops = self.gemm
            self.gemm = None
            self.append(Gemm(reset, tuple(uops)))

    def region(self, buf, kind):
        n = math.prod(evaluate(x, {}) for x in buf.shape)
        size = self.entry(kind)
        if n % size:
            raise VDLACodegenError(f"argument '{buf.name}' has {n} elements, not a whole number "
                                   f"of {kind} entries of {size}")
        known = self.regions.setdefault(buf.name, (kind, n // size))
        if known[0] != kind:
            raise VDLACodegenError(f"argument '{buf.name}' is used as {known[0]} and as {kind}")
        return buf.name

    def onchip_entry(self, buf, offset, what):
        kind, first = self.onchip[buf.data]
        size = self.entry(kind)
        if offset % size:
            raise VDLACodegenError(f"{what} starts at element {offset} of '{buf.name}', inside an "
                                   f"entry of {size}")
        return first + offset // size

    # ---------------------------------------------------------------- statements
    def stmt(self, s, env):
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x, env)
        elif isinstance(s, For):
            pragmas = {k for k, _ in s.annotations}
            if is_vthread_loop(s):
                self.virtual_threads(s, env)
            elif "pragma_dma_copy" in pragmas:
                self.dma(s, env)
            elif "pragma_alu" in pragmas:
                self.alu(s, env)
            else:
                for k in range(evaluate(s.extent, env)):
                    self.stmt(s.body, {**env, s.loop_var: k})
        elif isinstance(s, Allocate):
            self.allocate(s, env)
        elif _is_gemm(s):
            self.gemm_uop(s.value, env)
        elif isinstance(s, IfThenElse):
            branch = s.then_case if evaluate(s.condition, env) else s.else_case
            if branch is not None:
                self.stmt(branch, env)
        elif isinstance(s, LetStmt):
            self.stmt(s.body, {**env, s.var: evaluate(s.value, env)})
        elif isinstance(s, AttrStmt) and s.key == "pragma_dma_copy":
            self.dma(s, env)
        elif isinstance(s, AttrStmt) and s.key == "pragma_alu":
            self.alu(s, env)
        elif isinstance(s, AttrStmt):
            self.stmt(s.body, env)
        elif isinstance(s, Evaluate) and isinstance(s.value, E.IntImm):
            pass
        else:
            raise VDLACodegenError(
                f"VDLA cannot run `{str(s).strip().splitlines()[0]}`: mark copies between DRAM "
                "and its buffers with pragma dma_copy, accumulator arithmetic with pragma alu, "
                "and tensorize the GEMM (kiln.accel.vdla.intrin.gemm)")

    def allocate(self, s, env):
        kind = BUFFER_OF_SCOPE.get(s.buffer.scope)
        if kind is None:
            raise VDLACodegenError(f"buffer '{s.buffer.name}' is in scope '{s.buffer.scope}'; "
                                   "VDLA has no memory for it (its scopes: "
                                   f"{', '.join(BUFFER_OF_SCOPE)})")
        # Inside virtual threads each thread keeps its own copy of a buffer for the whole
        # interleaved stream; elsewhere buffers nest like a stack.
        key = (s, self.vthreads)
        first = self.placed.get(key) if self.vthreads else None
        if first is None:
            entries = -(-evaluate(s.extent, env) // self.entry(kind))
            first = self.top[kind]
            if first + entries > self.c.entries(kind):
                raise VDLACodegenError(f"buffer '{s.buffer.name}' needs {entries} {kind} "
                                       f"entries from entry {first}; the {kind} buffer has "
                                       f"{self.c.entries(kind)}")
            self.top[kind] += entries
            if self.vthreads:
                self.placed[key] = first
        self.onchip[s.buffer.data] = (kind, first)
        self.stmt(s.body, env)
        del self.onchip[s.buffer.data]
        if not self.vthreads:
            self.top[kind] = first

    def virtual_threads(self, s, env):
        """The virtual threads' instructions interleaved (the paper's Fig. 9): each run of one
        module's consecutive work in the body, for every thread in turn (a thread's loads stay
        together, so the in-order load module does not hold one thread's next load behind
        another's). Every thread has its own copy of the buffers allocated inside the loop and
        does its own loads into them (a copy shared by the threads would make the next load
        wait for all their GEMMs), so the modules overlap one thread's loads with another's
        GEMMs, as the tokens allow."""
        self.flush()
        outer_top, outer_out, first_run = dict(self.top), self.out, self.run
        streams = []
        for v in range(evaluate(s.extent, env)):
            self.vthreads += (v,)
            self.out, self.run = [], first_run
            self.stmt(s.body, {**env, s.loop_var: v})
            self.flush()
            streams.append(self.out)
            self.vthreads = self.vthreads[:-1]
        self.out = outer_out
        # By run, then by thread (sorting is stable).
        self.out.extend(sorted((x for stream in streams for x in stream), key=lambda x: x[0]))
        self.run = max((x[0] for x in self.out), default=first_run[0]), None
        if not self.vthreads:
            self.top, self.placed = outer_top, {}

    def gemm_uop(self, call, env):
        acc, inp, wgt, reset = call.args
        uop = tuple(self.onchip_entry(x.buffer, evaluate(x.index, env), "a GEMM operand")
                    if isinstance(x, E.BufferLoad) else evaluate(x, env) for x in (acc, inp, wgt))
        reset = bool(evaluate(reset, env))
        if self.gemm is None or self.gemm[0] != reset:
            self.flush()
            self.gemm = (reset, [])
        self.gemm[1].append(uop)

    # ---------------------------------------------------------------- copies
    def dma(self, s, env):
        loops, store = _nest(s, env)
        value, cond = store.value, None
        if isinstance(value, E.Cast) and value.dtype == "int8" and value.value.dtype == "int32":
            value = value.value              # a store narrows the accumulators
        if isinstance(value, E.Call) and value.op == "if_then_else" and _is_zero(value.args[2]):
            cond, value = value.args[0], value.args[1]     # zero padding around the data
        if not isinstance(value, E.BufferLoad):
            raise VDLACodegenError(f"a dma_copy nest copies, but it stores `{store.value}`")
        dst_kind = BUFFER_OF_SCOPE.get(store.buffer.scope)
        src_kind = BUFFER_OF_SCOPE.get(value.buffer.scope)
        if dst_kind is not None and value.buffer.data in self.args:
            kind, onchip_side = dst_kind, store
            dram_buf, dram_index = value.buffer, value.index
        elif src_kind == "acc" and store.buffer.data in self.args and cond is None:
            kind, onchip_side = "out", value
            dram_buf, dram_index = store.buffer, store.index
        else:
            raise VDLACodegenError(f"a dma_copy nest moves data between a DRAM argument and an "
                                   f"on-chip buffer (or out of the accumulators); this one copies "
                                   f"'{value.buffer.name}' into '{store.buffer.name}'")
        want = "int32" if kind == "acc" else "int8"
        if dram_buf.dtype != want:
            raise VDLACodegenError(f"VDLA moves {want} {kind} data; argument '{dram_buf.name}' "
                                   f"is {dram_buf.dtype}")
        size = self.entry(kind)
        what = str(s).splitlines()[0].strip()
        onchip_base, onchip_steps = _affine(onchip_side.index, loops, env)
        dram_base, dram_steps = _affine(dram_index, loops, env)
        region = self.region(dram_buf, kind)
        copies = functools.partial(self._copies, kind, what, loops, env, onchip_side, region,
                                   cond, size, onchip_base, onchip_steps, dram_base, dram_steps)
        try:
            instructions = copies(padded=False)
        except VDLACodegenError:
            if cond is None:
                raise
            # Merged loops' padding was not one rectangle: one copy per loop nest instead.
            instructions = copies(padded=True)
        for instruction in instructions:
            self.emit(instruction)

    def _copies(self, kind, what, loops, env, onchip_side, region, cond, size, onchip_base,
                onchip_steps, dram_base, dram_steps, padded):
        """The LOAD / STORE instructions of a copy (see _entry_dims for `padded`)."""
        (rows, row_step, dram_stride), (cols, _, _), outer = _entry_dims(
            loops, onchip_steps, dram_steps, size, what, padded)
        if rows > 1 and row_step != cols:
            raise VDLACodegenError(f"the on-chip side of `{what}` is not rows of consecutive "
                                   "entries")
        if onchip_base % size or dram_base % size:
            raise VDLACodegenError(f"`{what}` starts inside an entry")
        sram0 = self.onchip_entry(onchip_side.buffer, onchip_base, "a copy")
        inside = None if cond is None else _in_bounds(cond, loops, onchip_steps, onchip_base,
                                                      size, env)
        copies = []
        for point in itertools.product(*(range(n) for n, _, _ in outer)):
            on = sum(k * a for k, (_, a, _) in zip(point, outer))
            dram = dram_base // size + sum(k * b for k, (_, _, b) in zip(point, outer))
            if kind == "out":
                copies.append(Store(sram0 + on, region, dram, rows, cols, dram_stride))
                continue
            pads = (0, 0, 0, 0)
            if inside is not None:
                pads = _pads([[inside[on + r * cols + c] for c in range(cols)]
                              for r in range(rows)], what)
                top, bottom, left, right = pads
                dram += top * dram_stride + left
                if top + bottom >= rows or left + right >= cols:
                    # All padding: write zeros through an empty load.
                    pads, dram = (rows, 0, 0, 0), dram_base // size
            top, bottom, left, right = pads
            copies.append(Load(kind, sram0 + on, region, dram, rows - top - bottom,
                               cols - left - right, dram_stride, pads=pads))
        return copies

    # ---------------------------------------------------------------- ALU
    def alu(self, s, env):
        loops, store = _nest(s, env)
        if BUFFER_OF_SCOPE.get(store.buffer.scope) != "acc":
            raise VDLACodegenError(f"an alu nest computes accumulator entries; this one writes "
                                   f"'{store.buffer.name}' ({store.buffer.scope})")
        size = self.entry("acc")
        source, chain = _alu_chain(store.value, store.value)
        ops = tuple((op, imm if not isinstance(imm, E.BufferLoad) else None) for op, imm in chain)
        entries: dict = {}                  # dst entry -> (src entry, {lanes}, operand entries)
        for point in itertools.product(*(range(n) for _, n in loops)):
            at = {**env, **{v: k for (v, _), k in zip(loops, point)}}
            dst = self.onchip_lane(store.buffer, evaluate(store.index, at))
            src = self.onchip_lane(source.buffer, evaluate(source.index, at))
            others = tuple(self.onchip_lane(imm.buffer, evaluate(imm.index, at))
                           for _, imm in chain if isinstance(imm, E.BufferLoad))
            if any(lane != dst[1] for _, lane in (src,) + others):
                raise VDLACodegenError("an alu nest combines elements of different lanes")
            got = entries.setdefault(dst[0], (src[0], set(), tuple(e for e, _ in others)))
            if got[0] != src[0] or got[2] != tuple(e for e, _ in others):
                raise VDLACodegenError("an alu nest reads different entries for one entry")
            got[1].add(dst[1])
        partial = [d for d, (_, lanes, _) in entries.items() if len(lanes) != size]
        if partial:
            raise VDLACodegenError(f"an alu nest must compute whole entries of {size} lanes; "
                                   f"entry {partial[0]} gets {len(entries[partial[0]][1])}")
        dsts = sorted(entries)
        moves = tuple((d, entries[d][0]) for d in dsts if entries[d][0] != d)
        # The ALU updates in place, after the mov: a source or operand that is a result's
        # entry (its own, once moved into) would be read after it changed.
        moved = {d for d, _ in moves}
        if any(src in entries for _, src in moves) or any(
                o in entries and (o != d or d in moved) for d in dsts for o in entries[d][2]):
            raise VDLACodegenError("an alu nest reads entries it also writes (other than each "
                                   "result's own); compute it into a buffer of its own")
        if moves:
            self.emit(Alu("mov", moves))
        operand = 0
        for op, imm in ops:
            if imm is None:
                self.emit(Alu(op, tuple((d, entries[d][2][operand]) for d in dsts)))
                operand += 1
            else:
                self.emit(Alu(op, tuple((d, 0) for d in dsts), imm=imm))

    def onchip_lane(self, buf, offset):
        if buf.data not in self.onchip or self.onchip[buf.data][0] != "acc":
            raise VDLACodegenError(f"an alu nest works on accumulators; '{buf.name}' is not one")
        kind, first = self.onchip[buf.data]
        return first + offset // self.entry("acc"), offset % self.entry("acc")


def _is_gemm(s) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, E.Call) and s.value.op == GEMM_CALL


_ALU_OF = {E.Min: "min", E.Max: "max", E.Add: "add", E.Mul: "mul"}


def _alu_chain(e, whole):
    """(source load, [(op, int immediate or operand load)]) of an accumulator expression."""
    if isinstance(e, E.BufferLoad):
        return e, []
    if isinstance(e, E.Cast) and e.dtype == "int32":
        return _alu_chain(e.value, whole)
    if isinstance(e, E.Call) and e.op == "shift_right" and isinstance(e.args[1], E.IntImm):
        source, chain = _alu_chain(e.args[0], whole)
        return source, chain + [("shr", e.args[1].value)]
    op = _ALU_OF.get(type(e))
    if op is not None:
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, E.IntImm):
                source, chain = _alu_chain(x, whole)
                return source, chain + [(op, y.value)]
        if isinstance(e.b, E.BufferLoad):
            source, chain = _alu_chain(e.a, whole)
            return source, chain + [(op, e.b)]
    raise VDLACodegenError(f"the ALU cannot compute `{e}` (in `{whole}`): it adds, multiplies, "
                           "takes min / max with a constant or another accumulator, and shifts "
                           "right by a constant")


def _entry_dims(loops, onchip_steps, dram_steps, size, what, padded=False):
    """(rows, cols, outer) of a copy in entries: cols (n, 1, 1) consecutive on both sides,
    rows (n, on-chip step, DRAM stride), and any outer dims (innermost first), each one
    instruction per point. Loops whose steps line up merge into one dimension, except in a
    `padded` copy, where each loop beyond the innermost elements stays its own: the padding
    is a rectangle per loop nest, and rows of two channel blocks merged would interleave it."""
    dims = [(n, a, b) for (_, n), a, b in zip(loops, onchip_steps, dram_steps) if n > 1]
    merged = []
    for n, a, b in reversed(dims):         # innermost first
        if merged and merged[-1][1] * merged[-1][0] == a and merged[-1][2] * merged[-1][0] == b \
                and not (padded and merged[-1][1] != 1):
            m, ma, mb = merged.pop()
            merged.append((m * n, ma, mb))
        else:
            merged.append((n, a, b))
    if not merged or merged[0][1:] != (1, 1) or merged[0][0] % size:
        raise VDLACodegenError(f"`{what}` does not copy whole entries of {size} consecutive "
                               "elements")
    inner = merged[0][0] // size
    rest = [(inner, size, size)] + merged[1:]
    for n, a, b in rest[1:]:
        if a % size or b % size:
            raise VDLACodegenError(f"`{what}` steps inside an entry")
    entries = [(n, a // size, b // size) for n, a, b in rest if n > 1]
    while not padded and len(entries) > 1 and entries[1][1] == entries[0][0] * entries[0][1] \
            and entries[1][2] == entries[0][0] * entries[0][2]:
        (n0, a0, b0), (n1, _, _) = entries[0], entries[1]
        entries[:2] = [(n0 * n1, a0, b0)]
    if entries and entries[0][1:] == (1, 1):
        cols, entries = entries[0], entries[1:]
    else:
        cols = (1, 1, 1)                  # single entries, one per row
    rows = entries[0] if entries else (1, cols[0], cols[0])
    return rows, cols, entries[1:]


def _is_zero(e) -> bool:
    return isinstance(e, (E.IntImm, E.FloatImm)) and e.value == 0


def _in_bounds(cond, loops, onchip_steps, onchip_base, size, env) -> dict:
    """On-chip entry (relative to the copy's first) -> whether its data is inside the tensor
    (the padding condition, at the entry's first element)."""
    whole = [(v, n) for (v, n), a in zip(loops, onchip_steps) if n > 1 and a >= size]
    inside = {}
    for point in itertools.product(*(range(n) for _, n in whole)):
        at = {**env, **{v: 0 for v, _ in loops}, **{v: k for (v, _), k in zip(whole, point)}}
        offset = sum(k * a for k, a in zip(point, [a for (_, n), a in zip(loops, onchip_steps)
                                                   if n > 1 and a >= size]))
        inside[offset // size] = bool(evaluate(cond, at))
    return inside


def _pads(grid, what):
    """(top, bottom, left, right) of the padding around the one rectangle of data in a
    grid of booleans."""
    rows_in = [r for r, row in enumerate(grid) if any(row)]
    cols_in = [c for c in range(len(grid[0])) if any(row[c] for row in grid)]
    if not rows_in:
        return len(grid), 0, 0, 0
    top, bottom = rows_in[0], len(grid) - 1 - rows_in[-1]
    left, right = cols_in[0], len(grid[0]) - 1 - cols_in[-1]
    for r, row in enumerate(grid):
        for c, flag in enumerate(row):
            want = top <= r < len(grid) - bottom and left <= c < len(grid[0]) - right
            if flag != want:
                raise VDLACodegenError(f"the data of `{what}` is not one rectangle inside its "
                                       "padding")
    return top, bottom, left, right


def generate(func, config: VDLAConfig = VDLAConfig()) -> Program:
    """The VDLA program of a lowered function, with its dependence tokens.

    Example:
        >>> program = generate(kiln.lower(s, [A, W, C], target="vdla"))  # doctest: +SKIP
    """
    gen = _Generator(func, config)
    gen.stmt(func.body, {})
    gen.flush()
    used = {p.name for p in func.params if p.name in gen.regions}
    missing = [p.name for p in func.params if p.name not in used]
    if missing:
        raise VDLACodegenError(f"argument(s) {', '.join(missing)} are neither loaded nor stored "
                               "by a dma_copy nest")
    program = Program(tuple(ins for _, ins in gen.out) + (Finish(),), gen.regions, config)
    return insert_tokens(program)


def build_vdla(funcs, target, entry):
    """The code generator registered for target kind "vdla": one function, one program.

    Example:
        >>> f = kiln.build(s, [A, W, C], target="vdla")  # doctest: +SKIP
    """
    from .module import VDLAModule
    if len(funcs) != 1:
        raise VDLACodegenError(f"a VDLA build takes one function, got {len(funcs)}")
    func = funcs[0]
    program = generate(func)
    args = [(p.name, tuple(evaluate(x, {}) for x in p.shape), p.dtype) for p in func.params]
    return VDLAModule(func.name, program, args)

"""GPU sketch rules (Ansor's "SSSRRSRS" with thread binding), for OpenCL and CUDA targets.

Every output's elements are spread over blocks of threads, and every other stage is computed
inside the thread loop of the output that reads it (as kiln's generic GPU schedule does).
Kernels these rules do not cover raise UnsupportedDAG (they keep their registered schedule):
an output without data axes (a full reduction to one value), or a stage read by two outputs.

- inline: every injective stage that is not an output;
- multi-level tiling with thread binding ("tile"): a reduction with data reuse whose reader is
  an output reading it elementwise, or which is an output itself (then through a local cache
  stage), is computed per thread in registers: the reader's data axes are split into
  block / virtual-thread / thread / inner levels, fused per level and bound to blockIdx.x,
  vthread and threadIdx.x; the tile is computed at the thread loop, its reduction split in
  two, and optionally ("shared" decision) each input slice is staged in shared memory at the
  outer reduction loop, fetched cooperatively by the block's threads;
- anything else: an output is spread one element per thread (a chosen number of threads per
  block); a reduction or a tiled stage without an elementwise reader is computed per thread
  inside the output's thread loop, in local memory.

Thread counts are drawn within the target's max_num_threads. Shared memory is not bounded by
the rules: a program staging more than the device has fails at launch (a runtime_error
measurement, not a wrong result).

Example:
    >>> sketches = generate_gpu_sketches(dag)               # doctest: +SKIP
    >>> annotate_gpu(dag, sketches[0], Decisions(rng=0))    # doctest: +SKIP
"""
from __future__ import annotations

import math

from ..te.tensor import ComputeOp, PlaceholderOp
from .compute_dag import ComputeDAG, UnsupportedDAG
from .program import Program, State
from .sketch import UNROLL_STEPS, Decisions, Sketch, _effective, divisors

__all__ = ["generate_gpu_sketches", "annotate_gpu", "THREAD_CHOICES"]

THREAD_CHOICES = (32, 64, 128, 256, 512, 1024)


def _inline_all(state):
    for st in list(state.schedule.stages):
        if isinstance(st.op, ComputeOp) and not st.op.reduce_axis and not st.is_output:
            state.inline(st)


def _elementwise_reader(state, eff, consumers, st):
    from .sketch import _reads_at_own_axes
    readers = consumers[st]
    if len(readers) != 1:
        return None
    (c,) = readers
    if not c.is_output or c.op.reduce_axis:
        return None
    return c if _reads_at_own_axes(state, eff, c, st) else None


def generate_gpu_sketches(dag: ComputeDAG) -> list[Sketch]:
    """One sketch: every reduction with data reuse that can be tiled per thread is ("tile").

    Example:
        >>> [str(s) for s in generate_gpu_sketches(ComputeDAG([C]))]   # doctest: +SKIP
        ['C:tile']
    """
    state = State(dag.outputs)
    _inline_all(state)
    eff, consumers = _effective(state)
    for st in state.schedule.stages:
        if st.is_output and isinstance(st.op, ComputeOp) and not st.op.axis:
            raise UnsupportedDAG(f"output {st.op.name} has no data axes to spread over threads")
        if isinstance(st.op, ComputeOp) and not st.is_output and st.attach_type != "inline" \
                and sum(o.is_output and state.schedule._consumes(o, st)
                        for o in state.schedule.stages) > 1:
            raise UnsupportedDAG(f"stage {st.op.name} is read by several outputs")
    choices = []
    for k, op in enumerate(dag.ops):
        st = state.schedule[op]
        if not isinstance(op, ComputeOp) or st.attach_type == "inline":
            continue
        if ComputeDAG.has_data_reuse(op) and op.num_outputs == 1 and (
                st.is_output or _elementwise_reader(state, eff, consumers, st) is not None):
            choices.append((k, "tile"))
    return [Sketch(choices, [op.name for op in dag.ops])]


class _GPUAnnotator:
    def __init__(self, dag, sketch, decisions, max_threads: int):
        self.dag, self.d, self.max_threads = dag, decisions, max_threads
        self.state = State(dag.outputs)
        self.sched = self.state.schedule
        self.tiled = {self.sched[dag.ops[k]] for k, v in sketch.choices if v == "tile"}
        self.hosts: list = []          # (output stage, its thread loop)

    def name(self, st) -> str:
        return str(self.dag.ops.index(st.origin_op)) if st.origin_op in self.dag.ops \
            else st.op.name

    def run(self) -> Program:
        s = self.state
        tiles = {}                     # reader stage -> tiled (local) stage
        for st in list(self.tiled):
            if st.is_output:
                local = s.cache_write(st, "local")
                tiles[st] = local
        _inline_all(s)
        eff, consumers = _effective(s)
        for st in self.tiled:
            if not st.is_output:
                tiles[_elementwise_reader(s, eff, consumers, st)] = st
        for st in list(self.sched.stages):
            if isinstance(st.op, ComputeOp) and st.is_output:
                if st in tiles:
                    self.tile(st, tiles[st])
                else:
                    self.spread(st)
        tiled_stages = set(tiles.values())
        for st in reversed(list(self.sched.stages)):
            if not isinstance(st.op, ComputeOp) or st.is_output or \
                    st.attach_type != "root" or st in tiled_stages:
                continue
            host = self._host(st)
            s.compute_at(st, *host)        # (per thread: kiln places it in local memory)
        return s.program()

    def _host(self, st):
        """The thread loop of the output that reads `st` (generate_gpu_sketches checked that
        there is exactly one)."""
        return next((host, loop) for host, loop in self.hosts
                    if self.sched._consumes(host, st))

    def _threads(self, key: str) -> int:
        return self.d.pick(f"threads:{key}", [t for t in THREAD_CHOICES
                                               if t <= self.max_threads] or [1])

    def spread(self, st):
        """One thread per element: the output's axes fused and split into blocks."""
        s = self.state
        fused = s.fuse(st, list(st.leaf_iter_vars[:len(st.op.axis)])) \
            if len(st.op.axis) > 1 else st.leaf_iter_vars[0]
        block, thread = s.split(st, fused, [self._threads(self.name(st))])
        s.bind(st, block, "blockIdx.x")
        s.bind(st, thread, "threadIdx.x")
        self.hosts.append((st, thread))


    def tile(self, c, t):
        """`c` (an output reading `t` elementwise) tiled block / vthread / thread / inner;
        `t` computed per thread in registers, its inputs optionally staged in shared memory."""
        s = self.state
        key = self.name(t)
        levels = [[], [], [], []]
        budget = self.max_threads
        for a, (iv, n) in enumerate(zip(c.op.axis, ComputeDAG.extents(c.op))):
            if n == 1:
                levels[0].append(iv)
                continue
            v, th, inner = self._tile_lengths(f"tile:{key}:{a}", n, budget)
            budget //= th
            for lv, loop in zip(levels, s.split(c, iv, [v, th, inner])):
                lv.append(loop)
        s.reorder(c, [iv for lv in levels for iv in lv])
        fused = [s.fuse(c, lv) if len(lv) > 1 else (lv[0] if lv else None) for lv in levels]
        block, vthread, thread, _ = fused
        s.bind(c, block, "blockIdx.x")
        if vthread is not None:
            s.bind(c, vthread, "vthread")
        if thread is None:     # every data axis of extent 1: one thread
            thread = block
        else:
            s.bind(c, thread, "threadIdx.x")
        self.hosts.append((c, thread))
        s.compute_at(t, c, thread)
        red = [iv for iv in t.leaf_iter_vars if iv not in t.op.axis]
        data = [iv for iv in t.leaf_iter_vars if iv in t.op.axis]
        outer, inner = [], []
        for a, (iv, n) in enumerate(zip(t.op.reduce_axis, ComputeDAG.reduce_extents(t.op))):
            (f,) = self.d.factors(f"rtile:{key}:{a}", n, 1, innermost=n)
            ro, ri = s.split(t, red[a], [f])
            outer.append(ro)
            inner.append(ri)
        s.reorder(t, outer + inner + data)
        steps = self.d.pick(f"unroll:{key}", UNROLL_STEPS)
        if steps and outer:
            s.pragma(t, outer[0], "auto_unroll_max_step", steps)
        if outer and self.d.pick(f"shared:{key}", (0, 1)):
            threads = math.prod(self.d.values[f"tile:{key}:{a}"][1]
                                for a, n in enumerate(ComputeDAG.extents(c.op)) if n > 1)
            for tensor in t.op.input_tensors():
                if isinstance(tensor.op, PlaceholderOp):
                    staged = self.state.cache_read(tensor, "shared", [t])
                    s.compute_at(staged, t, outer[-1])
                    loops = list(staged.leaf_iter_vars)
                    copy = s.fuse(staged, loops) if len(loops) > 1 else loops[0]
                    if threads > 1:
                        _, lane = s.split(staged, copy, [threads])
                        s.bind(staged, lane, "threadIdx.x")

    def _tile_lengths(self, name, extent, budget):
        """(vthread, thread, inner) lengths of one axis, dividing `extent`, the thread part
        within `budget` threads."""
        v = self.d.values.get(name)
        if isinstance(v, (list, tuple)) and len(v) == 3 and \
                all(isinstance(x, int) and x >= 1 for x in v) and \
                extent % math.prod(v) == 0 and v[0] <= 4 and v[1] <= budget and v[2] <= 8:
            return tuple(v)
        rng = self.d.rng
        inner = rng.choice([x for x in divisors(extent) if x <= 8])
        left = extent // inner
        th = rng.choice([x for x in divisors(left) if x <= budget])
        vt = rng.choice([x for x in divisors(left // th) if x <= 4])
        self.d.values[name] = (vt, th, inner)
        return vt, th, inner


def annotate_gpu(dag: ComputeDAG, sketch: Sketch, decisions: Decisions,
                 max_threads: int = 256) -> Program:
    """A complete GPU program of `sketch` (see the module docstring).

    Example:
        >>> program = annotate_gpu(dag, sketch, Decisions(rng=0), 256)   # doctest: +SKIP
    """
    return _GPUAnnotator(dag, sketch, decisions, max_threads).run()


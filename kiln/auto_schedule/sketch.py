"""Sketches (Ansor's derivation rules) and their random annotation into complete programs.

A sketch fixes a kernel's structure: for each stage, which rule shapes it. The rules, applied
to the kernel's stages from its outputs back (Ansor, OSDI'20, §4.1, the CPU rules):

- always inline: an injective stage that is not an output is inlined into its readers,
  unless it is expensive and read twice (softmax's exp) or combines several elements and feeds
  a stage with data reuse (Winograd's transforms), where it is computed once;
- multi-level tiling ("tile"): a reduction with data reuse (matmul, convolution) gets the
  SSRSRS structure: each data axis split into four levels S0..S3, each reduction axis into
  two, ordered S0 S1 R0 S2 R1 S3;
- tiling with consumer fusion ("fuse1", "fuse2"): when its one reader is an output that reads
  it at its own axes (a bias + ReLU), that reader is tiled the same way and the tiled stage is
  computed inside its tile at level S1 or S2;
- cache write ("cache1", "cache2"): a tiled output with no such reader gets a local stage
  that computes a tile, fused into the output's copy of it the same way;
- rfactor: a reduction of at least a vector's worth per output (a row sum, a global mean) is
  factored over a vectorized inner part of the reduction, the partial sums computed per
  output row or at the root (parallel over their rows);
- any other stage (an injective output, a reduction without reuse such as a row max or a
  pooling window) keeps its loops for annotation.

Annotation fills a sketch into a program with decisions drawn at random where the
Decisions object has none yet: tile sizes (divisors, so every split is exact), how many
outer loops are fused and run in parallel, the vector width of the innermost loop, an
auto-unroll bound, and where a reduction without reuse is computed (at the root, or inside
one of its reader's loops). Every choice offered is legal by construction, so every program
lowers (tests lower thousands and compare them with numpy).

Example:
    >>> from kiln import te
    >>> A = te.placeholder((64, 32), name="A"); B = te.placeholder((32, 48), name="B")
    >>> k = te.reduce_axis((0, 32), name="k")
    >>> C = te.compute((64, 48), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> sketches = generate_sketches(ComputeDAG([C]))
    >>> [str(s) for s in sketches]
    ['C:tile', 'C:cache1', 'C:cache2']
    >>> program = annotate(ComputeDAG([C]), sketches[1], Decisions(rng=0))
    >>> program.steps[0]
    ('cache_write', 2, 'local')
"""
from __future__ import annotations

import itertools
import math
import random

from ..te.inline import effective_bodies, effective_consumers
from ..te.tensor import ComputeOp
from .compute_dag import ComputeDAG
from .program import Program, State

__all__ = ["Sketch", "Decisions", "generate_sketches", "annotate", "MAX_SKETCHES",
           "UNROLL_STEPS", "MAX_VECTOR"]

MAX_SKETCHES = 32
UNROLL_STEPS = (0, 16, 64, 512)      # auto_unroll_max_step candidates (Ansor's CPU ones)
MAX_VECTOR = 64                      # the widest innermost loop that is vectorized
# A reduction of at least this many elements per output may be factored over a vector of
# partial results (a row sum vectorized along the row, or a global mean parallelized).
RFACTOR_MIN_REDUCTION = 8


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending.

    Example:
        >>> divisors(12)
        [1, 2, 3, 4, 6, 12]
    """
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


class Decisions:
    """The random choices of one program, by name; a choice not made yet is drawn from `rng`.

    Example:
        >>> d = Decisions(rng=0)
        >>> d.pick("unroll", [0, 16, 64]) in (0, 16, 64)
        True
        >>> d.values["unroll"] == d.pick("unroll", [0, 16, 64])
        True
    """

    def __init__(self, values=None, rng=None):
        self.values: dict = dict(values or {})
        self.rng = rng if isinstance(rng, random.Random) else random.Random(rng)

    def pick(self, name: str, options):
        """values[name] when it is one of `options`, else a random option (remembered)."""
        options = list(options)
        v = self.values.get(name)
        if v not in options:
            v = self.values[name] = options[self.rng.randrange(len(options))]
        return v

    def factors(self, name: str, extent: int, parts: int, innermost: int = MAX_VECTOR) -> tuple:
        """`parts` inner tile lengths (outer to inner) whose product divides `extent`; the
        innermost at most `innermost`."""
        v = self.values.get(name)
        if isinstance(v, (list, tuple)) and len(v) == parts and \
                all(isinstance(x, int) and x >= 1 for x in v) and \
                extent % math.prod(v) == 0 and v[-1] <= max(innermost, 1):
            return tuple(v)
        left, out = extent, []
        for k in range(parts):
            options = divisors(left)
            if k == 0:
                options = [d for d in options if d <= innermost] or [1]
            d = options[self.rng.randrange(len(options))]
            out.insert(0, d)
            left //= d
        self.values[name] = tuple(out)
        return tuple(out)


class Sketch:
    """A rule per stage: (stage position in the DAG, variant) pairs; printable.

    Example:
        >>> str(Sketch(((2, "fuse1"),), ["A", "B", "C"]))
        'C:fuse1'
    """

    __slots__ = ("choices", "names")

    def __init__(self, choices, names):
        self.choices = tuple(choices)
        self.names = tuple(names)

    def __str__(self):
        return " ".join(f"{self.names[k]}:{v}" for k, v in self.choices) or "(plain)"

    def __repr__(self):
        return f"Sketch({self})"

    def __eq__(self, other):
        return isinstance(other, Sketch) and other.choices == self.choices

    def __hash__(self):
        return hash(self.choices)


# ------------------------------------------------------------------------------ analysis
def _inlined_state(dag: ComputeDAG) -> State:
    state = State(dag.outputs)
    for st in list(state.schedule.stages):
        if _inlinable(dag, st):
            state.inline(st)
    return state


def _inlinable(dag, st) -> bool:
    """Injective, not an output, cheap or read by one stage only, and, where its values
    reach a stage with data reuse (which reads each of them many times), reading one element
    (a padding, a cast): a transform combining several is computed once instead (Winograd's
    input transform inlined into its GEMM would be recomputed for every output channel)."""
    op = st.origin_op        # (a cache_write rewires the readers' ops: the DAG has these)
    if not isinstance(op, ComputeOp) or op.reduce_axis or st.is_output or \
            st.attach_type == "inline" or op not in dag.ops:
        return False
    if len(dag.consumers(op)) > 1 and ComputeDAG.is_expensive(op):
        return False
    return ComputeDAG.loads(op) <= 1 or not _feeds_reuse(dag, op)


def _feeds_reuse(dag, op) -> bool:
    """Whether `op`'s values reach a stage with data reuse through injective stages."""
    return any(ComputeDAG.has_data_reuse(c) or
               (ComputeDAG.is_injective(c) and not dag.is_output(c) and _feeds_reuse(dag, c))
               for c in dag.consumers(op))


def _effective(state):
    eff = effective_bodies(state.schedule)
    return eff, effective_consumers(state.schedule, eff)


def _reads_at_own_axes(state, eff, consumer, producer) -> bool:
    from ..te.inline import accesses
    from ..tir.expr import Var
    if consumer.op.reduce_axis or not isinstance(producer.op, ComputeOp):
        return False
    if ComputeDAG.extents(consumer.op) != ComputeDAG.extents(producer.op):
        return False
    axes = [iv.var for iv in consumer.op.axis]
    reads = [ld for ld in accesses(eff[consumer])
             if state.schedule.stage_map[ld.producer.op] is producer]
    return bool(reads) and all(
        len(ld.indices) == len(axes) and all(isinstance(i, Var) and i is v
                                             for i, v in zip(ld.indices, axes))
        for ld in reads)


def _fusible_consumer(state, eff, consumers, st):
    """The one reader of `st` (inlining counted) into whose tiles it can be computed."""
    readers = consumers[st]
    if len(readers) != 1 or st.is_output:
        return None
    (c,) = readers
    if not c.is_output or ComputeDAG.has_data_reuse(c.op):
        return None
    return c if _reads_at_own_axes(state, eff, c, st) else None


def _wants_rfactor(op) -> bool:
    """A single reduction over at least a vector's worth of elements per output."""
    return op.num_outputs == 1 and math.prod(ComputeDAG.reduce_extents(op)) >= RFACTOR_MIN_REDUCTION


def generate_sketches(dag: ComputeDAG) -> list[Sketch]:
    """The sketches of a kernel: every combination of the rules that apply to its stages
    (at most MAX_SKETCHES).

    Example:
        >>> [str(s) for s in generate_sketches(ComputeDAG([C]))]   # doctest: +SKIP
        ['C:tile', 'C:cache1', 'C:cache2']
    """
    state = _inlined_state(dag)
    eff, consumers = _effective(state)
    per_stage = []
    # a reader takes the tiles of one producer only
    readers = [_fusible_consumer(state, eff, consumers, state.schedule[op])
               for op in dag.ops if isinstance(op, ComputeOp) and ComputeDAG.has_data_reuse(op)]
    for k, op in enumerate(dag.ops):
        st = state.schedule[op]
        if not isinstance(op, ComputeOp) or st.attach_type == "inline":
            continue
        if ComputeDAG.has_data_reuse(op):
            options = ["tile"]
            reader = _fusible_consumer(state, eff, consumers, st)
            if reader is not None and readers.count(reader) == 1:
                options += ["fuse1", "fuse2"]
            elif reader is None and st.is_output and op.num_outputs == 1:
                options += ["cache1", "cache2"]
            per_stage.append([(k, v) for v in options])
        elif op.reduce_axis and _wants_rfactor(op):
            per_stage.append([(k, "plain"), (k, "rfactor")])
    names = [op.name for op in dag.ops]
    sketches = [Sketch(combo, names) for combo in itertools.product(*per_stage)]
    return sketches[:MAX_SKETCHES]


# ------------------------------------------------------------------------------ annotation
class _Annotator:
    def __init__(self, dag: ComputeDAG, sketch: Sketch, decisions: Decisions):
        self.dag, self.sketch, self.d = dag, sketch, decisions
        self.state = State(dag.outputs)
        self.sched = self.state.schedule
        self.variant = {self.sched[dag.ops[k]]: v for k, v in sketch.choices}
        # stage -> (stage, loop) it will be computed at, decided before it is scheduled
        self.place: dict = {}
        self.fused_into: dict = {}     # consumer stage -> (tiled stage, level)
        self.attach_loops: dict = {}   # root stage -> its loops that may host a producer
        self.extent: dict = {}         # innermost tile loop -> its length
        self.attached: list = []       # stages without tiling computed inside a reader
        self.keep_loops: dict = {}     # stages whose data loops are not split for vectors

    def name(self, st) -> str:
        return str(self.dag.ops.index(st.origin_op)) if st.origin_op in self.dag.ops \
            else st.op.name

    def run(self) -> Program:
        s = self.state
        for st, v in list(self.variant.items()):
            if v.startswith("cache"):
                local = s.cache_write(st, "local")
                self.variant[local] = "fuse" + v[-1]
                self.variant[st] = None
        for st in list(self.sched.stages):
            if _inlinable(self.dag, st):
                s.inline(st)
        eff, consumers = _effective(s)
        self.consumers = consumers
        for st, v in self.variant.items():
            if v and v.startswith("fuse"):
                c = _fusible_consumer(s, eff, consumers, st)
                if c is None:
                    raise AssertionError(f"sketch {self.sketch}: {st.op.name} has no "
                                         f"fusible reader")
                self.fused_into[c] = (st, int(v[-1]))
        for st in reversed(list(self.sched.stages)):
            if not isinstance(st.op, ComputeOp) or st.attach_type == "inline":
                continue
            v = self.variant.get(st)
            if st in self.fused_into:
                self.tile_consumer(st, *self.fused_into[st])
            elif v == "tile":
                self.tile(st)
            elif v and v.startswith("fuse"):
                self.tile_fused(st, int(v[-1]))
            elif v == "rfactor":
                self.rfactor(st)
            else:
                self.simple(st)
        self.vectorize_attached()
        return s.program()

    # ---------------------------------------------------------------- helpers
    def parallel(self, st, loops, key):
        """Fuse a chosen number of the leading `loops` and run the fused loop in parallel;
        returns (the fused loop or None, how many were fused)."""
        loops = list(loops)
        if not loops:
            return None, 0
        n = self.d.pick(f"parallel:{key}", range(1, len(loops) + 1))
        fused = self.state.fuse(st, loops[:n]) if n > 1 else loops[0]
        self.state.annotate(st, fused, "parallel")
        return fused, n

    def unroll(self, st, loop, key):
        steps = self.d.pick(f"unroll:{key}", UNROLL_STEPS)
        if steps:
            self.state.pragma(st, loop, "auto_unroll_max_step", steps)

    def vectorize_last(self, st, loop, extent: int):
        if 2 <= extent <= MAX_VECTOR:
            self.state.annotate(st, loop, "vectorize")

    # ---------------------------------------------------------------- rules
    def _tile_axes(self, st, key, parts):
        """Split every data axis of extent > 1 into `parts` + 1 levels and every reduction
        axis into 2; returns (levels of data loops [level][axis], reduction levels)."""
        s = self.state
        op = st.op
        levels = [[] for _ in range(parts + 1)]
        for a, (iv, n) in enumerate(zip(op.axis, ComputeDAG.extents(op))):
            if n == 1:
                levels[0].append(iv)
                continue
            lengths = self.d.factors(f"tile:{key}:{a}", n, parts)
            loops = s.split(st, iv, lengths)
            for lv, loop in zip(levels, loops):
                lv.append(loop)
            self.extent[loops[-1]] = lengths[-1]
        rlevels = [[], []]
        for a, (iv, n) in enumerate(zip(op.reduce_axis, ComputeDAG.reduce_extents(op))):
            if n == 1:
                rlevels[0].append(iv)
                continue
            (r1,) = self.d.factors(f"rtile:{key}:{a}", n, 1, innermost=n)
            ro, ri = s.split(st, iv, [r1])
            rlevels[0].append(ro)
            rlevels[1].append(ri)
        return levels, rlevels

    def tile(self, st):
        """SSRSRS at the root, outer data loops parallel, innermost vectorized."""
        key = self.name(st)
        (s0, s1, s2, s3), (r0, r1) = self._tile_axes(st, key, 3)
        self.state.reorder(st, s0 + s1 + r0 + s2 + r1 + s3)
        fused, _ = self.parallel(st, s0 + s1, key)
        if fused is not None:
            self.unroll(st, fused, key)
        if s3:
            self.vectorize_last(st, s3[-1], self.extent.get(s3[-1], 1))

    def tile_consumer(self, c, producer, level):
        """The reader `c` tiled like `producer`'s first levels; `producer` is computed in
        its tile (tile_fused); outer loops parallel, innermost vectorized."""
        s = self.state
        key = self.name(producer)
        groups = [[] for _ in range(level + 2)]
        inner_last = 1
        for a, (iv, n) in enumerate(zip(c.op.axis, ComputeDAG.extents(c.op))):
            if n == 1:
                groups[0].append(iv)
                continue
            l1, l2, l3 = self.d.factors(f"tile:{key}:{a}", n, 3)
            lengths = [l1, l2 * l3] if level == 1 else [l1, l2, l3]
            for g, loop in zip(groups, s.split(c, iv, lengths)):
                g.append(loop)
            inner_last = lengths[-1] if a == len(c.op.axis) - 1 else inner_last
        order = [iv for g in groups for iv in g]
        s.reorder(c, order)
        attach_at = sum(len(g) for g in groups[:level + 1]) - 1
        outer = groups[0] + groups[1]
        fused, n = self.parallel(c, outer, key + ".c")
        if fused is not None:
            attach_at -= n - 1
        self.place[producer] = (c, c.leaf_iter_vars[attach_at])
        if groups[-1] and groups[-1][-1] is c.leaf_iter_vars[-1]:
            self.vectorize_last(c, c.leaf_iter_vars[-1], inner_last)

    def tile_fused(self, st, level):
        """The tiled stage inside its reader's tile: R0 S2 R1 S3 (level 1) or R0 R1 S3."""
        s = self.state
        parent, loop = self.place[st]
        key = self.name(st)
        op = st.op
        s.compute_at(st, parent, loop)
        s2, s3 = [], []
        for a, (iv, n) in enumerate(zip(op.axis, ComputeDAG.extents(op))):
            if n == 1:
                s3.append(iv)
                continue
            l1, l2, l3 = self.d.factors(f"tile:{key}:{a}", n, 3)
            if level == 1:
                _, p2, p3 = s.split(st, iv, [l2, l3])
                s2.append(p2)
                s3.append(p3)
            else:
                s3.append(iv)
        r0, r1 = [], []
        for a, (iv, n) in enumerate(zip(op.reduce_axis, ComputeDAG.reduce_extents(op))):
            if n == 1:
                r0.append(iv)
                continue
            (f,) = self.d.factors(f"rtile:{key}:{a}", n, 1, innermost=n)
            ro, ri = s.split(st, iv, [f])
            r0.append(ro)
            r1.append(ri)
        rest = [iv for iv in st.leaf_iter_vars if iv not in s2 + s3 + r0 + r1]
        s.reorder(st, rest + r0 + s2 + r1 + s3)
        self.unroll(st, st.leaf_iter_vars[0], key)
        n_last = ComputeDAG.extents(op)[-1]
        if n_last > 1:      # the innermost loop is the last axis' S3 part
            l3 = self.d.factors(f"tile:{key}:{len(op.axis) - 1}", n_last, 3)[-1]
            self.vectorize_last(st, st.leaf_iter_vars[-1], l3)

    def simple(self, st):
        """A stage without tiling: inside one of its readers' loops (vectorized once bounds
        are known, vectorize_attached), or at the root with its outer data loops fused in
        parallel and its innermost data axis split for vectors (under the reduction loops,
        for a reduction)."""
        if not self.place_in_reader(st):
            self.at_root(st)

    def place_in_reader(self, st) -> bool:
        """Compute `st` inside a reader's loop when the decision says so; whether it did."""
        if st.is_output:
            return False
        hosts = self._hosts(st)
        where = self.d.pick(f"at:{self.name(st)}", range(len(hosts) + 1))
        if not where:
            return False
        self.state.compute_at(st, *hosts[where - 1])
        self.attached.append(st)
        return True

    def at_root(self, st):
        s = self.state
        key = self.name(st)
        op = st.op
        data = [iv for iv in st.leaf_iter_vars if iv in op.axis]
        red = [iv for iv in st.leaf_iter_vars if iv not in op.axis]
        n_last = ComputeDAG.extents(op)[-1] if data else 1
        v = self.d.pick(f"vector:{key}", [d for d in divisors(n_last) if d <= MAX_VECTOR]) \
            if data and not self.keep_loops.get(st) else 1
        if v > 1:
            outer, inner = s.split(st, data[-1], [v])
            data = data[:-1] + [outer]
            if red:
                s.reorder(st, data + red + [inner])
            s.annotate(st, inner, "vectorize")
        self.parallel(st, data, key)
        self.attach_loops[st] = [iv for iv in st.leaf_iter_vars if iv not in red and
                                 st.iter_var_attrs.get(iv, {}).get("kind") != "vectorized"]

    def vectorize_attached(self):
        """The innermost data axis of each stage computed inside a reader, split for vectors
        where bound inference gives it a constant extent (the region the reader needs)."""
        if not self.attached:
            return
        from ..te.bound import infer_bound
        from ..tir.expr import IntImm
        s = self.state
        eff, consumers = _effective(s)
        ranges = infer_bound(self.sched, eff, consumers)
        for st in self.attached:
            op = st.op
            # a final reduction of partial sums keeps its loops: one of them hosts them
            if self.keep_loops.get(st) or any(o.attach_stage is st for o in self.sched.stages):
                continue
            last = op.axis[-1] if op.axis else None
            extent = ranges[last].extent if last is not None else None
            if last not in st.leaf_iter_vars or not isinstance(extent, IntImm) or \
                    extent.value < 2:
                continue
            key = self.name(st)
            v = self.d.pick(f"vector:{key}",
                            [d for d in divisors(extent.value) if d <= MAX_VECTOR])
            if v < 2:
                continue
            if op.reduce_axis:
                s.reorder(st, [iv for iv in st.leaf_iter_vars if iv is not last] + [last])
            inner = s.split(st, last, [v])[-1] if v < extent.value else last
            s.annotate(st, inner, "vectorize")

    def _root_of(self, st):
        """(root stage, loop of it or None) where `st` is computed, through compute_at chains."""
        if st in self.place:
            return self._root_of_loop(*self.place[st])
        if st.attach_type == "scope":
            return self._root_of_loop(st.attach_stage, st.attach_ivar)
        return st, None

    def _root_of_loop(self, parent, loop):
        root, outer = self._root_of(parent)
        return (parent, loop) if root is parent else (root, outer)

    def _hosts(self, st):
        """(root stage, loop) pairs where `st` may be computed: loops of one root stage that
        every reader of `st` is, or is computed at or inside."""
        roots = set()
        depth = None
        for r in self.consumers[st]:
            root, loop = self._root_of(r)
            roots.add(root)
            if loop is not None:
                k = root.leaf_iter_vars.index(loop)
                depth = k if depth is None else min(depth, k)
        if len(roots) != 1:
            return []
        (root,) = roots
        if root.attach_type != "root" or root not in self.attach_loops:
            return []
        return [(root, iv) for iv in self.attach_loops[root]
                if depth is None or root.leaf_iter_vars.index(iv) <= depth]

    def rfactor(self, st):
        """Partial reductions over a vectorized inner part of the (fused) reduction: the
        partial-sum stage is computed per output row (inside the final reduction's last data
        loop) or at the root; the final reduction is placed like any simple stage."""
        s = self.state
        key = self.name(st)
        red = [iv for iv in st.leaf_iter_vars if iv not in st.op.axis]
        total = math.prod(ComputeDAG.reduce_extents(st.op))
        k = s.fuse(st, red) if len(red) > 1 else red[0]
        # divisors where there are some, else powers of two (the split's tail is guarded)
        options = [d for d in divisors(total) if 2 <= d <= MAX_VECTOR] or \
            [d for d in (2, 4, 8, 16, 32, 64) if d < total]
        f = self.d.pick(f"rfactor:{key}", options)
        ko, ki = s.split(st, k, [f])
        rf = s.rfactor(st, ki, 0)
        _, self.consumers = _effective(s)
        v = rf.leaf_iter_vars[0]
        data = [iv for iv in rf.leaf_iter_vars if iv is not v and iv in rf.op.axis]
        rest = [iv for iv in rf.leaf_iter_vars if iv is not v and iv not in data]
        s.reorder(rf, data + rest + [v])
        if f > 1:
            s.annotate(rf, v, "vectorize")
        # the final reduction sums f partial results: its loops stay as they are
        self.keep_loops[st] = True
        self.simple(st)
        st_data = [iv for iv in st.leaf_iter_vars if iv in st.op.axis or
                   st.iter_var_attrs.get(iv, {}).get("kind") == "parallel"]
        if st_data and self.d.pick(f"rf_at:{key}", (0, 1)):
            self.place[rf] = (st, st_data[-1])
            s.compute_at(rf, st, st_data[-1])
        else:
            self.parallel(rf, data, key + ".rf")


def annotate(dag: ComputeDAG, sketch: Sketch, decisions: Decisions) -> Program:
    """A complete program of `sketch`: its rules applied with `decisions` (the choices they
    lack are drawn at random and added to `decisions`).

    Example:
        >>> d = Decisions(rng=1)
        >>> p = annotate(dag, generate_sketches(dag)[0], d)   # doctest: +SKIP
        >>> annotate(dag, generate_sketches(dag)[0], d) == p  # the same decisions, the same program  # doctest: +SKIP
        True
    """
    return _Annotator(dag, sketch, decisions).run()

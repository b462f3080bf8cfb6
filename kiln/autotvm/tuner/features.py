"""Features of a config for the cost model (TVM paper §5.2).

"itervar" features come from the lowered loop program: the template is instantiated with the
config and lowered without running the loop passes (so loop kinds and pragmas survive; the
vectorize and unroll passes would erase them); loops of one iteration are not counted. The loop nests that do the most work are described loop level
by loop level, innermost first:

- per loop: log2 extent, nesting depth, log2 of the iterations of the loops around it and of the
  loops inside it, a one-hot of its kind (serial / parallel / vectorized / unrolled /
  thread_binding), log2 of an auto_unroll_max_step pragma, the iterations ahead that a
  prefetch annotation (Stage.prefetch) fetches for;
- per buffer at that loop (buffers in a fixed order: parameters, then allocations): accesses
  during one run of the loop, bytes touched, reuse ratio (accesses / distinct elements), the
  stride of the access in this loop's variable, and whether it is read / written.

Nests are padded or truncated to MAX_NESTS x MAX_LOOPS x MAX_BUFFERS, so every program of every
task gives a vector of the same length (ITERVAR_LENGTH): that is what lets records of other tasks
train the model (transfer learning).

"knob" features are the config's knob values as numbers (log2 split factors, reorder
permutations, annotation codes, knob values): cheap, but only comparable inside one space.

Example:
    >>> import kiln.autotvm.testing
    >>> from kiln.autotvm.task import Task
    >>> task = Task("test.matmul", (32, 32, 32, "float32"))
    >>> itervar_features(task, task.config_space.get(5)).shape == (ITERVAR_LENGTH,)
    True
"""
from __future__ import annotations

import math

import numpy as np

from ...arith.linear import detect_linear
from ...tir import dtype as dt
from ...tir.expr import BufferLoad, IntImm, Ramp
from ...tir.functor import post_order_visit, uses_var
from ...tir.stmt import Allocate, BufferStore, For, Stmt
from ...tir.transform.inject_prefetch import PREFETCH_KEY

__all__ = ["itervar_features", "knob_features", "program_features", "feature_length", "ITERVAR_LENGTH",
           "MAX_NESTS", "MAX_LOOPS", "MAX_BUFFERS", "FeatureError"]

MAX_NESTS = 2
MAX_LOOPS = 6
MAX_BUFFERS = 4
_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")
_LOOP_WIDTH = 6 + len(_KINDS)
_BUFFER_WIDTH = 6
_PER_LOOP = _LOOP_WIDTH + MAX_BUFFERS * _BUFFER_WIDTH
_GLOBAL_WIDTH = 5
ITERVAR_LENGTH = _GLOBAL_WIDTH + MAX_NESTS * MAX_LOOPS * _PER_LOOP


class FeatureError(ValueError):
    """A config whose program cannot be built or lowered (the template rejects it)."""


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def _extent(loop: For) -> int:
    # Symbolic extents (templates with variable shapes) count as one iteration.
    return int(loop.extent.value) if isinstance(loop.extent, IntImm) else 1


class _Access:
    __slots__ = ("buffer", "index", "lanes", "write", "chain")

    def __init__(self, buffer, index, write, chain):
        self.buffer, self.index, self.write, self.chain = buffer, index, write, chain
        self.lanes = index.lanes if isinstance(index, Ramp) else 1


class _Program:
    """One walk over a loop program: its accesses, leaf statements and loop chains."""

    def __init__(self, func):
        self.accesses: list[_Access] = []
        self.leaves: list[tuple] = []          # (dynamic count, loop chain) per store
        self.buffers: list = [p for p in func.params if hasattr(p, "data")]
        self.loops = 0
        self.alloc_bytes = 0
        self._walk(func.body, ())

    def _note_buffer(self, buf):
        if buf not in self.buffers:
            self.buffers.append(buf)

    def _walk(self, stmt, chain):
        if isinstance(stmt, For):
            # A loop of one iteration (a split by 1) is not a loop level; simplify would drop it.
            if isinstance(stmt.extent, IntImm) and stmt.extent.value == 1:
                self._walk(stmt.body, chain)
                return
            self.loops += 1
            self._walk(stmt.body, chain + (stmt,))
            return
        if isinstance(stmt, BufferStore):
            self._note_buffer(stmt.buffer)
            self.accesses.append(_Access(stmt.buffer, stmt.index, True, chain))
            self._loads(stmt.value, chain)
            self._loads(stmt.index, chain)
            self.leaves.append((math.prod(_extent(f) for f in chain), chain))
            return
        if isinstance(stmt, Allocate):
            self._note_buffer(stmt.buffer)
            if isinstance(stmt.extent, IntImm):
                self.alloc_bytes += int(stmt.extent.value) * dt.bytes_of(dt.element_of(stmt.buffer.dtype))
        for name in stmt._fields:
            value = getattr(stmt, name)
            if isinstance(value, Stmt):
                self._walk(value, chain)
            elif isinstance(value, tuple):
                for v in value:
                    if isinstance(v, Stmt):
                        self._walk(v, chain)
            elif value is not None and hasattr(value, "dtype") and not isinstance(stmt, Allocate):
                self._loads(value, chain)

    def _loads(self, expr, chain):
        def visit(n):
            if isinstance(n, BufferLoad):
                self._note_buffer(n.buffer)
                self.accesses.append(_Access(n.buffer, n.index, False, chain))
        post_order_visit(expr, visit)


def _coefficients(index, loops) -> list[int]:
    """|coefficient| of each loop variable in an index; 1 for a variable used non-linearly."""
    base = index.base if isinstance(index, Ramp) else index
    variables = [f.loop_var for f in loops]
    try:
        coefs = detect_linear(base, variables)
    except Exception:  # an index the linear detector does not model: fall back per variable
        coefs = None
    out = []
    for k, v in enumerate(variables):
        c = coefs[k] if coefs is not None else None
        if isinstance(c, IntImm):
            out.append(abs(int(c.value)))
        else:
            out.append(1 if uses_var(base, {v}) else 0)
    return out


def _loop_table(program: _Program) -> dict:
    """{(loop, buffer): [count, touched elements, max stride, read, written]} over the program."""
    table: dict = {}
    for acc in program.accesses:
        chain = acc.chain
        if not chain:
            continue
        coefs = _coefficients(acc.index, chain)
        extents = [_extent(f) for f in chain]
        for p, loop in enumerate(chain):
            inner = range(p, len(chain))
            count = math.prod(extents[q] for q in inner) * acc.lanes
            # Distinct elements: the loops that move the index, bounded by the span they cover.
            points = math.prod(extents[q] for q in inner if coefs[q])
            span = 1 + sum(coefs[q] * (extents[q] - 1) for q in inner)
            touched = max(1, min(points, span)) * acc.lanes
            row = table.setdefault((loop, acc.buffer), [0, 0, 0, 0, 0])
            row[0] += count
            row[1] = max(row[1], touched)
            row[2] = max(row[2], coefs[p])
            row[3] |= not acc.write
            row[4] |= acc.write
    return table


def _loop_features(loop: For, depth: int, outer: int, inner: int) -> list[float]:
    pragma = ahead = 0
    for key, value in loop.annotations:
        if key.endswith("auto_unroll_max_step"):
            pragma = int(value.value if hasattr(value, "value") else value)
        elif key == PREFETCH_KEY:
            ahead = max(distance for _, distance in value)
    kind = [1.0 if loop.kind == k else 0.0 for k in _KINDS]
    return [_log(_extent(loop)), float(depth), _log(outer), _log(inner), _log(pragma),
            float(ahead)] + kind


def program_features(func) -> np.ndarray:
    """Itervar features of a lowered PrimFunc (see the module docstring).

    Example:
        >>> program_features(kiln.lower(s, [A, B, C])).shape  # doctest: +SKIP
        (425,)
    """
    program = _Program(func)
    table = _loop_table(program)
    buffers = program.buffers[:MAX_BUFFERS]
    out = np.zeros(ITERVAR_LENGTH, dtype=np.float32)
    total = sum(math.prod(_extent(f) for f in a.chain) * a.lanes for a in program.accesses)
    out[:_GLOBAL_WIDTH] = [_log(total), float(program.loops), float(len(program.leaves)),
                           float(len(program.buffers)), _log(program.alloc_bytes)]
    # The nests that run the most statements, each once (an init and an update nest differ).
    nests, seen = [], set()
    for _, chain in sorted(program.leaves, key=lambda leaf: -leaf[0]):
        if chain and chain not in seen:
            seen.add(chain)
            nests.append(chain)
    for n, chain in enumerate(nests[:MAX_NESTS]):
        extents = [_extent(f) for f in chain]
        for slot, p in enumerate(range(len(chain) - 1, max(-1, len(chain) - 1 - MAX_LOOPS), -1)):
            loop = chain[p]
            row = _loop_features(loop, p, math.prod(extents[:p + 1]), math.prod(extents[p + 1:]))
            for buf in buffers:
                stats = table.get((loop, buf))
                if stats is None:
                    row += [0.0] * _BUFFER_WIDTH
                    continue
                count, touched, stride, read, written = stats
                nbytes = touched * dt.bytes_of(dt.element_of(buf.dtype))
                row += [_log(count), _log(nbytes), _log(count / touched), _log(stride),
                        float(read), float(written)]
            row += [0.0] * (_BUFFER_WIDTH * (MAX_BUFFERS - len(buffers)))
            start = _GLOBAL_WIDTH + (n * MAX_LOOPS + slot) * _PER_LOOP
            out[start:start + _PER_LOOP] = row
    return out


def _as_scheduled():
    from ...driver.pipeline import LoopPass
    # The program as the schedule wrote it: the passes would unroll, vectorize and partition
    # loops away, erasing the annotations the features describe (and cost ~1 ms per config).
    return [LoopPass("as_scheduled", lambda func: func)]


def itervar_features(task, config) -> np.ndarray:
    """Itervar features of `config` (a ConfigEntity, JSON dict or index) of `task`.

    Raises FeatureError when the template cannot build or lower that config.

    Example:
        >>> itervar_features(task, 17).shape == (ITERVAR_LENGTH,)  # doctest: +SKIP
        True
    """
    from ...driver.lower import lower
    try:
        s, args = task.instantiate(config)
        func = lower(s, args, pipeline=_as_scheduled())
    except Exception as e:  # a template may reject a config in any way; the model scores it 0
        raise FeatureError(f"task {task.key}: config {config!r} does not lower: {e}") from e
    return program_features(func)


_ANNOTATION_CODES = {"none": 0.0, "unroll": 1.0, "vec": 2.0}


def knob_features(config) -> np.ndarray:
    """The knob values of a ConfigEntity as numbers (log2 of split factors, a reorder's
    permutation, annotation codes none=0 / unroll=1 / vec=2, a knob's value or its index).

    Example:
        >>> knob_features(space.get(5))  # doctest: +SKIP
        array([0., 5., 0.], dtype=float32)
    """
    out = []
    for (name, knob), digit in zip(config.space.knobs.items(), config.space.point(config.index)):
        value = config[name]
        if knob.kind == "split":
            out += [_log(f) for f in value.size[1:]]
        elif knob.kind == "reorder":
            out += [float(p) for p in value.perm]
        elif knob.kind == "annotate":
            out += [_ANNOTATION_CODES.get(a, 3.0) for a in value.anns]
        elif isinstance(value.val, (int, float)) and not isinstance(value.val, bool):
            out.append(float(value.val))
        else:
            out.append(float(digit))
    return np.asarray(out, dtype=np.float32)


def feature_length(task, feature_type: str) -> int:
    """Length of the feature vectors of `task` for a feature type ("itervar" or "knob").

    Example:
        >>> feature_length(task, "itervar") == ITERVAR_LENGTH  # doctest: +SKIP
        True
    """
    if feature_type == "itervar":
        return ITERVAR_LENGTH
    if feature_type == "knob":
        return len(knob_features(task.config_space.get(0)))
    raise ValueError(f"unknown feature type {feature_type!r}; use 'itervar' or 'knob'")

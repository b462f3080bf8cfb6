"""Programs of the auto-scheduler: a schedule as a list of transform steps, and its replay.

A Program is what a tuning record keeps and what kiln.compile replays: a sequence of schedule
primitives, each naming its stage by position in the schedule's stage list and its loops by
position among the stage's current loops, at the moment the step runs. Steps are JSON lists:

    ["inline", s]                     s[stage].compute_inline()
    ["cache_write", s, scope]         s.cache_write(stage output, scope)
    ["split", s, i, [l1, .., ln]]     loop i split into n + 1 loops, the inner ones of
                                      extents l1..ln (outer to inner), the outermost the rest
    ["reorder", s, [p0, .., pm]]      the stage's loops put in this order (a permutation)
    ["fuse", s, i, n]                 loops i .. i+n-1 fused into one
    ["annotate", s, i, kind]          kind: parallel | vectorize | unroll
    ["pragma", s, i, name, value]     e.g. auto_unroll_max_step, 64
    ["compute_at", s, t, i]           stage s computed inside loop i of stage t
    ["rfactor", s, i, factor_axis]    the reduction loop i factored into a new stage
    ["bind", s, i, tag]               loop i bound to a GPU index (blockIdx.x, vthread, ...)
    ["cache_read", s, scope, [r..]]   stage s's output copied into `scope` for readers r..
    ["set_scope", s, scope]           stage s's buffer placed in `scope` (local, shared)

Replaying never consults the rules that produced a program, so a record stays valid when the
rules change; a step that no longer fits its kernel is an error naming the step.

Example:
    >>> from kiln import te
    >>> A = te.placeholder((64, 64), name="A")
    >>> B = te.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
    >>> state = State([B])
    >>> st = state.stage(B.op)
    >>> outer, inner = state.split(st, st.leaf_iter_vars[1], [16])
    >>> state.annotate(st, inner, "vectorize")
    >>> state.steps
    [['split', 1, 1, [16]], ['annotate', 1, 2, 'vectorize']]
    >>> print(state.program())
    split B j [16]
    annotate B j.inner vectorize
"""
from __future__ import annotations

import hashlib
import json

from ..te.schedule import ScheduleError, create_schedule
from ..te.tensor import Tensor

__all__ = ["State", "Program", "ProgramError", "replay"]

ANNOTATIONS = ("parallel", "vectorize", "unroll")


class ProgramError(ValueError):
    """A program that does not fit its kernel (a bad step, or a stage or loop it lacks)."""


class Program:
    """An immutable list of steps, printable, with a content digest.

    Example:
        >>> Program([["inline", 1]]).to_json()
        [['inline', 1]]
    """

    __slots__ = ("steps", "_names")

    def __init__(self, steps, names=None):
        object.__setattr__(self, "steps", tuple(_frozen(s) for s in steps))
        object.__setattr__(self, "_names", names)

    def __setattr__(self, *_):
        raise AttributeError("a Program is immutable")

    def to_json(self) -> list:
        return [_thawed(s) for s in self.steps]

    @property
    def digest(self) -> int:
        """A 48-bit number identifying the steps (the record's config index)."""
        text = json.dumps(self.to_json(), separators=(",", ":"))
        return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)

    def __len__(self):
        return len(self.steps)

    def __eq__(self, other):
        return isinstance(other, Program) and other.steps == self.steps

    def __hash__(self):
        return hash(self.steps)

    def __str__(self):
        if self._names is None:
            return "\n".join(json.dumps(s) for s in self.to_json())
        return "\n".join(self._names)

    def __repr__(self):
        return f"Program({len(self.steps)} steps)"


def _frozen(step):
    return tuple(_frozen(x) for x in step) if isinstance(step, (list, tuple)) else step


def _thawed(step):
    return [_thawed(x) for x in step] if isinstance(step, tuple) else step


def _iv_name(iv) -> str:
    return iv.var.name


class State:
    """A schedule under construction that records each primitive as a step.

    Built from a kernel's output tensors; its methods apply one primitive to the live schedule
    and append the step, so rules can look at the loops they create.

    Example:
        >>> state = State([B]); state.inline(state.stage(A_plus_1.op))   # doctest: +SKIP
    """

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.schedule = create_schedule([t.op for t in self.outputs])
        self.steps: list = []
        self.names: list[str] = []

    # ---------------------------------------------------------------- addressing
    def stage(self, op_or_tensor):
        return self.schedule[op_or_tensor]

    def _s(self, stage) -> int:
        return self.schedule.stages.index(stage)

    @staticmethod
    def _i(stage, iv) -> int:
        try:
            return stage.leaf_iter_vars.index(iv)
        except ValueError:
            raise ProgramError(f"loop {iv.var.name} is not a current loop of stage "
                               f"{stage.op.name}") from None

    def _record(self, step: list, text: str) -> None:
        self.steps.append(step)
        self.names.append(text)

    def program(self) -> Program:
        return Program(self.steps, list(self.names))

    # ---------------------------------------------------------------- primitives
    def inline(self, stage) -> None:
        s = self._s(stage)
        stage.compute_inline()
        self._record(["inline", s], f"inline {stage.op.name}")

    def cache_write(self, stage, scope: str = "local"):
        """The new stage computing `stage`'s values (stage becomes their copy)."""
        s = self._s(stage)
        name = stage.op.name
        out = self.schedule.cache_write(stage.op.output(0), scope)
        self._record(["cache_write", s, scope], f"cache_write {name} {scope}")
        return self.schedule[out if isinstance(out, Tensor) else out[0]]

    def split(self, stage, iv, lengths) -> list:
        """Split loop `iv` into len(lengths) + 1 loops, the inner ones of the given extents."""
        s, i = self._s(stage), self._i(stage, iv)
        lengths = [int(n) for n in lengths]
        if not lengths or any(n < 1 for n in lengths):
            raise ProgramError(f"split of {iv.var.name} on {stage.op.name}: lengths must be "
                               f"positive, got {lengths}")
        loops, rest = [], iv
        for n in reversed(lengths):
            rest, inner = stage.split(rest, factor=n)
            loops.insert(0, inner)
        self._record(["split", s, i, lengths], f"split {stage.op.name} {iv.var.name} {lengths}")
        return [rest] + loops

    def reorder(self, stage, order) -> None:
        s = self._s(stage)
        perm = [self._i(stage, iv) for iv in order]
        if sorted(perm) != list(range(len(stage.leaf_iter_vars))):
            raise ProgramError(f"reorder of {stage.op.name} must list every loop once")
        stage.reorder(*order)
        self._record(["reorder", s, perm],
                     f"reorder {stage.op.name} {' '.join(_iv_name(v) for v in order)}")

    def fuse(self, stage, loops):
        loops = list(loops)
        s, i = self._s(stage), self._i(stage, loops[0])
        fused = stage.fuse(*loops)
        self._record(["fuse", s, i, len(loops)],
                     f"fuse {stage.op.name} {' '.join(_iv_name(v) for v in loops)}")
        return fused

    def annotate(self, stage, iv, kind: str) -> None:
        if kind not in ANNOTATIONS:
            raise ProgramError(f"annotation {kind!r} is not one of {ANNOTATIONS}")
        s, i = self._s(stage), self._i(stage, iv)
        getattr(stage, kind)(iv)
        self._record(["annotate", s, i, kind], f"annotate {stage.op.name} {iv.var.name} {kind}")

    def pragma(self, stage, iv, name: str, value) -> None:
        s, i = self._s(stage), self._i(stage, iv)
        stage.pragma(iv, name, value)
        self._record(["pragma", s, i, name, value],
                     f"pragma {stage.op.name} {iv.var.name} {name}={value}")

    def compute_at(self, stage, parent, iv) -> None:
        s, t, i = self._s(stage), self._s(parent), self._i(parent, iv)
        stage.compute_at(parent, iv)
        self._record(["compute_at", s, t, i],
                     f"compute_at {stage.op.name} {parent.op.name} {iv.var.name}")

    def rfactor(self, stage, iv, factor_axis: int = 0):
        """The new stage holding the partial reductions over loop `iv`."""
        s, i = self._s(stage), self._i(stage, iv)
        name = stage.op.name
        out = self.schedule.rfactor(stage.op.output(0), iv, factor_axis)
        self._record(["rfactor", s, i, factor_axis], f"rfactor {name} {iv.var.name}")
        return self.schedule[out if isinstance(out, Tensor) else out[0]]

    def bind(self, stage, iv, tag: str) -> None:
        from ..te.operation import thread_axis
        s, i = self._s(stage), self._i(stage, iv)
        stage.bind(iv, thread_axis(tag=tag))
        self._record(["bind", s, i, tag], f"bind {stage.op.name} {iv.var.name} {tag}")

    def cache_read(self, tensor, scope: str, readers):
        """The new stage holding a copy of `tensor` in `scope`, read by `readers` instead."""
        producer = self.schedule[tensor]
        s = self._s(producer)
        rs = [self._s(r) for r in readers]
        out = self.schedule.cache_read(self.schedule.current(tensor), scope, list(readers))
        self._record(["cache_read", s, scope, rs],
                     f"cache_read {producer.op.name} {scope} "
                     f"{' '.join(r.op.name for r in readers)}")
        return self.schedule[out]

    def set_scope(self, stage, scope: str) -> None:
        s = self._s(stage)
        stage.set_scope(scope)
        self._record(["set_scope", s, scope], f"set_scope {stage.op.name} {scope}")

    # ---------------------------------------------------------------- replay
    def apply(self, step) -> None:
        """Apply one JSON step (see the module docstring)."""
        if not isinstance(step, (list, tuple)) or not step or not isinstance(step[0], str):
            raise ProgramError(f"a step is a list starting with its kind, got {step!r}")
        kind, args = step[0], list(step[1:])
        stages = self.schedule.stages

        def stage_at(k):
            if not isinstance(k, int) or not 0 <= k < len(stages):
                raise ProgramError(f"step {step!r}: no stage {k!r} (the schedule has "
                                   f"{len(stages)})")
            return stages[k]

        def loop_at(st, k):
            if not isinstance(k, int) or not 0 <= k < len(st.leaf_iter_vars):
                raise ProgramError(f"step {step!r}: stage {st.op.name} has no loop {k!r} "
                                   f"(it has {len(st.leaf_iter_vars)})")
            return st.leaf_iter_vars[k]

        shapes = {"inline": 1, "cache_write": 2, "split": 3, "reorder": 2, "fuse": 3,
                  "annotate": 3, "pragma": 4, "compute_at": 3, "rfactor": 3, "bind": 3,
                  "cache_read": 3, "set_scope": 2}
        if kind not in shapes:
            raise ProgramError(f"unknown step kind {kind!r} in {step!r}")
        if len(args) != shapes[kind]:
            raise ProgramError(f"step {step!r}: {kind} takes {shapes[kind]} arguments")
        st = stage_at(args[0])
        if kind == "inline":
            self.inline(st)
        elif kind == "cache_write":
            self.cache_write(st, args[1])
        elif kind == "split":
            if not isinstance(args[2], (list, tuple)):
                raise ProgramError(f"step {step!r}: split lengths must be a list")
            self.split(st, loop_at(st, args[1]), args[2])
        elif kind == "reorder":
            perm = args[1]
            if not isinstance(perm, (list, tuple)) or sorted(perm) != \
                    list(range(len(st.leaf_iter_vars))):
                raise ProgramError(f"step {step!r}: not a permutation of the "
                                   f"{len(st.leaf_iter_vars)} loops of {st.op.name}")
            self.reorder(st, [st.leaf_iter_vars[k] for k in perm])
        elif kind == "fuse":
            first, n = args[1], args[2]
            if not isinstance(n, int) or n < 1:
                raise ProgramError(f"step {step!r}: fuse needs a positive count")
            self.fuse(st, [loop_at(st, first + k) for k in range(n)])
        elif kind == "annotate":
            self.annotate(st, loop_at(st, args[1]), args[2])
        elif kind == "pragma":
            self.pragma(st, loop_at(st, args[1]), args[2], args[3])
        elif kind == "compute_at":
            parent = stage_at(args[1])
            self.compute_at(st, parent, loop_at(parent, args[2]))
        elif kind == "rfactor":
            self.rfactor(st, loop_at(st, args[1]), args[2])
        elif kind == "bind":
            self.bind(st, loop_at(st, args[1]), args[2])
        elif kind == "cache_read":
            if not isinstance(args[2], (list, tuple)) or not args[2]:
                raise ProgramError(f"step {step!r}: cache_read names its readers in a list")
            self.cache_read(st.op.output(0), args[1], [stage_at(r) for r in args[2]])
        else:
            self.set_scope(st, args[1])


def replay(outputs, program) -> State:
    """A fresh schedule of `outputs` with `program` (a Program or its JSON) applied.

    Example:
        >>> state = replay([B], [["split", 1, 1, [16]]])   # doctest: +SKIP
        >>> state.schedule[B].leaf_iter_vars               # doctest: +SKIP
    """
    steps = program.to_json() if isinstance(program, Program) else program
    if not isinstance(steps, (list, tuple)):
        raise ProgramError(f"a program is a list of steps, got {type(steps).__name__}")
    state = State(outputs)
    for step in steps:
        try:
            state.apply(step)
        except ProgramError:
            raise
        except (ScheduleError, ValueError, TypeError, IndexError, KeyError,
                AttributeError) as e:      # a malformed step of a damaged or foreign log
            raise ProgramError(f"step {step!r} does not apply: {e}") from e
    return state

"""Statements of the loop IR."""
from __future__ import annotations

from .node import Node


class Stmt(Node):
    __slots__ = ()


class LetStmt(Stmt):
    __slots__ = ("var", "value", "body")
    _fields = ("var", "value", "body")


class AttrStmt(Stmt):
    """An annotation on `body`: key "pragma_<name>", "storage_alignment", "thread_extent", ..."""

    __slots__ = ("node", "key", "value", "body")
    _fields = ("node", "key", "value", "body")


class AssertStmt(Stmt):
    __slots__ = ("condition", "message", "body")
    _fields = ("condition", "message", "body")


class BufferStore(Stmt):
    """buffer[index] = value; a Ramp index with a vector value stores a vector."""

    __slots__ = ("buffer", "value", "index")
    _fields = ("buffer", "value", "index")


class Allocate(Stmt):
    """Memory for `buffer` (flat, `extent` elements) live during `body`."""

    __slots__ = ("buffer", "extent", "body")
    _fields = ("buffer", "extent", "body")


LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")


class For(Stmt):
    """for loop_var in [min, min + extent): body. `kind` is one of LOOP_KINDS.

    `annotations` is a tuple of (key, value) pairs, e.g. (("pragma_auto_unroll_max_step", 16),).
    """

    __slots__ = ("loop_var", "min", "extent", "kind", "body", "thread_tag", "annotations")
    _fields = ("loop_var", "min", "extent", "kind", "body", "thread_tag", "annotations")

    def __new__(cls, loop_var, min, extent, kind, body, thread_tag="", annotations=()):
        args = (loop_var, min, extent, kind, body, thread_tag, tuple(annotations))
        return cls._intern((cls, *args), args)


class SeqStmt(Stmt):
    __slots__ = ("seq",)
    _fields = ("seq",)

    @staticmethod
    def flatten(*stmts) -> Stmt:
        """Sequence of statements, with nested sequences and no-ops flattened."""
        out = []
        for s in stmts:
            if s is None:
                continue
            if isinstance(s, (list, tuple)):
                s = SeqStmt.flatten(*s)
            if isinstance(s, SeqStmt):
                out.extend(s.seq)
            elif not is_no_op(s):
                out.append(s)
        if not out:
            return Evaluate(_zero())
        return out[0] if len(out) == 1 else SeqStmt(tuple(out))


class IfThenElse(Stmt):
    __slots__ = ("condition", "then_case", "else_case")
    _fields = ("condition", "then_case", "else_case")

    def __new__(cls, condition, then_case, else_case=None):
        return cls._intern((cls, condition, then_case, else_case), (condition, then_case, else_case))


class ThreadAllReduce(Stmt):
    """A reduction across the threads of a block: every thread contributes `values` (one per
    result of the commutative `combiner`), and in `body` every thread sees the combination
    over all threads that share its other thread indices, bound to the variables `results`.
    `threads` are the thread indices reduced over (after bind_threads, the kernel's own).
    kiln.tir.transform.thread_allreduce lowers it to shared memory and barriers.
    """

    __slots__ = ("combiner", "values", "threads", "results", "body")
    _fields = ("combiner", "values", "threads", "results", "body")


class Evaluate(Stmt):
    __slots__ = ("value",)
    _fields = ("value",)


def _zero():
    from .expr import IntImm
    return IntImm("int32", 0)


def no_op() -> Stmt:
    return Evaluate(_zero())


def is_no_op(s) -> bool:
    from .expr import IntImm
    return isinstance(s, Evaluate) and isinstance(s.value, IntImm)

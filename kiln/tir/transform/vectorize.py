"""Vectorize: replace each `vectorized` loop of constant extent L by L-lane vector statements.

Before:
    for j in range(16) vectorized:
      for k in range(n):
        C[i*16 + j] = C[i*16 + j] + A[i*n + k]*B[k*16 + j]
After:
    for k in range(n):
      C[ramp(i*16, 1, 16)] = C[ramp(i*16, 1, 16)] + x16(A[i*n + k])*B[ramp(k*16, 1, 16)]

The loop variable becomes ramp(min, 1, L); expressions that depend on it become vectors
(affine index arithmetic stays a Ramp, invariant operands are broadcast). Whenever the body
holds something that has no vector form, or whose lanes might depend on each other, the loop
stays a scalar `serial` loop instead; correctness comes before speed.

`if_then_else` with a lane-varying condition becomes a Select when both branches are provably
safe to evaluate for every lane; when the only danger is vector loads that may be out of bounds
(padding), it stays a vector `if_then_else`, whose loads the back-ends mask to the lanes taking
each branch.

The fallbacks are:
a non-constant extent; a bound of an inner loop, an IfThenElse / AssertStmt condition, an
attribute or an Evaluate that varies across lanes; calls that are not elementwise math; an
`if_then_else` with a lane-varying condition whose branches hold an integer division that may
divide by zero or a scalar load not provably in bounds; an Allocate whose size varies across
lanes; a store of a lane-varying value to a lane-invariant location (a reduction across lanes);
a vector store whose index is not a Ramp with a constant non-zero stride; and accesses to a
buffer written in the loop that could touch another lane's elements (e.g. `A[j] = A[j + 1]`).
An Allocate inside the loop gets L times larger, each lane using its own slots.
Nested vectorized loops: the innermost is vectorized, an enclosing one stays serial.
"""
from __future__ import annotations

import logging

from ...arith import Analyzer
from .. import dtype as dt
from .. import op
from ..buffer import Buffer
from ..expr import (Add, Broadcast, BufferLoad, Call, Cast, Div,
                    FloorDiv, FloorMod, IntImm, Let, Max, Min, Mod, Mul, Not, PrimExpr, Ramp,
                    Range, Select, StringImm, Sub, Var)
from ..function import PrimFunc
from ..functor import IRMutator, post_order_visit, substitute
from ..stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For, IfThenElse,
                    LetStmt, SeqStmt)

log = logging.getLogger(__name__)

# Calls that act lane by lane with no side effect: their vector form is the same call.
ELEMENTWISE_CALLS = frozenset(op.FLOAT_UNARY) | {
    "fabs", "pow", "fmod", "fma", "reinterpret", "isnan", "isinf", "isfinite", "nearbyint",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left", "shift_right",
    "popcount"}


class _CannotVectorize(Exception):
    """Raised inside one loop's vectorization; the loop falls back to a serial loop."""


def vectorize(node):
    """Turn every `vectorized` loop of constant extent into vector code (or a serial loop).

    Example:
        >>> from kiln.tir import Buffer, BufferLoad, BufferStore, For, Var, const
        >>> A = Buffer.make("A", "float32", (64,)); B = Buffer.make("B", "float32", (64,))
        >>> i, j = Var("i"), Var("j")
        >>> body = BufferStore(B, BufferLoad(A, i*8 + j) * 2.0, i*8 + j)
        >>> print(vectorize(For(j, const(0), const(8), "vectorized", body)))
        B[ramp(i*8, 1, 8)] = A[ramp(i*8, 1, 8)]*x8(2.0f)
    """
    if isinstance(node, PrimFunc):
        return node.with_body(_walk(node.body, {}))
    return _walk(node, {})


# ---------------------------------------------------------------------- finding the loops
def _walk(s, ranges):
    """Vectorize loops under s, innermost first; `ranges` maps enclosing loop vars to Ranges."""
    if isinstance(s, For):
        inner = {**ranges, s.loop_var: Range(s.min, s.extent)}
        body = _walk(s.body, inner)
        loop = s if body is s.body else s.replace(body=body)
        return _vectorize_loop(loop, ranges) if loop.kind == "vectorized" else loop
    if isinstance(s, SeqStmt):
        seq = tuple(_walk(x, ranges) for x in s.seq)
        return s if all(a is b for a, b in zip(seq, s.seq)) else SeqStmt(seq)
    if isinstance(s, IfThenElse):
        then = _walk(s.then_case, ranges)
        other = None if s.else_case is None else _walk(s.else_case, ranges)
        return s if then is s.then_case and other is s.else_case else \
            IfThenElse(s.condition, then, other)
    if isinstance(s, (LetStmt, AttrStmt, AssertStmt, Allocate)):
        body = _walk(s.body, ranges)
        return s if body is s.body else s.replace(body=body)
    return s


def _vectorize_loop(loop, ranges):
    serial = loop.replace(kind="serial")
    if not isinstance(loop.extent, IntImm) or loop.extent.value < 1:
        log.debug("vectorize: loop %s has extent %s; kept serial", loop.loop_var.name, loop.extent)
        return serial
    lanes = loop.extent.value
    if lanes == 1:
        return substitute(loop.body, {loop.loop_var: loop.min})
    vec = _Vectorizer(loop, ranges)
    try:
        body = vec.stmt(loop.body)
        _check_lanes_independent(vec.accesses, vec.inner_vars, lanes)
    except _CannotVectorize as why:
        log.debug("vectorize: loop %s kept serial: %s", loop.loop_var.name, why)
        return serial
    return body


# ---------------------------------------------------------------------- vector arithmetic
def _lanes(e) -> int:
    return dt.lanes_of(e.dtype)


def _scalar_op(cls, a, b):
    """cls(a, b) on scalars, constant-folded through op.py where that keeps the meaning."""
    if dt.is_integral(a.dtype):
        builder = {Add: op.add, Sub: op.sub, Mul: op.mul, Min: op.min_, Max: op.max_}.get(cls)
        if builder is not None:
            return builder(a, b)
    return cls(a, b)


def _widen(e, lanes):
    return e if _lanes(e) == lanes else Broadcast(e, lanes)


def _ramp(base, stride, lanes):
    if isinstance(stride, IntImm) and stride.value == 0:
        return Broadcast(base, lanes)
    return Ramp(base, stride, lanes)


def _uniform(e):
    """The scalar that e holds in every lane, or None."""
    if _lanes(e) == 1:
        return e
    return e.value if isinstance(e, Broadcast) else None


def _vector_binary(cls, a, b, lanes):
    """cls(a, b) where at least one side is a vector; affine integer forms stay Ramps."""
    ra, rb = isinstance(a, Ramp), isinstance(b, Ramp)
    ua, ub = _uniform(a), _uniform(b)
    if dt.is_integral(a.dtype) and (ra or rb) and (ra or ua is not None) and (rb or ub is not None):
        zero = IntImm(dt.element_of(a.dtype), 0)
        base_a, stride_a = (a.base, a.stride) if ra else (ua, zero)
        base_b, stride_b = (b.base, b.stride) if rb else (ub, zero)
        if cls in (Add, Sub):
            base, stride = _scalar_op(cls, base_a, base_b), _scalar_op(cls, stride_a, stride_b)
            return _ramp(base, stride, lanes)
        if cls is Mul and not (ra and rb):
            ramp, k = (a, ub) if ra else (b, ua)
            return _ramp(_scalar_op(Mul, ramp.base, k), _scalar_op(Mul, ramp.stride, k), lanes)
    if ua is not None and ub is not None:
        return Broadcast(_scalar_op(cls, ua, ub), lanes)
    return cls(_widen(a, lanes), _widen(b, lanes))


# ---------------------------------------------------------------------- one loop
class _Vectorizer(IRMutator):
    """Rewrites one loop body for L lanes; expressions come back scalar (invariant) or L-lane."""

    def __init__(self, loop, ranges):
        super().__init__()
        self.var, self.lanes = loop.loop_var, loop.extent.value
        self.ramp = Ramp(loop.min, IntImm(loop.loop_var.dtype, 1), self.lanes)
        self.ranges = {**ranges, self.var: Range(loop.min, loop.extent)}
        self.let_map: dict = {}        # let-bound var -> its vector-typed replacement
        self.bound: set = set()        # vars bound inside the body (lets, inner loops)
        self.inner_vars: set = self.bound
        self.private: dict = {}        # data var allocated in the body -> (Buffer, L-times copy)
        self.accesses: list = []       # (buffer, vector-or-scalar index, is_store)

    # -- statements ------------------------------------------------------------------------
    def stmt(self, s):
        method = getattr(self, "s_" + type(s).__name__, None)
        if method is None:
            raise _CannotVectorize(f"no vector form for a {type(s).__name__}")
        return method(s)

    def scalar(self, e, what):
        v = self.visit(e)
        if _lanes(v) != 1:
            raise _CannotVectorize(f"{what} `{e}` varies across lanes")
        return v

    def s_SeqStmt(self, s):
        return SeqStmt(tuple(self.stmt(x) for x in s.seq))

    def s_For(self, s):
        if s.kind not in ("serial", "unrolled"):
            raise _CannotVectorize(f"a {s.kind} loop inside a vectorized loop")
        lo, ext = self.scalar(s.min, "inner loop start"), self.scalar(s.extent, "inner loop extent")
        self._bind(s.loop_var)
        self.ranges[s.loop_var] = Range(lo, ext)
        return s.replace(min=lo, extent=ext, body=self.stmt(s.body))

    def s_IfThenElse(self, s):
        cond = self.scalar(s.condition, "if condition")
        other = None if s.else_case is None else self.stmt(s.else_case)
        return IfThenElse(cond, self.stmt(s.then_case), other)

    def s_LetStmt(self, s):
        value = self.visit(s.value)
        var = self._bind_let(s.var, value)
        return LetStmt(var, value, self.stmt(s.body))

    def s_AttrStmt(self, s):
        value = s.value
        if isinstance(value, PrimExpr) and not isinstance(value, StringImm):
            value = self.scalar(value, "attribute value")
        return s.replace(value=value, body=self.stmt(s.body))

    def s_AssertStmt(self, s):
        return s.replace(condition=self.scalar(s.condition, "assert condition"),
                         body=self.stmt(s.body))

    def s_Evaluate(self, s):
        return Evaluate(self.scalar(s.value, "evaluated expression"))

    def s_Allocate(self, s):
        extent = self.scalar(s.extent, "allocation size")
        b = s.buffer
        if b.data in self.private:
            raise _CannotVectorize(f"buffer {b.name} is allocated twice in the loop body")
        size = _scalar_op(Mul, extent, IntImm(extent.dtype, self.lanes))
        wide = Buffer(b.name, b.dtype, (size,), Var(b.name, "handle"), b.scope, b.align)
        self.private[b.data] = (b, wide)
        return Allocate(wide, size, self.stmt(s.body))

    def _private(self, buf):
        """The L-times-larger copy of a buffer allocated in the body, or None."""
        entry = self.private.get(buf.data)
        if entry is None:
            return None
        if entry[0] is not buf:
            raise _CannotVectorize(f"buffer {buf.name} is accessed through an alias")
        return entry[1]

    def s_BufferStore(self, s):
        value, index = self.visit(s.value), self.visit(s.index)
        wide = self._private(s.buffer)
        if wide is not None:
            return BufferStore(wide, _widen(value, self.lanes), self._private_index(index))
        if _lanes(index) == 1:
            if _lanes(value) != 1:
                raise _CannotVectorize(f"lane-varying value stored to one location: `{s}`")
            self.accesses.append((s.buffer, index, True))
            return s
        if not (isinstance(index, Ramp) and isinstance(index.stride, IntImm)
                and index.stride.value != 0):
            raise _CannotVectorize(f"vector store at a non-contiguous index {index}")
        self.accesses.append((s.buffer, index, True))
        return BufferStore(s.buffer, _widen(value, self.lanes), index)

    # -- binding ---------------------------------------------------------------------------
    def _bind(self, var):
        # Memoized results assume one binding per variable; a rebinding could reuse a stale one.
        if var in self.bound:
            raise _CannotVectorize(f"variable {var.name} is bound twice in the loop body")
        self.bound.add(var)

    def _bind_let(self, var, value):
        self._bind(var)
        if _lanes(value) == 1:
            return var
        vector_var = Var(var.name, value.dtype)
        self.let_map[var] = vector_var
        return vector_var

    def _private_index(self, index):
        # Element e of lane l lives at e*L + l, so a lane only ever touches its own slots.
        lanes, elem = self.lanes, dt.element_of(index.dtype)
        width = IntImm(elem, lanes)
        scaled = _scalar_op(Mul, index, width) if _lanes(index) == 1 else \
            _vector_binary(Mul, index, width, lanes)
        lane = Ramp(IntImm(elem, 0), IntImm(elem, 1), lanes)
        return _vector_binary(Add, scaled, lane, lanes)

    # -- expressions -----------------------------------------------------------------------
    def generic_visit(self, e):
        raise _CannotVectorize(f"no vector form for a {type(e).__name__}")

    def visit_IntImm(self, e):
        return e

    visit_FloatImm = visit_StringImm = visit_IntImm

    def visit_Var(self, v):
        if v is self.var:
            return self.ramp
        if v in self.let_map:
            return self.let_map[v]
        if _lanes(v) != 1:
            raise _CannotVectorize(f"the body already holds the vector variable {v.name}")
        return v

    def visit_BinaryOp(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        if _lanes(a) == 1 and _lanes(b) == 1:
            return e if a is e.a and b is e.b else type(e)(a, b)
        return _vector_binary(type(e), a, b, self.lanes)

    def visit_Not(self, e):
        a = self.visit(e.a)
        return e if a is e.a else Not(a)

    def visit_Cast(self, e):
        value = self.visit(e.value)
        if _lanes(value) == 1:
            return e if value is e.value else Cast(e.dtype, value)
        target = dt.with_lanes(e.dtype, self.lanes)
        # Widening an integer ramp is a ramp of the widened values (as TVM does); it keeps
        # vector stores contiguous after int32 -> int64 index casts.
        if isinstance(value, Ramp) and dt.is_int(e.dtype) and dt.is_int(value.dtype) and \
                dt.bits_of(e.dtype) >= dt.bits_of(value.dtype):
            return _ramp(op.cast(value.base, e.dtype), op.cast(value.stride, e.dtype), self.lanes)
        return Cast(target, value)

    def visit_Select(self, e):
        c, t, f = self.visit(e.condition), self.visit(e.true_value), self.visit(e.false_value)
        if _lanes(c) == _lanes(t) == _lanes(f) == 1:
            unchanged = c is e.condition and t is e.true_value and f is e.false_value
            return e if unchanged else Select(c, t, f)
        n = self.lanes
        return Select(_widen(c, n), _widen(t, n), _widen(f, n))

    def visit_Let(self, e):
        value = self.visit(e.value)
        var = self._bind_let(e.var, value)
        body = self.visit(e.body)
        if var is e.var and value is e.value and body is e.body:
            return e
        return Let(var, value, body)

    def visit_Ramp(self, e):
        raise _CannotVectorize("the body already holds vector code (a nested vectorized loop)")

    visit_Broadcast = visit_Ramp

    def visit_BufferLoad(self, e):
        index = self.visit(e.index)
        wide = self._private(e.buffer)
        if wide is not None:
            return BufferLoad(wide, self._private_index(index))
        self.accesses.append((e.buffer, index, False))
        return e if index is e.index else BufferLoad(e.buffer, index)

    def visit_Call(self, e):
        args = tuple(self.visit(a) for a in e.args)
        varying = any(_lanes(a) != 1 for a in args)
        if e.op == "likely":
            # A branch hint means nothing once the condition is a vector.
            return args[0] if varying else e
        if e.op == "if_then_else":
            return self._if_then_else(e, args) if varying else e
        if e.op not in ELEMENTWISE_CALLS:
            raise _CannotVectorize(f"call {e.op!r} is not known to be elementwise and pure")
        if not varying:
            return e
        n = self.lanes
        return Call(dt.with_lanes(e.dtype, n), e.op, tuple(_widen(a, n) for a in args))

    def _if_then_else(self, e, args):
        c, t, f = args
        n = self.lanes
        if _lanes(c) == 1:
            # A uniform condition keeps the guard: only the taken branch runs.
            return Call(dt.with_lanes(e.dtype, n), "if_then_else", (c, _widen(t, n), _widen(f, n)))
        hazards = [h for branch in e.args[1:] for h in _speculation_hazards(branch, self.ranges)]
        if not hazards:
            return Select(c, _widen(t, n), _widen(f, n))
        # The back-ends mask the vector loads of a vector if_then_else to the lanes that take
        # each branch; anything else in a branch runs for every lane and must be safe.
        for node, why in hazards:
            if not (isinstance(node, BufferLoad) and _lanes(self.visit(node)) > 1):
                raise _CannotVectorize(f"if_then_else with a lane-varying condition: {why}")
        return Call(dt.with_lanes(e.dtype, n), "if_then_else", (c, _widen(t, n), _widen(f, n)))


# ---------------------------------------------------------------------- safety of Select
def _speculation_hazards(e, ranges) -> list:
    """(node, reason) for each part of e that might fault when its guard is false.

    `ranges` maps the loop variables in scope to their Range; nothing is assumed of the guard.
    """
    ana = Analyzer()
    for var, rng in ranges.items():
        ana.bind(var, rng)
    hazards = []

    def check(n):
        if isinstance(n, BufferLoad):
            index = n.index
            if not (ana.can_prove(op.greater_equal(index, 0)) and
                    ana.can_prove(op.less(index, n.buffer.num_elements()))):
                hazards.append((n, f"load {n} is not provably in bounds"))
        elif isinstance(n, (Div, Mod, FloorDiv, FloorMod)) and dt.is_integral(n.dtype):
            if not ana.can_prove(op.not_equal(n.b, 0)):
                hazards.append((n, f"division {n} may divide by zero"))
        elif isinstance(n, Call) and n.op not in ELEMENTWISE_CALLS | {"if_then_else", "likely"}:
            hazards.append((n, f"call {n.op!r} may have effects"))

    post_order_visit(e, check)
    return hazards


# ---------------------------------------------------------------------- lane independence
def _linear(e, terms=None, scale=1):
    """e as {atom: coefficient} (None keys the constant); non-affine parts become atoms."""
    terms = {} if terms is None else terms
    if isinstance(e, IntImm):
        terms[None] = terms.get(None, 0) + scale * e.value
    elif isinstance(e, Add):
        _linear(e.a, terms, scale)
        _linear(e.b, terms, scale)
    elif isinstance(e, Sub):
        _linear(e.a, terms, scale)
        _linear(e.b, terms, -scale)
    elif isinstance(e, Mul) and isinstance(e.b, IntImm):
        _linear(e.a, terms, scale * e.b.value)
    elif isinstance(e, Mul) and isinstance(e.a, IntImm):
        _linear(e.b, terms, scale * e.a.value)
    else:
        terms[e] = terms.get(e, 0) + scale
    return terms


def _check_lanes_independent(accesses, inner_vars, lanes):
    """Raise unless no lane can touch an element that another lane writes.

    Two accesses ramp(p, s, L) and ramp(q, s, L) can meet only in the same lane when p - q is
    always a multiple of s*L. Variables bound inside the body (inner loops, lets) take
    different values in the two dynamic accesses, so the second access gets fresh copies.
    """
    by_data: dict = {}   # keyed by the data pointer: two Buffer objects may view one array
    for buf, index, is_store in accesses:
        by_data.setdefault(buf.data, (buf, []))[1].append((index, is_store))
    for buf, uses in by_data.values():
        stores = [index for index, is_store in uses if is_store]
        if not stores:
            continue
        if all(_lanes(index) == 1 for index in stores):
            # The same invariant store by every lane runs once; that is only the same
            # if nothing in the body reads what it wrote.
            if len(stores) != len(uses):
                raise _CannotVectorize(f"{buf.name} is stored at a lane-invariant index and read")
            continue
        strides = {index.stride.value if isinstance(index, Ramp) and
                   isinstance(index.stride, IntImm) else None for index, _ in uses}
        if len(strides) != 1 or None in strides:
            raise _CannotVectorize(f"{buf.name} is written and accessed with different strides")
        period = strides.pop() * lanes
        fresh = {v: Var(v.name + "'", v.dtype) for v in inner_vars}
        for store in stores:
            for other, _ in uses:
                diff = _linear(store.base)
                for atom, coeff in _linear(substitute(other.base, fresh)).items():
                    diff[atom] = diff.get(atom, 0) - coeff
                if any(c % period for c in diff.values()):
                    raise _CannotVectorize(f"lanes of {buf.name} may overlap: "
                                           f"{store} and {other}")

"""Common integer subexpressions: index arithmetic that the code generators would emit in
several arms of a branch is computed once, in a LetStmt.

Before (a concatenation: each arm recomputes the same row offset):
    for f in range(96) parallel:
      B[f] = if_then_else(floordiv(f, 24) < 2, A0[floordiv(f, 24)*16 + floormod(f, 24)*4],
               if_then_else(floordiv(f, 24) < 4, A1[floordiv(f, 24)*16 + floormod(f, 24)*4 - 32],
                            A2[floordiv(f, 24)*16 + floormod(f, 24)*4 - 64]))
After:
    for f in range(96) parallel:
      cse: int32 = floordiv(f, 24)
      cse_1: int32 = cse*16 + floormod(f, 24)*4
      B[f] = if_then_else(cse < 2, A0[cse_1], if_then_else(cse < 4, A1[cse_1 - 32], A2[cse_1 - 64]))

Why: the code generators compute a value once per statement, but afresh in each arm of an
if_then_else and in each statement. Copies in different arms do not dominate each other, so
LLVM's cheap CSE (which merges a copy into one that dominates it) cannot remove them and every
pass carries them: DenseNet-121's concatenations of up to 32 inputs repeated their index math in
every arm of every store (~8,500 lines of LLVM IR a kernel). Copies in straight-line code
are left to LLVM: naming them cost this pass more than it saved (measured on ResNet-18 and
MobileNet-V2), so statements with no branch in or around them are not even looked at. A
LetStmt costs nothing in LLVM (the name stands for the SSA value) and one temporary in C.

What is shared: scalar integer expressions of more than one instruction, built only of integer
constants, variables bound by a loop, a LetStmt or the function, arithmetic, min/max,
comparisons, casts between integer types, select and bitwise and/or/xor; never loads, other
calls, vectors (a Ramp stays a Ramp: the code generators read contiguous accesses from it),
anything that reads a variable bound by a Let expression, or anything with a floating-point
operand (float math is never touched, so results stay bit-identical). An expression is bound
when the code generators would emit it in two places, one of them in an arm of a branch (an
if_then_else arm or an IfThenElse case), at the innermost statement that holds all its uses:
just before one statement, or at the top of a loop body, a branch's case or a LetStmt's body
(never above the loop or LetStmt that binds a variable it reads). Hoisting evaluates it
where it was not evaluated before (out of a branch), which is harmless for arithmetic; an
expression that may trap (a division or modulo by anything but a nonzero constant other than
-1, or a shift by an amount not known to be in range) is only bound where one of its uses is
evaluated whenever the statement there runs, so it is never evaluated where it was not.

Runs last in the lowering pipeline: every earlier pass reasons about explicit index
arithmetic (simplify's bounds, loop_partition's conditions, vectorize's ramps), which a
let-variable would hide.
"""
from __future__ import annotations

from .. import dtype as dt
from ..buffer import Buffer
from ..expr import (EQ, GE, GT, LE, LT, NE, Add, And, BufferLoad, Call, Cast, Div, FloatImm,
                    FloorDiv, FloorMod, IntImm, Max, Min, Mod, Mul, Not, Or, PrimExpr, Select,
                    StringImm, Sub, Var)
from ..function import PrimFunc
from ..functor import free_vars, post_order_visit
from ..stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For, IfThenElse,
                    LetStmt, SeqStmt, Stmt)

_PURE = 1          # integer arithmetic without loads, calls or Let variables
_TRAPS = 2         # may fault (or be undefined) when evaluated where it was not before
_CANDIDATE = 4     # pure, scalar integer, more than one instruction: worth a name
_HOLDS = 8         # a candidate at or below
_REBOUND = 16      # reads a variable that two loops or LetStmts bind

_SCALARS = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                      "uint64"})
_OPAQUE = (0, (), None)
# One instruction when its operands are constants or variables: not worth a name (LLVM's
# first CSE pass merges the copies that dominate each other; naming them would rebuild every
# statement that reads them, e.g. `x*144` in each of 1,600 unrolled stores).
_ONE_INSTRUCTION = frozenset({Add, Sub, Mul, Min, Max, Cast})
_BINARY = frozenset({Add, Sub, Mul, Min, Max, Div, Mod, FloorDiv, FloorMod, EQ, NE, LT, LE, GT,
                     GE})
# How a pure node's dtype follows from its operands.
_SAME, _DIVIDE, _BOOL = "same", "divide", "bool"
_RULES = {Add: _SAME, Sub: _SAME, Mul: _SAME, Min: _SAME, Max: _SAME, And: _SAME, Or: _SAME,
          Not: _SAME, Div: _DIVIDE, Mod: _DIVIDE, FloorDiv: _DIVIDE, FloorMod: _DIVIDE,
          EQ: _BOOL, NE: _BOOL, LT: _BOOL, LE: _BOOL, GT: _BOOL, GE: _BOOL}
_BITWISE = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor"})
_SHIFTS = frozenset({"shift_left", "shift_right"})

# How an operand or a child statement is evaluated, relative to its parent, as bits: GUARDED
# when it may not be (under a loop, an assertion, And/Or's right side), BRANCHED when it is in
# one arm of a branch (an if_then_else arm, an IfThenElse case). Copies in different arms do
# not dominate each other, so LLVM keeps them all through its pipeline (its first CSE pass
# merges only copies that dominate each other): those are the ones worth a name.
_PLAIN, _GUARDED, _BRANCHED = 0, 1, 2
_ARM = _GUARDED | _BRANCHED
# Of the occurrences of an expression (relative to a position), one is evaluated whenever the
# position's statement runs: binding it there evaluates nothing that was not evaluated.
_SURE = 4
_MANY = -1         # a place: occurrences in more than one


def common_subexpr(node):
    """Compute repeated integer index expressions once (see the module docstring).

    Example:
        >>> from kiln.tir import Buffer, BufferStore, Var, if_then_else
        >>> A = Buffer.make("A", "int32", (64,)); i = Var("i")
        >>> s = BufferStore(A, if_then_else(i < 8, (i // 4) * 8, (i // 4) * 8 + 1), i)
        >>> print(common_subexpr(s))
        cse: int32 = floordiv(i, 4)*8
        A[i] = if_then_else(i < 8, cse, cse + 1)
    """
    if isinstance(node, PrimFunc):
        outer = list(node.shape_vars)
        for p in node.params:
            outer.append(p.data if isinstance(p, Buffer) else p)
        body = _Pass(node.body, outer).run()
        return node if body is node.body else node.with_body(body)
    if isinstance(node, Stmt):
        return _Pass(node, free_vars(node)).run()
    raise TypeError(f"common_subexpr expects a PrimFunc or a Stmt, got {type(node).__name__}")


class _Pass:
    """Positions are the statements of the tree (a statement node may sit in several); an
    expression is bound at the innermost position holding all its occurrences: their lowest
    common ancestor, where the variables it reads are all bound."""

    def __init__(self, body: Stmt, outer_vars):
        self.body = body
        # Variables an expression may read and still be hoisted within their scope; those of
        # Let expressions are absent (their scope is part of one expression).
        self.outer = frozenset(outer_vars)
        self.bound: set = set(self.outer)
        # Variables bound by two loops or LetStmts (loop_partition's copies of a loop share
        # their variable) -> the positions of those bodies: uses under two of them have their
        # common ancestor outside both.
        self.rebound: dict = {}
        self.scopes: dict = {}         # variable -> positions of the bodies where it is bound
        self.stmt: list = []           # position -> statement
        self.end: list = []            # position -> the position after its subtree
        self.parent: list = []         # position -> enclosing position (-1 at the top)
        self.level: list = []          # position -> nesting depth
        self.guards: list = []         # position -> loops, branches and asserts around it
        self.branches: list = []       # position -> branches around it
        self.roots: list = []          # (expression, position): what each statement evaluates
        self.rooted: set = set()       # positions whose expressions are in roots
        self._branchy_memo: dict = {}  # expression -> whether an if_then_else is at or below
        self._info: dict = {}          # expression -> (flags, operands with candidates, dtype)

    def run(self) -> Stmt:
        self._position(self.body, -1, 0, 0)
        for var, scopes in self.scopes.items():
            if var in self.outer or len(scopes) > 1 and self._nested(scopes):
                # One binding shadows another: equal expressions may differ in value.
                self.bound.discard(var)
            elif len(scopes) > 1:
                self.rebound[var] = scopes
        if not self.roots:             # no branch: most kernels cost this walk only
            return self.body
        lets = self._choose()
        if not lets:
            return self.body
        names = {e: Var("cse", e.dtype) for at in lets.values() for e in at}
        rename = _Rename(names, self._info)
        values = {e: rename.operands(e) for e in names}
        # Only the statements whose expressions were counted are renamed (a bound expression
        # may also sit, uncounted, outside the statement its let wraps), and only they, the
        # let positions and what encloses them are rebuilt.
        touched: set = set()
        for pos in (*self.rooted, *lets):
            while pos >= 0 and pos not in touched:
                touched.add(pos)
                pos = self.parent[pos]
        return self._rebuild(0, lets, names, values, rename, touched)[0]

    def _position(self, s: Stmt, parent: int, guards: int, branches: int) -> None:
        pos = len(self.stmt)
        self.stmt.append(s)
        self.end.append(pos + 1)
        self.parent.append(parent)
        self.level.append(self.level[parent] + 1 if parent >= 0 else 0)
        self.guards.append(guards)
        self.branches.append(branches)
        own, children = _parts(s)
        if isinstance(s, (For, LetStmt)):
            var = s.loop_var if isinstance(s, For) else s.var
            self.bound.add(var)
            self.scopes.setdefault(var, []).append(pos + 1)     # the body comes next
        # Only statements in a branch or with one take part: a copy worth a name is in an arm,
        # and a copy in other straight-line code either dominates the arm's (LLVM merges the
        # two) or costs one more copy.
        if own and (branches or any(self._branchy(e) for e in own)):
            self.rooted.add(pos)
            for e in own:
                self.roots.append((e, pos))
        for child, how in children:
            self._position(child, pos, guards + (how & _GUARDED), branches + (how >> 1))
        self.end[pos] = len(self.stmt)

    def _branchy(self, e) -> bool:
        found = self._branchy_memo.get(e)
        if found is None:
            cls = type(e)
            if cls is IntImm or isinstance(e, (Var, FloatImm, StringImm)):
                found = False
            elif cls in _BINARY or cls is And or cls is Or:
                found = self._branchy(e.a) or self._branchy(e.b)
            elif cls is BufferLoad:
                found = self._branchy(e.index)
            elif cls is Call and e.op == "if_then_else":
                found = True
            else:
                found = any(self._branchy(a) for a, _ in _operands(e, cls))
            self._branchy_memo[e] = found
        return found

    def _nested(self, positions: list) -> bool:
        level, parent = self.level, self.parent
        for a in positions:
            for b in positions:
                if a != b and level[b] > level[a]:
                    while level[b] > level[a]:
                        b = parent[b]
                    if b == a:
                        return True
        return False

    def _in_scope(self, e, pos: int) -> bool:
        """Whether every variable bound twice that e reads is bound around position pos."""
        level, parent = self.level, self.parent
        found: list = []
        post_order_visit(e, lambda n: found.append(n) if n in self.rebound else None)
        for var in found:
            for body in self.rebound[var]:
                at = pos
                while level[at] > level[body]:
                    at = parent[at]
                if at == body:
                    break
            else:
                return False
        return True

    def _lca(self, a: int, b: int) -> int:
        level, parent = self.level, self.parent
        while a != b:
            if level[a] >= level[b]:
                a = parent[a]
            else:
                b = parent[b]
        return a

    # ------------------------------------------------------------------ expressions
    def info(self, e) -> tuple:
        """(flags, operands holding candidates with the kind of edge to each, dtype when
        pure), memoized. Dtypes come from the operands' entries: BinaryOp.dtype recurses."""
        found = self._info.get(e)
        if found is not None:
            return found
        cls = type(e)
        if cls is IntImm:
            found = (_PURE, (), e.dtype) if e.dtype in _SCALARS else _OPAQUE
        elif isinstance(e, Var):
            if e.dtype in _SCALARS and e in self.bound:
                found = (_PURE | (_REBOUND if e in self.rebound else 0), (), e.dtype)
            else:
                found = _OPAQUE
        elif cls is FloatImm or cls is StringImm:
            found = _OPAQUE
        else:
            found = self._compound(e, cls)
        self._info[e] = found
        return found

    def _compound(self, e, cls) -> tuple:
        operands = _operands(e, cls)
        pure, traps, rebound, kids = True, False, 0, []
        for operand in operands:
            flags = self.info(operand[0])[0]
            if not flags & _PURE:
                pure = False
            if flags & _TRAPS:
                traps = True
            rebound |= flags & _REBOUND
            if flags & _HOLDS:
                kids.append(operand)
        dtype = None
        if pure:
            # Operands are pure, hence scalar integers or bools.
            rule = _RULES.get(cls)
            if rule is _SAME:
                dtype = self._info[e.a][2]
            elif rule is _DIVIDE:
                dtype = self._info[e.a][2]
                traps = traps or not _safe_divisor(e.b)
            elif rule is _BOOL:
                dtype = "bool"
            elif cls is Select:
                dtype = self._info[e.true_value][2]
            elif cls is Cast:
                dtype = e.dtype if e.dtype in _SCALARS else None
            elif cls is Call and e.op in _BITWISE:
                dtype = e.dtype
            elif cls is Call and e.op in _SHIFTS:
                dtype = e.dtype
                amount = e.args[1]
                traps = traps or not (isinstance(amount, IntImm)
                                      and 0 <= amount.value < dt.bits_of(dtype))
            pure = dtype is not None
        flags = _HOLDS if kids else 0
        if pure:
            flags |= _PURE | rebound | (_TRAPS if traps else 0)
            if dtype != "bool" and not (cls in _ONE_INSTRUCTION and all(
                    isinstance(a, (IntImm, Var)) for a, _ in operands)):
                flags |= _CANDIDATE | _HOLDS
        return flags, tuple(kids), dtype

    # ------------------------------------------------------------------ choice
    def _choose(self) -> dict:
        """{position: expressions to bind there, each before those inside it}.

        One walk over the expression DAG, parents before operands, carries to each node the
        innermost position holding its occurrences, how they are evaluated relative to it
        (GUARDED / BRANCHED / SURE bits, see above) and in how many places the code generators
        would emit it (each statement and each arm has its own memo). A node is bound when
        it would be emitted in two places, one in a branch, and, if it may trap, one of them
        sure. Bound at a position, it counts for its operands as one sure occurrence there,
        in the let's own statement."""
        info = self.info
        state: dict = {}                       # node -> [position, how, place]
        for e, pos in self.roots:
            if info(e)[0] & _HOLDS:
                self._merge(state, e, pos, _SURE, pos)
        lets: dict = {}
        place_count = len(self.stmt)           # places past the positions: arms and lets
        for e in reversed(_post_order(list(state), info)):
            pos, how, place = state[e]
            flags, kids, _ = info(e)
            if (place == _MANY and how & _BRANCHED and flags & _CANDIDATE
                    and (how & _SURE or not flags & _TRAPS)
                    and (not flags & _REBOUND or self._in_scope(e, pos))):
                lets.setdefault(pos, []).append(e)
                how, place = _SURE, place_count
                place_count += 1
            for a, edge in kids:
                p = place
                if edge == _ARM and place != _MANY:
                    p, place_count = place_count, place_count + 1
                sub = how | edge
                if edge & _GUARDED:
                    sub &= ~_SURE
                self._merge(state, a, pos, sub, p)
        return lets

    def _merge(self, state: dict, e, pos: int, how: int, place: int) -> None:
        """Count occurrences of e (`how`, relative to `pos`) in its state."""
        st = state.get(e)
        if st is None:
            state[e] = [pos, how, place]
            return
        at, was = st[0], st[1]
        if at != pos:
            top = self._lca(at, pos)
            guards, branches = self.guards, self.branches
            if guards[at] > guards[top]:
                was = was & ~_SURE | _GUARDED
            if guards[pos] > guards[top]:
                how = how & ~_SURE | _GUARDED
            if branches[at] > branches[top] or branches[pos] > branches[top]:
                how |= _BRANCHED
            st[0] = top
        st[1] = was | how
        if st[2] != place:
            st[2] = _MANY

    # ------------------------------------------------------------------ rewrite
    def _rebuild(self, pos: int, lets: dict, names: dict, values: dict, rename,
                 touched: set) -> tuple:
        """(the statement at `pos` renamed, with its lets around it; the position after its
        subtree): positions number the tree in pre-order."""
        s = self.stmt[pos]
        if pos not in touched:
            return s, self.end[pos]
        nxt = pos + 1
        own, children = _parts(s)
        expr = rename.expr if pos in self.rooted else _same
        if children:
            new_children = []
            for _ in children:
                child, nxt = self._rebuild(nxt, lets, names, values, rename, touched)
                new_children.append(child)
            s = _with_children(s, new_children, expr)
        elif isinstance(s, BufferStore):
            s = BufferStore(s.buffer, expr(s.value), expr(s.index))
        elif isinstance(s, Evaluate):
            s = Evaluate(expr(s.value))
        for e in lets.get(pos, ()):
            s = LetStmt(names[e], values[e], s)
        return s, nxt


def _same(e):
    return e


def _with_children(s: Stmt, children: list, rename) -> Stmt:
    """s with its own expressions renamed and its child statements replaced."""
    if isinstance(s, SeqStmt):
        return SeqStmt(tuple(children))
    if isinstance(s, For):
        return For(s.loop_var, rename(s.min), rename(s.extent), s.kind, children[0],
                   s.thread_tag, s.annotations)
    if isinstance(s, LetStmt):
        return LetStmt(s.var, rename(s.value), children[0])
    if isinstance(s, IfThenElse):
        return IfThenElse(rename(s.condition), children[0],
                          children[1] if len(children) > 1 else None)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, rename(s.extent), children[0])
    if isinstance(s, AttrStmt):
        return s.replace(body=children[0])
    if isinstance(s, AssertStmt):
        return AssertStmt(rename(s.condition), s.message, children[0])
    raise TypeError(f"no children expected in {type(s).__name__}")


def _operands(e, cls) -> tuple:
    """The operands of expression e (of class cls), each with how it is evaluated."""
    if cls is Call:
        arms = e.op == "if_then_else"
        return tuple((a, _ARM if arms and k else _PLAIN) for k, a in enumerate(e.args))
    if cls is And or cls is Or:
        return (e.a, _PLAIN), (e.b, _GUARDED)
    if cls in _BINARY:
        return (e.a, _PLAIN), (e.b, _PLAIN)
    if cls is BufferLoad:
        return ((e.index, _PLAIN),)
    operands = []
    for name in e._fields:
        value = getattr(e, name)
        if isinstance(value, PrimExpr):
            operands.append((value, _PLAIN))
        elif isinstance(value, tuple):
            operands.extend((v, _PLAIN) for v in value if isinstance(v, PrimExpr))
    return tuple(operands)


def _safe_divisor(b) -> bool:
    # INT_MIN / -1 overflows (undefined in C, a fault on x86), so -1 is not safe either.
    return isinstance(b, IntImm) and b.value != 0 and (b.value != -1 or dt.is_uint(b.dtype))


def _post_order(starts: list, info) -> list:
    """Nodes reachable from starts through operands that hold candidates, operands first."""
    seen: set = set()
    order: list = []
    for start in starts:
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(info(start)[1]))]
        while stack:
            node, kids = stack[-1]
            for a, _ in kids:
                if a not in seen:
                    seen.add(a)
                    stack.append((a, iter(info(a)[1])))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def _parts(s: Stmt) -> tuple:
    """(expressions s evaluates itself, [(child statement, how it runs: _GUARDED etc.)])."""
    if isinstance(s, BufferStore):
        return (s.value, s.index), ()
    if isinstance(s, SeqStmt):
        return (), [(x, _PLAIN) for x in s.seq]
    if isinstance(s, For):
        return (s.min, s.extent), [(s.body, _GUARDED)]
    if isinstance(s, LetStmt):
        return (s.value,), [(s.body, _PLAIN)]
    if isinstance(s, IfThenElse):
        if s.else_case is None:
            return (s.condition,), [(s.then_case, _ARM)]
        return (s.condition,), [(s.then_case, _ARM), (s.else_case, _ARM)]
    if isinstance(s, Allocate):
        return (s.extent,), [(s.body, _PLAIN)]
    if isinstance(s, AttrStmt):
        return (), [(s.body, _PLAIN)]
    if isinstance(s, AssertStmt):
        return (s.condition,), [(s.body, _GUARDED)]
    if isinstance(s, Evaluate):
        return (s.value,), ()
    return (), ()


class _Rename:
    """Replaces the bound expressions by their variables, descending only into operands
    that hold candidates (nothing else can contain a bound expression)."""

    def __init__(self, names: dict, info: dict):
        self.memo = dict(names)
        self.info = info

    def expr(self, e):
        out = self.memo.get(e)
        if out is None:
            out = self.memo[e] = self.operands(e) if self.info[e][1] else e
        return out

    def operands(self, e):
        """e with its operands renamed (e itself is not replaced)."""
        cls = type(e)
        if cls in _BINARY or cls is And or cls is Or:
            a, b = self.expr(e.a), self.expr(e.b)
            return e if a is e.a and b is e.b else cls(a, b)
        if cls is BufferLoad:
            index = self.expr(e.index)
            return e if index is e.index else BufferLoad(e.buffer, index)
        holds = {a for a, _ in self.info[e][1]}
        changed, values = False, []
        for name in e._fields:
            value = getattr(e, name)
            if isinstance(value, tuple) and any(v in holds for v in value):
                new = tuple(self.expr(v) if v in holds else v for v in value)
                if any(a is not b for a, b in zip(new, value)):
                    changed, value = True, new
            elif value in holds:
                new = self.expr(value)
                if new is not value:
                    changed, value = True, new
            values.append(value)
        return type(e)(*values) if changed else e

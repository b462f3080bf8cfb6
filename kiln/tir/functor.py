"""Visitors and mutators over expressions and statements, dispatched by node class.

A mutator rebuilds only what changed (unchanged subtrees keep their identity) and memoizes
per instance, so shared subexpressions are visited once. Override `visit_<ClassName>`.
"""
from __future__ import annotations

import sys

from .buffer import Buffer
from .expr import IterVar, Let, PrimExpr, Range, Reduce, Var
from .node import Node
from .stmt import AttrStmt, For, LetStmt, Stmt, ThreadAllReduce

sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))

# Fields that bind a variable rather than use it; a mutator does not rewrite them by default.
_BINDERS = {For: ("loop_var",), Let: ("var",), LetStmt: ("var",), ThreadAllReduce: ("results",)}


def _child_kind(value):
    if isinstance(value, (PrimExpr, Stmt)):
        return True
    if isinstance(value, tuple) and value and all(isinstance(v, (PrimExpr, Stmt)) for v in value):
        return True
    return False


class IRMutator:
    """Rebuilds IR bottom-up.

    Example:
        >>> class Double(IRMutator):
        ...     def visit_IntImm(self, e):
        ...         return type(e)(e.dtype, e.value * 2)
    """

    def __init__(self):
        self._memo: dict = {}
        self._table: dict = {}

    def visit(self, node):
        if node is None:
            return None
        memo = self._memo
        result = memo.get(node)
        if result is not None:
            return result
        cls = type(node)
        method = self._table.get(cls)
        if method is None:
            method = self._resolve(cls)
        result = method(node)
        memo[node] = result
        return result

    __call__ = visit

    def _resolve(self, cls):
        for klass in cls.__mro__:
            method = getattr(self, "visit_" + klass.__name__, None)
            if method is not None:
                break
        else:
            method = self.generic_visit
        self._table[cls] = method
        return method

    def generic_visit(self, node):
        if isinstance(node, Var) or not isinstance(node, Node):
            return node
        skip = _BINDERS.get(type(node), ())
        changed = False
        values = []
        for name in node._fields:
            value = getattr(node, name)
            if name not in skip:
                new = self._visit_field(value)
                if new is not value:
                    changed = True
                    value = new
            values.append(value)
        if not changed:
            return node
        if isinstance(node, (Var, Buffer)):
            return node
        return type(node)(*values)

    def _visit_field(self, value):
        if isinstance(value, (PrimExpr, Stmt)):
            return self.visit(value)
        if isinstance(value, tuple) and value and isinstance(value[0], (PrimExpr, Stmt)):
            new = tuple(self.visit(v) if isinstance(v, (PrimExpr, Stmt)) else v for v in value)
            return value if all(a is b for a, b in zip(new, value)) else new
        return value


class IRVisitor:
    """Visits every node once (pre-order); override `visit_<ClassName>` and call generic_visit."""

    def __init__(self):
        self._seen: set = set()
        self._table: dict = {}

    def visit(self, node):
        if node is None or node in self._seen:
            return
        self._seen.add(node)
        cls = type(node)
        method = self._table.get(cls)
        if method is None:
            for klass in cls.__mro__:
                method = getattr(self, "visit_" + klass.__name__, None)
                if method is not None:
                    break
            else:
                method = self.generic_visit
            self._table[cls] = method
        method(node)

    def generic_visit(self, node):
        if not isinstance(node, Node) or isinstance(node, (Var, Buffer)):
            return
        for name in node._fields:
            value = getattr(node, name)
            if isinstance(value, (PrimExpr, Stmt, IterVar, Range)):
                self.visit(value)
            elif isinstance(value, tuple):
                for v in value:
                    if isinstance(v, (PrimExpr, Stmt, IterVar, Range)):
                        self.visit(v)


def post_order_visit(node, fn) -> None:
    """Call fn on every expression and statement under node, children first."""
    seen = set()

    def walk(n):
        if n in seen:
            return
        seen.add(n)
        if isinstance(n, Node) and not isinstance(n, (Var, Buffer)):
            for name in n._fields:
                value = getattr(n, name)
                if isinstance(value, (PrimExpr, Stmt)):
                    walk(value)
                elif isinstance(value, tuple):
                    for v in value:
                        if isinstance(v, (PrimExpr, Stmt)):
                            walk(v)
        fn(n)

    walk(node)


class _Substituter(IRMutator):
    def __init__(self, vmap):
        super().__init__()
        self.vmap = vmap

    def visit_Var(self, v):
        return self.vmap.get(v, v)

    def visit_IterVar(self, iv):
        return iv


def substitute(node, vmap: dict):
    """Replace variables by expressions.

    Example:
        >>> from kiln.tir import Var
        >>> i = Var("i")
        >>> substitute(i * 2 + 1, {i: Var("j")})
        j*2 + 1
    """
    if not vmap:
        return node
    return _Substituter(vmap).visit(node)


def free_vars(node) -> list[Var]:
    """Variables used in node that no For / Let inside it binds, in first-use order."""
    bound: set = set()
    found: dict = {}

    def fn(n):
        if isinstance(n, Var):
            found.setdefault(n, None)
        elif isinstance(n, (For,)):
            bound.add(n.loop_var)
        elif isinstance(n, (Let, LetStmt)):
            bound.add(n.var)
        elif isinstance(n, AttrStmt) and n.key == "thread_extent":
            bound.add(n.node)          # a GPU kernel's block / thread index
        elif isinstance(n, Reduce):
            for iv in n.axis:
                bound.add(iv.var)

    post_order_visit(node, fn)
    # post_order_visit does not descend into binder fields; add vars read in loop bounds etc.
    return [v for v in found if v not in bound]


def uses_var(node, predicate) -> bool:
    """True if any variable under node satisfies predicate (a set or a callable)."""
    test = predicate.__contains__ if isinstance(predicate, (set, frozenset, dict)) else predicate
    hit = False

    def fn(n):
        nonlocal hit
        if not hit and isinstance(n, Var) and test(n):
            hit = True

    post_order_visit(node, fn)
    return hit

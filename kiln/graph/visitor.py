"""Traversal and rewriting of graphs without recursion (a BERT has thousands of nodes).

`post_order(e)` lists every node once, producers before consumers. `ExprMutator` rebuilds a
graph bottom-up, reusing nodes whose children did not change; subclasses override
`rewrite_<Class>(node, new_children...)`.
"""
from __future__ import annotations

from .expr import (Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var,
                   children)


def post_order(root: Expr, enter_functions: bool = True) -> list:
    """Every expression reachable from root, each once, children first; with
    enter_functions=False, functions (e.g. fused primitives called from main) are not entered.

    Example:
        >>> [type(n).__name__ for n in post_order(call("nn.relu", x))]  # doctest: +SKIP
        ['Var', 'Call']
    """
    order, seen = [], set()
    stack = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        if isinstance(node, Function) and not enter_functions:
            continue
        for c in reversed(children(node)):
            if id(c) not in seen:
                stack.append((c, False))
    return order


def users(root: Expr) -> dict:
    """Map from node to the list of nodes that use it (by identity)."""
    out: dict = {}
    for n in post_order(root):
        out.setdefault(n, [])
        for c in children(n):
            out.setdefault(c, []).append(n)
    return out


class ExprMutator:
    """Rebuild a graph; override rewrite_Call(self, call, args) and friends.

    Each rewrite_* receives the original node and its already-rewritten children and returns the
    replacement (the default rebuilds only if a child changed). A call's op that is an Op or a
    GlobalVar is not a child: it is handed to rewrite_Call as is. With the class attribute
    enter_functions = False, functions (composite or primitive functions called from the graph)
    are kept as they are, not entered.
    """

    enter_functions = True

    def __init__(self):
        self.memo: dict = {}

    def visit(self, root: Expr) -> Expr:
        memo = self.memo
        if self.enter_functions:
            nodes = post_order(root)
        else:
            # The root function itself is entered; the functions it calls are kept whole.
            if isinstance(root, Function):
                nodes = [n for c in children(root) for n in post_order(c, enter_functions=False)]
                nodes.append(root)
            else:
                nodes = post_order(root, enter_functions=False)
        for node in nodes:
            if node in memo:
                continue
            if isinstance(node, Function) and node is not root and not self.enter_functions:
                memo[node] = node
                continue
            memo[node] = self._rewrite(node)
        return memo[root]

    __call__ = visit

    def _rewrite(self, node):
        m = self.memo
        if isinstance(node, Call):
            op = m[node.op] if isinstance(node.op, Function) else node.op
            return self.rewrite_Call(node, op, [m[a] for a in node.args])
        if isinstance(node, Tuple):
            return self.rewrite_Tuple(node, [m[f] for f in node.fields])
        if isinstance(node, TupleGetItem):
            return self.rewrite_TupleGetItem(node, m[node.tuple_value])
        if isinstance(node, Function):
            return self.rewrite_Function(node, [m[p] for p in node.params], m[node.body])
        if isinstance(node, Let):
            return self.rewrite_Let(node, m[node.var], m[node.value], m[node.body])
        if isinstance(node, If):
            return self.rewrite_If(node, m[node.cond], m[node.true_branch], m[node.false_branch])
        if isinstance(node, Var):
            return self.rewrite_Var(node)
        if isinstance(node, Constant):
            return self.rewrite_Constant(node)
        if isinstance(node, GlobalVar):
            return node
        raise TypeError(f"unknown graph node {type(node).__name__}")

    # default rewrites: rebuild when a child changed
    def rewrite_Var(self, v):
        return v

    def rewrite_Constant(self, c):
        return c

    def rewrite_Call(self, call, op, args):
        if op is call.op and all(a is b for a, b in zip(args, call.args)):
            return call
        return Call(op, args, call.attrs, call.span)

    def rewrite_Tuple(self, t, fields):
        if all(a is b for a, b in zip(fields, t.fields)):
            return t
        return Tuple(fields, t.span)

    def rewrite_TupleGetItem(self, g, value):
        if value is g.tuple_value:
            return g
        if isinstance(value, Tuple):
            return value.fields[g.index]
        return TupleGetItem(value, g.index, g.span)

    def rewrite_Function(self, f, params, body):
        if body is f.body and all(a is b for a, b in zip(params, f.params)):
            return f
        return Function(params, body, f.attrs, f.span)

    def rewrite_Let(self, let, var_, value, body):
        if var_ is let.var and value is let.value and body is let.body:
            return let
        return Let(var_, value, body, let.span)

    def rewrite_If(self, node, cond, t, f):
        if cond is node.cond and t is node.true_branch and f is node.false_branch:
            return node
        return If(cond, t, f, node.span)


def structural_equal(a, b, map_free_vars: bool = False) -> bool:
    """Same graph shape, ops, attributes, constants and types; variables match by position
    (function parameters) or, with map_free_vars, by first use; global variables by name and
    type. Two IRModules are equal when they have the same function names and each pair of
    functions is equal.

    Example:
        >>> f, g = Function([x], call("exp", x)), Function([y], call("exp", y))  # doctest: +SKIP
        >>> structural_equal(f, g)                                               # doctest: +SKIP
        True
    """
    from .module import IRModule
    if isinstance(a, IRModule) or isinstance(b, IRModule):
        return (isinstance(a, IRModule) and isinstance(b, IRModule)
                and sorted(a) == sorted(b)
                and all(structural_equal(a[name], b[name], map_free_vars) for name in a))
    var_map: dict = {}
    pa, pb = post_order(a), post_order(b)
    if len(pa) != len(pb):
        return False
    index_a = {id(n): k for k, n in enumerate(pa)}
    index_b = {id(n): k for k, n in enumerate(pb)}
    for x, y in zip(pa, pb):
        if type(x) is not type(y) or x.checked_type != y.checked_type:
            return False
        if [index_a[id(c)] for c in children(x)] != [index_b[id(c)] for c in children(y)]:
            return False
        if isinstance(x, Var):
            if var_map.setdefault(x, y) is not y:
                return False
            if x is not y and not map_free_vars and not _bound_param(x, pa):
                return False
        elif isinstance(x, Constant):
            if x.data.shape != y.data.shape or not (x.data == y.data).all():
                return False
        elif isinstance(x, Call):
            if isinstance(x.op, Function) != isinstance(y.op, Function):
                return False
            if isinstance(x.op, GlobalVar) or isinstance(y.op, GlobalVar):
                if not _same_global(x.op, y.op):
                    return False
            elif not isinstance(x.op, Function) and x.op is not y.op:
                return False
            if x.attrs != y.attrs:
                return False
        elif isinstance(x, GlobalVar) and not _same_global(x, y):
            return False
        elif isinstance(x, TupleGetItem) and x.index != y.index:
            return False
        elif isinstance(x, Function) and x.attrs != y.attrs:
            return False
    return True


def _same_global(x, y) -> bool:
    return (isinstance(x, GlobalVar) and isinstance(y, GlobalVar) and x.name_hint == y.name_hint
            and x.checked_type == y.checked_type)


def _bound_param(v, nodes) -> bool:
    return any(isinstance(n, Function) and v in n.params for n in nodes)

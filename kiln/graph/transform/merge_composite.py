"""MergeComposite: turn each match of a pattern (kiln.graph.pattern) into a call of a composite
function, so that a code generator can take a group of ops as one (conv2d + bias + relu as one
library call) and annotate_target can offer it whole.

A pattern table is a list of (name, pattern) or (name, pattern, check), tried in order (list
the longest patterns first). A match rooted at a call, for which check(call) is true, becomes

    Call(Function(params, body, {"Composite": name, "Primitive": 1}), inputs)

whose parameters stand for the expressions the pattern's wildcards matched (distinct ones once,
in the order the match reaches them); what is_constant matched stays inside the body. A match
whose interior node (a matched node other than its root and its inputs) is also used outside
the match is not merged: the value would have to be both inside the function and outside it.
Within one pattern, matches are taken producers first and never overlap; calls of functions
(earlier composites) are inputs, never entered.

Example:
    >>> table = [("dnnl.conv2d_relu", is_op("nn.relu")(is_op("nn.conv2d")(wildcard(), wildcard())))]
    >>> f = merge_composite(f, table)   # doctest: +SKIP
    # %0 = fn (%p0, %p1) /* Composite="dnnl.conv2d_relu", Primitive=1 */ {relu(conv2d(%p0, %p1))}
    # %0(%x, %w)
"""
from __future__ import annotations

from ..expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from ..pattern import Pattern, WildcardPattern, match
from ..visitor import ExprMutator, post_order
from .compiler_regions import inputs
from .pass_infra import FunctionPass


def _table(pattern_table) -> list:
    out = []
    for k, entry in enumerate(pattern_table):
        if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3):
            raise ValueError(f"pattern table entry {k} must be (name, pattern) or (name, "
                             f"pattern, check), got {entry!r:.80}")
        name, pattern, check = (*entry, None)[:3]
        if not isinstance(name, str) or not name:
            raise ValueError(f"pattern table entry {k}: the name must be a non-empty string, "
                             f"got {name!r}")
        if not isinstance(pattern, Pattern) or isinstance(pattern, WildcardPattern):
            raise ValueError(f"pattern table entry {k} ({name}): expected a pattern rooted at "
                             f"something other than a wildcard, got {pattern!r}")
        if check is not None and not callable(check):
            raise ValueError(f"pattern table entry {k} ({name}): check must be callable, got "
                             f"{check!r}")
        out.append((name, pattern, check))
    return out


def _split(env: dict, root) -> tuple | None:
    """(interior nodes in post order, inputs in the order the match reaches them) of a match,
    or None when one expression is both (a wildcard and another pattern matched it)."""
    wild = {e for p, e in env.items() if isinstance(p, WildcardPattern)}
    interior = {e for p, e in env.items() if not isinstance(p, WildcardPattern)
                and isinstance(e, Expr) and not isinstance(e, Function)}
    if interior & wild:
        return None
    body, ins, seen = [], [], set()
    stack = [(root, False)]
    while stack:       # post order of the interior, inputs met left to right, depth first
        e, expanded = stack.pop()
        if expanded:
            body.append(e)
            continue
        if e in seen:
            continue
        seen.add(e)
        if e in interior:
            stack.append((e, True))
            stack.extend((a, False) for a in reversed(inputs(e)))
        else:
            ins.append(e)
    return body, ins


def _groups(body, pattern, check) -> dict:
    """root call -> (interior nodes, inputs) for the matches of one pattern in body."""
    order = post_order(body, enter_functions=False)
    used_by: dict = {}
    for n in order:
        for a in inputs(n):
            used_by.setdefault(a, set()).add(n)
    claimed: set = set()
    groups: dict = {}
    for node in order:
        if not isinstance(node, Call) or node in claimed:
            continue
        env = match(pattern, node)
        split = None if env is None else _split(env, node)
        if split is None:
            continue
        interior, ins = split
        # Constants (is_constant) are copied into the body, whoever else uses them.
        owned = {n for n in interior if not isinstance(n, Constant)}
        if owned & claimed:
            continue
        if any(not used_by.get(n, set()) <= owned for n in owned if n is not node):
            continue
        if check is not None and not check(node):
            continue
        claimed |= owned
        groups[node] = (interior, ins)
    return groups


class _Composer(ExprMutator):
    enter_functions = False

    def __init__(self, groups, name):
        super().__init__()
        self.groups = groups
        self.name = name

    def rewrite_Call(self, call, op, args):
        group = self.groups.get(call)
        if group is None:
            return super().rewrite_Call(call, op, args)
        interior, ins = group
        params = [Var(f"p{k}", e.checked_type) for k, e in enumerate(ins)]
        inner = dict(zip(ins, params))
        for n in interior:
            inner[n] = n if isinstance(n, Constant) else _rebuild(n, [inner[a] for a in inputs(n)])
        fn = Function(params, inner[call], {"Composite": self.name, "Primitive": 1})
        return Call(fn, [self.memo[e] for e in ins], None, call.span)


def _rebuild(n, new_inputs):
    if isinstance(n, Call):
        return Call(n.op, new_inputs, n.attrs, n.span)
    if isinstance(n, Tuple):
        return Tuple(new_inputs, n.span)
    if isinstance(n, TupleGetItem):
        return TupleGetItem(new_inputs[0], n.index, n.span)
    raise TypeError(f"a composite pattern cannot hold a {type(n).__name__}")


def _merge(func: Function, table) -> Function:
    for name, pattern, check in table:
        groups = _groups(func.body, pattern, check)
        if groups:
            func = _Composer(groups, name).visit(func)
    return func


def merge_composite(mod_or_func, pattern_table):
    """Replace the matches of each (name, pattern[, check]) of pattern_table, in order, by calls
    of composite functions, in a function or in every function of a module but the external
    and primitive ones; see the module docstring.

    Example:
        >>> f = merge_composite(f, [("dnnl.conv2d_bias", is_op("nn.bias_add")(
        ...     is_op("nn.conv2d")(wildcard(), is_constant()), is_constant()))])  # doctest: +SKIP
    """
    return MergeComposite(pattern_table).apply(mod_or_func)


def MergeComposite(pattern_table):
    """The MergeComposite function pass (opt_level 0) for pattern_table.

    Example:
        >>> mod = MergeComposite(dnnl_patterns())(mod)   # doctest: +SKIP
    """
    table = _table(pattern_table)
    return FunctionPass(lambda func: _merge(func, table), opt_level=0, name="MergeComposite")

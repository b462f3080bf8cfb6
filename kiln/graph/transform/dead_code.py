"""DeadCodeElimination: drop what the result does not need.

A dataflow graph holds only what its output reaches, so the dead code left to remove is
    - `let v = value; body` where body never uses v          → body
    - `if (c) a else b` with a constant condition            → a or b
    - a tuple projected by index                             → the field itself
    - split(x) of which only some outputs are used           → one strided_slice per used output
"""
from __future__ import annotations

from ..expr import Constant, Function, Let, Tuple, TupleGetItem, Var, children
from ..op import call
from ..visitor import ExprMutator, post_order, users
from .pass_infra import FunctionPass
from .rewrite import is_op


def _use_counts(root) -> dict:
    """How often each variable is referenced (binding positions excluded)."""
    counts: dict = {}
    for n in post_order(root):
        binders = ()
        if isinstance(n, Let):
            binders = (n.var,)
        elif isinstance(n, Function):
            binders = n.params
        for c in children(n):
            if isinstance(c, Var) and not any(c is b for b in binders):
                counts[c] = counts.get(c, 0) + 1
    return counts


class _DCE(ExprMutator):
    def __init__(self, root):
        super().__init__()
        self.uses = _use_counts(root)
        self.users = users(root)
        self.changed = False

    def rewrite_Let(self, let, var_, value, body):
        if self.uses.get(let.var, 0) == 0:
            self.changed = True
            return body
        return super().rewrite_Let(let, var_, value, body)

    def rewrite_If(self, node, cond, t, f):
        if isinstance(cond, Constant) and cond.data.size == 1:
            self.changed = True
            return t if bool(cond.data.reshape(())) else f
        return super().rewrite_If(node, cond, t, f)

    def rewrite_TupleGetItem(self, g, value):
        if is_op(g.tuple_value, "split"):
            sliced = self._slice_of_split(g, value)
            if sliced is not None:
                self.changed = True
                return sliced
        if isinstance(value, Tuple):
            self.changed = True
            return value.fields[g.index]
        return super().rewrite_TupleGetItem(g, value)

    def _slice_of_split(self, g, split):
        consumers = self.users.get(g.tuple_value, [])
        if not consumers or not all(isinstance(u, TupleGetItem) for u in consumers):
            return None
        used = {u.index for u in consumers}
        fields = split.checked_type.fields
        if len(used) == len(fields):
            return None
        axis = split.attrs.axis % split.args[0].checked_type.ndim
        begin = sum(f.shape[axis] for f in fields[:g.index])
        end = begin + fields[g.index].shape[axis]
        if not all(isinstance(v, int) for v in (begin, end)):
            return None
        return call("strided_slice", split.args[0], begin=(begin,), end=(end,), strides=(1,),
                    axes=(axis,), span=split.span)


def dead_code_elimination(func):
    """Remove dead lets, constant ifs, projected tuples and unused split outputs from func.

    Example:
        >>> dead_code_elimination(Function([x], Let(v, call("exp", x), x)))  # doctest: +SKIP
        # fn (%x) { %x }
    """
    for _ in range(1000):
        dce = _DCE(func)
        new = dce.visit(func)
        if not dce.changed:
            return new
        func = new
    return func


def DeadCodeElimination():
    """The DeadCodeElimination function pass (opt_level 1).

    Example:
        >>> mod = DeadCodeElimination()(mod)  # doctest: +SKIP
    """
    return FunctionPass(dead_code_elimination, opt_level=1, name="DeadCodeElimination")

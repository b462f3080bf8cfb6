"""Rule-driven rewriting: passes are tables op name → rules, applied bottom-up by one driver.

A rule takes a Call (whose arguments are already rewritten) and returns a replacement or None.
After a rule fires, the rules of the replacement's op are tried again, so chains collapse
(reshape(reshape(reshape(x))) → reshape(x)) in one traversal.

Example:
    >>> drop_copy = {"copy": [lambda c: c.args[0]]}
    >>> y = rewrite(call("copy", call("exp", x)), drop_copy)  # doctest: +SKIP   # exp(x)
"""
from __future__ import annotations

from ..expr import Call, Constant, Expr
from ..op import Op
from ..visitor import ExprMutator

_MAX_FIRINGS_PER_NODE = 64


class RuleRewriter(ExprMutator):
    """ExprMutator applying `rules` (op name → list of rule callables) to every Call."""

    def __init__(self, rules: dict):
        super().__init__()
        self.rules = {k: tuple(v) for k, v in rules.items()}

    def rewrite_Call(self, call, op, args):
        node = super().rewrite_Call(call, op, args)
        for _ in range(_MAX_FIRINGS_PER_NODE):
            if not (isinstance(node, Call) and isinstance(node.op, Op)):
                break
            for rule in self.rules.get(node.op.name, ()):
                new = rule(node)
                if new is not None and new is not node:
                    if new.checked_type != node.checked_type:
                        raise TypeError(f"rewrite rule {getattr(rule, '__name__', rule)} changed "
                                        f"the type of {node.op.name} from {node.checked_type!r} "
                                        f"to {new.checked_type!r}")
                    node = new
                    break
            else:
                break
        return node


def rewrite(expr: Expr, rules: dict) -> Expr:
    """Apply rules (op name → [rule(call) → Expr | None]) bottom-up over expr.

    Example:
        >>> rewrite(f, {"nn.dropout": [lambda c: c.args[0]]})  # doctest: +SKIP
    """
    return RuleRewriter(rules).visit(expr)


# --- small matching helpers shared by the passes --------------------------------------------

def is_op(e, name: str) -> bool:
    """Whether e is a call of the registered operator `name`."""
    return isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == name


def is_const(e) -> bool:
    return isinstance(e, Constant)


def const_scalar(e):
    """The Python value of a constant all of whose elements are equal, else None."""
    if not isinstance(e, Constant) or e.data.size == 0:
        return None
    flat = e.data.reshape(-1)
    first = flat[0]
    if flat.size > 1 and not (flat == first).all():
        return None
    return first.item()

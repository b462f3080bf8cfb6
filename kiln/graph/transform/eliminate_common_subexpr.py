"""EliminateCommonSubexpr: compute each distinct value once.

Two calls with the same op, the same attributes and the same (already merged) arguments become
one node; so do equal tuples and tuple projections, and small constants with equal data (so
`add(x, 1.0)` written twice merges even when the frontend made two 1.0 constants).
"""
from __future__ import annotations

from ..expr import TupleGetItem
from ..visitor import ExprMutator
from .pass_infra import FunctionPass

# Constants up to this many bytes are merged by value; larger ones (weights) are distinct
# anyway, and hashing them would cost time on every compile.
_MERGE_CONSTANT_BYTES = 4096


class _CSE(ExprMutator):
    def __init__(self, skip=None):
        super().__init__()
        self.table: dict = {}
        self.skip = skip

    def _unique(self, key, node):
        return self.table.setdefault(key, node)

    def rewrite_Constant(self, c):
        if c.data.nbytes > _MERGE_CONSTANT_BYTES:
            return c
        return self._unique(("const", c.data.dtype.str, c.data.shape, c.data.tobytes()), c)

    def rewrite_Call(self, call, op, args):
        node = super().rewrite_Call(call, op, args)
        if self.skip is not None and self.skip(node):
            return node
        return self._unique(("call", id(node.op), node.attrs, tuple(id(a) for a in node.args)),
                            node)

    def rewrite_Tuple(self, t, fields):
        node = super().rewrite_Tuple(t, fields)
        return self._unique(("tuple", tuple(id(f) for f in node.fields)), node)

    def rewrite_TupleGetItem(self, g, value):
        node = super().rewrite_TupleGetItem(g, value)
        if not isinstance(node, TupleGetItem):
            return node
        return self._unique(("get", id(node.tuple_value), node.index), node)


def eliminate_common_subexpr(expr, skip=None):
    """Merge equal sub-expressions of expr; `skip(call)` → True keeps a call out of merging.

    Example:
        >>> eliminate_common_subexpr(call("add", call("exp", x), call("exp", x)))  # doctest: +SKIP
        # add(%0, %0) with %0 = exp(x)
    """
    # ids in the keys are stable because the table keeps every keyed node alive
    return _CSE(skip).visit(expr)


def EliminateCommonSubexpr(skip=None):
    """The EliminateCommonSubexpr function pass (opt_level 3); skip(call) exempts calls.

    Example:
        >>> mod = EliminateCommonSubexpr()(mod)  # doctest: +SKIP
    """
    return FunctionPass(lambda f: eliminate_common_subexpr(f, skip), opt_level=3,
                        name="EliminateCommonSubexpr")


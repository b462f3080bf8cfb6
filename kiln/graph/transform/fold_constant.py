"""FoldConstant: replace every sub-graph that depends only on constants by its value; and
bind_params / BindParams, which turn weights (parameters of main) into constants first.

Folding works in one sweep: calls of simple operators on constants are evaluated with numpy on
the spot (const_eval.py); every other constant-valued sub-graph is evaluated by
kiln.graph.evaluate, all of them batched into a single call, so a model costs one compilation
of its constant parts, not one per operator.

What is not folded: calls whose output would be much larger than their inputs (broadcast_to,
tile, a large full-of-constant): their output has more than FoldConstant.max_growth (4) times
the elements of all their inputs together and more than FoldConstant.always_fold_elements
(1024) elements. Such an op is cheap to recompute inside a fused kernel and costly to store.
Calls of fused functions are not folded either.
"""
from __future__ import annotations

import contextvars
import math

import numpy as np

from ..expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, children
from ..module import IRModule
from ..op import Op
from ..ty import TensorType, TupleType
from ..visitor import ExprMutator, post_order
from ...tir import dtype as dt
from ...tir.expr import PrimExpr
from .const_eval import numpy_eval
from .pass_infra import FunctionPass, ModulePass, PassContext, register_pass_config

register_pass_config("FoldConstant.max_growth", 4.0, float,
                     "do not fold a call whose output has more than this many times the "
                     "elements of its inputs (and more than always_fold_elements)")
register_pass_config("FoldConstant.always_fold_elements", 1024, int,
                     "outputs up to this many elements are folded whatever their growth")

# Set while FoldConstant evaluates, so that an evaluator compiling through the pass pipeline
# does not fold (and evaluate) recursively.
_FOLDING = contextvars.ContextVar("kiln_folding_constants", default=False)


class FoldError(RuntimeError):
    """Evaluating a constant sub-graph failed or gave a value of the wrong type."""


# ---------------------------------------------------------------------------------------------
# Binding parameters

def param_memory(value):
    """A param's value as numpy sees it, without copying: a CPU torch tensor's own memory.

    Example:
        >>> param_memory(torch.ones(2)).dtype   # doctest: +SKIP
        dtype('float32')
    """
    return value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) \
        else value


def _param_array(value, name, copy: bool = True) -> np.ndarray:
    """A bound param's value as a C-contiguous numpy array: a copy, or with copy=False the
    caller's own memory where it already is one (a CPU torch tensor's too).

    Example:
        >>> _param_array(torch.ones(2), "b", copy=False)   # doctest: +SKIP
        array([1., 1.], dtype=float32)
    """
    value = param_memory(value)
    if not isinstance(value, (np.ndarray, np.generic, int, float, bool)):
        raise TypeError(f"param {name!r}: expected an array, got {type(value).__name__}")
    return np.array(value, order="C", copy=True if copy else None)


def bind_params(func: Function, params: dict, copy: bool = True) -> Function:
    """Replace the parameters of func named like keys of params by Constants of those values.

    Names that func does not have are ignored; a value whose shape or dtype differs from the
    parameter's type is an error. The arrays are copied (the caller's stay writable), unless
    copy=False: then the constants are read-only views of the caller's memory, for a caller
    that copies what it keeps (kiln.compile: most weights are repacked by the passes, and
    copying a BERT's 440 MB first cost a second of page faults).

    Example:
        >>> f = Function([x, w], call("nn.dense", x, w))  # doctest: +SKIP
        >>> bind_params(f, {"w": np.ones((4, 8), "float32")}).params   # (%x,)
    """
    if not isinstance(func, Function):
        raise TypeError(f"bind_params takes a graph Function, got {type(func).__name__}")
    by_name: dict = {}
    for p in func.params:
        by_name.setdefault(p.name_hint, []).append(p)
    binding = {}
    for name, value in dict(params or {}).items():
        found = by_name.get(name)
        if not found:
            continue
        if len(found) > 1:
            raise ValueError(f"cannot bind param {name!r}: the function has {len(found)} "
                             f"parameters with that name")
        p = found[0]
        arr = _param_array(value, name, copy)
        ty = p.checked_type
        if not isinstance(ty, TensorType):
            raise TypeError(f"param {name!r} has type {ty!r}; only tensors can be bound")
        got = TensorType(arr.shape, dt.normalize(arr.dtype))
        if got != ty:
            raise ValueError(f"param {name!r}: the value is {got!r} but the function expects "
                             f"{ty!r}")
        binding[p] = Constant(arr, span=p.span or name)
    if not binding:
        return func
    mut = ExprMutator()
    mut.memo.update(binding)
    body = mut.visit(func.body)
    return Function([p for p in func.params if p not in binding], body, func.attrs, func.span)


def BindParams(params: dict, func_name: str = "main") -> ModulePass:
    """A pass binding params (name → array) into function func_name (see bind_params).

    Example:
        >>> mod = BindParams({"w": w})(mod)  # doctest: +SKIP
    """
    def bind(mod: IRModule):
        return mod.with_function(func_name, bind_params(mod[func_name], params))
    return ModulePass(bind, opt_level=0, name="BindParams")


# ---------------------------------------------------------------------------------------------
# Folding

def _elements(ty) -> int:
    if isinstance(ty, TupleType):
        return sum(_elements(f) for f in ty.fields)
    if isinstance(ty, TensorType) and ty.is_static():
        return math.prod(ty.shape)
    return -1


class _Folder(ExprMutator):
    """Folds with numpy where it can; marks the remaining constant-valued nodes."""

    def __init__(self, max_growth, always_fold):
        super().__init__()
        self.max_growth = max_growth
        self.always_fold = always_fold
        self.pending: set = set()       # constant-valued nodes numpy could not fold

    def _is_constant(self, e):
        return isinstance(e, Constant) or e in self.pending or _constant_tuple(e)

    def _grows_too_much(self, node):
        out = _elements(node.checked_type)
        inputs = sum(_elements(a.checked_type) for a in node.args)
        if out < 0 or inputs < 0:
            return True
        return out > self.always_fold and out > self.max_growth * max(inputs, 1)

    def rewrite_Call(self, call, op, args):
        node = super().rewrite_Call(call, op, args)
        if not isinstance(node.op, Op) or not all(self._is_constant(a) for a in node.args):
            return node
        if _reads_sizes(node):     # a symbolic size's value: known at run time only
            return node
        if self._grows_too_much(node):
            return node
        if all(isinstance(a, Constant) or _constant_tuple(a) for a in node.args):
            value = numpy_eval(node, [_value_of(a) for a in node.args])
            if value is not None:
                return _to_expr(value, node.span)
        self.pending.add(node)
        return node

    def rewrite_Tuple(self, t, fields):
        node = super().rewrite_Tuple(t, fields)
        if node.fields and all(self._is_constant(f) for f in node.fields) and \
                not _constant_tuple(node):
            self.pending.add(node)
        return node

    def rewrite_TupleGetItem(self, g, value):
        if isinstance(value, Tuple):
            return value.fields[g.index]
        node = super().rewrite_TupleGetItem(g, value)
        if isinstance(node, TupleGetItem) and node.tuple_value in self.pending:
            self.pending.add(node)
        return node


def _reads_sizes(call) -> bool:
    """Whether an attribute of `call` holds a symbolic size (size_value, a slice at one)."""
    def symbolic(v):
        return isinstance(v, PrimExpr) or isinstance(v, tuple) and any(symbolic(x) for x in v)
    return any(symbolic(v) for v in call.attrs.values())


def _constant_tuple(e) -> bool:
    return isinstance(e, Tuple) and all(isinstance(f, Constant) for f in e.fields)


def _value_of(e):
    if isinstance(e, Constant):
        return e.data
    return tuple(f.data for f in e.fields)


def _to_expr(value, span=None):
    if isinstance(value, tuple):
        return Tuple([_to_expr(v, span) for v in value])
    return Constant(value, span=span)


def _roots(root, folder) -> list:
    """Pending calls whose value is needed by something that stays (not itself pending)."""
    pending = folder.pending
    out, seen = [], set()

    def mark(n):
        stack = [n]
        while stack:
            e = stack.pop()
            if isinstance(e, Call):
                if e not in seen:
                    seen.add(e)
                    out.append(e)
            elif isinstance(e, Tuple):
                stack.extend(f for f in e.fields if f in pending)
            elif isinstance(e, TupleGetItem):
                stack.append(e.tuple_value)

    for n in post_order(root):
        if n in pending:
            continue
        for c in children(n):
            if c in pending:
                mark(c)
    if root in pending:
        mark(root)
    return out


def _kiln_evaluate():
    import kiln.graph
    return getattr(kiln.graph, "evaluate", None)   # written by the executor's author


def _evaluate_roots(roots, evaluate) -> dict:
    """Evaluate all roots in one call; tuple-valued roots are split into their fields."""
    flat, owners = [], []
    for r in roots:
        if isinstance(r.checked_type, TupleType):
            for k in range(len(r.checked_type.fields)):
                flat.append(TupleGetItem(r, k))
                owners.append((r, k))
        else:
            flat.append(r)
            owners.append((r, None))
    token = _FOLDING.set(True)
    try:
        values = evaluate(flat)
    finally:
        _FOLDING.reset(token)
    if not isinstance(values, (tuple, list)) or len(values) != len(flat):
        raise FoldError(f"kiln.graph.evaluate returned {type(values).__name__} for a tuple of "
                        f"{len(flat)} constant expressions")
    results: dict = {}
    for (root, k), expr, value in zip(owners, flat, values):
        arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        ty = expr.checked_type
        if arr.shape != tuple(ty.shape) or dt.normalize(arr.dtype) != ty.dtype:
            what = root.op.name if isinstance(root.op, Op) else "call"
            raise FoldError(f"folding {what}: evaluation gave {arr.shape} {arr.dtype}, expected "
                            f"{ty!r}")
        if k is None:
            results[root] = Constant(arr, span=root.span)
        else:
            results.setdefault(root, [None] * len(root.checked_type.fields))[k] = \
                Constant(arr, span=root.span)
    return {r: (Tuple(v) if isinstance(v, list) else v) for r, v in results.items()}


def fold_constant(expr: Expr, evaluate=None, ctx: PassContext | None = None) -> Expr:
    """Fold every constant-valued sub-graph of expr.

    evaluate([expr, ...]) → [array, ...] computes what numpy does not, all in one call
    (default: kiln.graph.evaluate; when it is not available those sub-graphs stay as they are).

    Example:
        >>> fold_constant(call("add", const(1.0), const(2.0)))  # doctest: +SKIP
        3.0
    """
    if _FOLDING.get():
        return expr
    ctx = ctx or PassContext.current()
    folder = _Folder(ctx.get_config("FoldConstant.max_growth"),
                     ctx.get_config("FoldConstant.always_fold_elements"))
    out = folder.visit(expr)
    if not folder.pending:
        return out
    evaluate = evaluate or _kiln_evaluate()
    if evaluate is None:
        return out
    roots = _roots(out, folder)
    if not roots:
        return out
    replace = ExprMutator()
    replace.memo.update(_evaluate_roots(roots, evaluate))
    return replace.visit(out)


def FoldConstant(evaluate=None) -> FunctionPass:
    """The FoldConstant function pass (opt_level 2); see fold_constant.

    Example:
        >>> mod = Sequential([BindParams(params), FoldConstant()])(mod)  # doctest: +SKIP
    """
    return FunctionPass(lambda f, mod, ctx: fold_constant(f, evaluate, ctx), opt_level=2,
                        name="FoldConstant")


"""AnnotateTarget: mark the calls an external code generator supports ("bring your own
codegen", step 1 of annotate -> merge -> partition).

A call of an operator whose "target.T" predicate (kiln.graph.op.register_op_attr) accepts it,
for the first T of `targets` that does, or a call of a composite function (merge_composite)
named "T.something" with T in `targets`, becomes

    compiler_end(op(compiler_begin(a1, T), compiler_begin(a2, T), ...), T)

Only tensors cross region boundaries: a tuple argument (concatenate's) has its fields marked
instead, so the tuple is built inside the region, and a call with a tuple result ends on each
field, Tuple(compiler_end(TupleGetItem(c, 0), T), ...), so its users' projections come out of
the region as tensors. Calls nobody supports stay as they are: kiln compiles them.

Example:
    >>> register_op_attr("nn.relu", "target.dnnl", lambda call: True)   # doctest: +SKIP
    >>> f = annotate_target(Function([x], call("nn.relu", x)), ["dnnl"])  # doctest: +SKIP
    # compiler_end(nn.relu(compiler_begin(%x, "dnnl")), "dnnl")
"""
from __future__ import annotations

from ..expr import Call, Function, Tuple, TupleGetItem
from ..op import Op
from ..ops.annotation import compiler_begin, compiler_end, is_annotation
from ..ty import TupleType
from ..visitor import ExprMutator, post_order
from .pass_infra import FunctionPass


def _targets(targets) -> tuple:
    if isinstance(targets, str):
        targets = [targets]
    out = tuple(targets)
    if not out or not all(isinstance(t, str) and t for t in out):
        raise ValueError(f"targets must be a compiler name or a list of them, got {targets!r}")
    return out


def supported_by(call, targets) -> str | None:
    """The first of `targets` that takes this call: its op's "target.T" predicate accepts it,
    or it calls a composite function named "T.something"; None if none does.

    Example:
        >>> supported_by(call("nn.relu", x), ["dnnl"])   # doctest: +SKIP
        'dnnl'
    """
    op = call.op
    if isinstance(op, Function):
        name = op.attrs.get("Composite")
        if not isinstance(name, str):
            return None
        return next((t for t in targets if name.startswith(t + ".")), None)
    if not isinstance(op, Op) or is_annotation(call):
        return None
    for t in targets:
        check = op.get_attr(f"target.{t}")
        if check is None:
            continue
        try:
            ok = check(call) if callable(check) else check
        except Exception as err:
            err.add_note(f"(in the target.{t} predicate of {op.name}"
                         f"{f' at {call.span}' if call.span else ''})")
            raise
        if ok:
            return t
    return None


class _Annotator(ExprMutator):
    enter_functions = False

    def __init__(self, targets):
        super().__init__()
        self.targets = targets

    def rewrite_Call(self, call, op, args):
        target = supported_by(call, self.targets)
        if target is None:
            return super().rewrite_Call(call, op, args)
        args = [_begin(a, target) for a in args]
        return _end(Call(op, args, call.attrs, call.span), target)


def _begin(value, target):
    # Tensors enter regions, never tuples: a tuple's fields enter one by one.
    if isinstance(value, Tuple):
        return Tuple([_begin(f, target) for f in value.fields], value.span)
    if isinstance(value.checked_type, TupleType):
        return Tuple([_begin(TupleGetItem(value, k), target)
                      for k in range(len(value.checked_type.fields))])
    return compiler_begin(value, target)


def _end(value, target):
    if isinstance(value.checked_type, TupleType):
        return Tuple([_end(TupleGetItem(value, k), target)
                      for k in range(len(value.checked_type.fields))])
    return compiler_end(value, target)


def _annotate(func: Function, targets) -> Function:
    for n in post_order(func.body, enter_functions=False):
        if is_annotation(n):
            raise ValueError(f"annotate_target: the function is annotated already "
                             f"({n.op.name}(compiler={n.attrs.compiler!r})); annotate the "
                             f"graph before merging and partitioning, once")
    return _Annotator(targets).visit(func)


def annotate_target(mod_or_func, targets):
    """Mark the calls that `targets` (a compiler name or a list, earlier ones preferred)
    support with compiler_begin / compiler_end, in a function or in every function of a
    module but the external and primitive ones; see the module docstring.

    Example:
        >>> annotated = annotate_target(mod, ["dnnl"])   # doctest: +SKIP
    """
    return AnnotateTarget(targets).apply(mod_or_func)


def AnnotateTarget(targets):
    """The AnnotateTarget function pass (opt_level 0) for `targets`.

    Example:
        >>> mod = AnnotateTarget(["dnnl"])(mod)   # doctest: +SKIP
    """
    targets = _targets(targets)
    return FunctionPass(lambda func: _annotate(func, targets), opt_level=0,
                        name="AnnotateTarget")

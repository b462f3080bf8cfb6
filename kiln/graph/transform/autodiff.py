"""Reverse-mode automatic differentiation of a graph function.

    grad_fn = gradient(fn)            # fn(x, w) -> y    becomes
                                      # grad_fn(x, w, grad_out) -> (y, (dx, dw))

Each operator's rule lives with the operator, in the one op registry, under the attribute
"gradient" (register_gradient): rule(call, grad) returns the gradient of each of the call's
inputs given `grad`, the gradient of its output (None for an input with none, such as integer
indices). The pass walks the function once, from the output back to the parameters, and sums
the gradients reaching each expression. The gradient of the output is a parameter (`grad_out`,
of the output's type), so the result serves a loss (pass ones) and a layer inside a larger model
alike (pass the gradient that reaches it). Nothing multiplies by ones or adds zeros: a gradient
that is not there is absent, not a tensor of zeros, until a parameter that none reaches needs
one. An operator on a path from a parameter to the output without a rule is an error naming
every such operator at once.
"""
from __future__ import annotations

import numpy as np

from ..expr import (Call, Constant, Function, If, Let, Tuple, TupleGetItem, Var, const, var)
from ..expr import children as children_of
from ..op import Op, call, register_op_attr
from ..ops.relations import normalize_axes
from ..ty import TensorType, TupleType
from ..visitor import post_order

__all__ = ["GRADIENT_ATTR", "MissingGradientError", "gradient", "register_gradient"]

GRADIENT_ATTR = "gradient"


class MissingGradientError(ValueError):
    """Operators on a path from a differentiated parameter to the output have no gradient
    rule; the message names all of them."""


def unsupported(c, what: str):
    """Raise for a call whose rule does not cover `what` (an attribute value, a layout): its
    gradient is missing, never silently zero.

    Example:
        >>> unsupported(conv_call, "data_layout NHWC")     # doctest: +SKIP
        Traceback (most recent call last):
        MissingGradientError: gradient: nn.conv2d has no gradient rule for data_layout NHWC
    """
    raise MissingGradientError(f"gradient: {c.op.name} has no gradient rule for {what}")


def register_gradient(op_name: str, rule=None, override: bool = False):
    """Register rule(call, grad) -> [input gradients] as `op_name`'s gradient (a decorator
    without `rule`).

    Example:
        >>> @register_gradient("negative")                  # doctest: +SKIP
        ... def _negative(c, g):
        ...     return [call("negative", g)]
    """
    if rule is None:
        return lambda fn: register_gradient(op_name, fn, override)
    return register_op_attr(op_name, GRADIENT_ATTR, rule, override)


def gradient(fn: Function, wrt=None, has_aux: bool = False) -> Function:
    """The function computing `fn`'s output and its gradients with respect to the parameters
    `wrt` (indices or names; default: every floating-point parameter), given the gradient of
    the output as a last parameter `grad_out`. Returns fn(*params, grad_out) ->
    (output, (gradient of each wrt parameter)).

    With `has_aux`, `fn` returns a tuple (output, *aux): only the output is differentiated; the
    auxiliary values (a batch norm's new running statistics) are returned beside it, as JAX's
    has_aux does: the result's first field is then the tuple (output, *aux).

    Example:
        >>> x, w = var("x", (4, 8)), var("w", (3, 8))
        >>> g = gradient(Function([x, w], call("nn.dense", x, w)))
        >>> [str(t.shape) for t in g.ret_type.fields[1].fields]
        ['(4, 8)', '(3, 8)']
    """
    output = fn.body
    if has_aux:
        if not isinstance(output, Tuple) or not output.fields:
            raise TypeError(f"gradient: with has_aux the function must return a tuple "
                            f"(output, *aux), it returns {output.checked_type!r}")
        output = output.fields[0]
    out_type = output.checked_type
    if not isinstance(out_type, TensorType) or not _is_float(out_type):
        raise TypeError(f"gradient: the function must return one floating-point tensor, it "
                        f"returns {out_type!r}")
    targets = _chosen(fn, wrt)
    order = post_order(output, enter_functions=False)
    reaches = _reaching(order, targets)
    grad_out = var("grad_out", out_type.shape, out_type.dtype)
    adjoint: dict = {output: grad_out}
    for node in reversed(order):
        if id(node) not in reaches or isinstance(node, (Var, Constant)):
            continue                         # no parameter we differentiate lies below
        g = adjoint.pop(node, None)
        if g is None:
            continue
        if isinstance(node, Call):
            grads = node.op.get_attr(GRADIENT_ATTR)(node, g)
            if len(grads) != len(node.args):
                raise ValueError(f"the gradient rule of {node.op.name} returned {len(grads)} "
                                 f"gradients for {len(node.args)} inputs")
            for arg, ga in zip(node.args, grads):
                _accumulate(adjoint, arg, ga, reaches)
        elif isinstance(node, Tuple):        # g: one gradient (or None) per field
            for field, gf in zip(node.fields, g):
                _accumulate(adjoint, field, gf, reaches)
        elif isinstance(node, TupleGetItem):
            parts = [None] * len(node.tuple_value.checked_type.fields)
            parts[node.index] = g
            _accumulate(adjoint, node.tuple_value, parts, reaches)
        else:
            raise TypeError(f"gradient: cannot differentiate through a {type(node).__name__}")
    grads = [adjoint.get(p) if adjoint.get(p) is not None else zeros(p.checked_type)
             for p in targets]
    return Function([*fn.params, grad_out], Tuple([fn.body, Tuple(grads)]))


def _chosen(fn: Function, wrt) -> list:
    if wrt is None:
        return [p for p in fn.params if _is_float(p.checked_type)]
    by_name = {p.name_hint: p for p in fn.params}
    chosen = []
    for w in wrt:
        p = fn.params[w] if isinstance(w, int) else by_name.get(w)
        if p is None:
            raise ValueError(f"gradient: the function has no parameter {w!r}; its parameters "
                             f"are {list(by_name)}")
        if not _is_float(p.checked_type):
            raise TypeError(f"gradient: parameter {p.name_hint} is {p.checked_type!r}: only "
                            f"floating-point tensors have gradients")
        chosen.append(p)
    return chosen


def _reaching(order: list, targets: list) -> set:
    """The ids of the expressions that depend on a target; each call among them must have a
    gradient rule, else one error names every operator that lacks one."""
    reaches = set(map(id, targets))
    missing = {}
    for node in order:
        if not any(id(c) in reaches for c in children_of(node)):
            continue
        if isinstance(node, (Let, If)):
            raise TypeError(f"gradient: cannot differentiate through a {type(node).__name__}")
        if _passes_nothing(node):       # a boolean or integer value (a comparison, an index)
            continue
        reaches.add(id(node))
        if isinstance(node, Call) and (not isinstance(node.op, Op)
                                       or node.op.get_attr(GRADIENT_ATTR) is None):
            name = getattr(node.op, "name", None) or type(node.op).__name__
            missing[name] = missing.get(name, 0) + 1
    if missing:
        listed = ", ".join(f"{name} ({n}x)" for name, n in sorted(missing.items()))
        raise MissingGradientError(f"gradient: no gradient rule for {listed}; register one with "
                                   f"kiln.graph.transform.register_gradient")
    return reaches


def _passes_nothing(node) -> bool:
    ty = node.checked_type
    types = ty.fields if isinstance(ty, TupleType) else (ty,)
    return not any(_is_float(t) for t in types)


def _accumulate(adjoint: dict, node, g, reaches: set) -> None:
    if g is None or id(node) not in reaches:
        return
    have = adjoint.get(node)
    if have is None:
        adjoint[node] = g
    elif isinstance(have, list):         # a tuple's gradients, field by field
        adjoint[node] = [b if a is None else a if b is None else call("add", a, b)
                         for a, b in zip(have, g)]
    else:
        adjoint[node] = call("add", have, g)


def _is_float(ty) -> bool:
    return isinstance(ty, TensorType) and np.dtype(ty.dtype).kind == "f"


def zeros(ty: TensorType):
    """A tensor of zeros of type `ty`."""
    return call("broadcast_to", const(0, ty.dtype), shape=tuple(ty.shape))


def is_zeros(e) -> bool:
    """Whether `e` is zeros()'s tensor: the gradient of a parameter no gradient reaches.

    Example:
        >>> is_zeros(zeros(TensorType((2,), "float32")))
        True
    """
    return (isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == "broadcast_to"
            and isinstance(e.args[0], Constant) and not np.any(e.args[0].data))


# ------------------------------------------------------------------------ helpers for rules
def shape_of(e) -> tuple:
    """The static shape of a tensor expression.

    Example:
        >>> shape_of(var("x", (2, 3)))
        (2, 3)
    """
    return tuple(int(d) for d in e.checked_type.shape)


def dtype_of(e) -> str:
    return e.checked_type.dtype


def scalar(value, like):
    """A constant of `like`'s dtype, to broadcast against it."""
    return const(value, dtype_of(like))


def unbroadcast(g, like):
    """`g` summed over the dimensions broadcasting added to `like`'s shape, then shaped as
    `like`: the gradient of an input that an elementwise op broadcast.

    Example:
        >>> shape_of(unbroadcast(var("g", (4, 3)), var("b", (3,))))
        (3,)
    """
    target, have = shape_of(like), shape_of(g)
    if have == target:
        return g
    lead = len(have) - len(target)
    axes = list(range(lead)) + [lead + k for k, d in enumerate(target)
                                if d == 1 and have[lead + k] != 1]
    if axes:
        g = call("sum", g, axis=tuple(axes), keepdims=True)
    return call("reshape", g, newshape=target)


def expand_reduced(g, like, axis, keepdims: bool):
    """The gradient of a reduction over `axis` of `like`, broadcast back to `like`'s shape."""
    shape = shape_of(like)
    axes = normalize_axes(axis, len(shape))
    if not keepdims:
        g = call("reshape", g, newshape=tuple(1 if k in axes else d
                                               for k, d in enumerate(shape)))
    return call("broadcast_to", g, shape=shape)


def mask(condition, like):
    """A 0/1 tensor of `like`'s dtype from a boolean `condition`."""
    return call("cast", condition, dtype=dtype_of(like))


from . import gradient_rules  # noqa: E402,F401  (registers the rules)

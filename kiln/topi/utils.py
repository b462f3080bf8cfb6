"""Helpers shared by topi computes and schedules: constant shapes, output lists, the producer
walk that inlines injective stages of a fused group, and the schedule parameters a tuning log
chose (tuned_values).

Example:
    >>> from kiln import te
    >>> A = te.placeholder((2, 3), name="A")
    >>> get_const_tuple(A.shape)
    (2, 3)
"""
from __future__ import annotations

import sys

from ..te import ComputeOp, PrimExpr, Tensor
from ..tir.expr import IntImm
from . import tags


class TopiError(ValueError):
    """A topi operator given bad attributes or shapes; the message names the operator."""


def as_tensor_list(outs) -> list:
    """A Tensor or a list/tuple of Tensors as a list (schedule functions accept both).

    Example:
        >>> as_tensor_list(A)  # doctest: +SKIP
        [Tensor(name=A, shape=(2, 3), dtype=float32)]
    """
    if isinstance(outs, Tensor):
        return [outs]
    if isinstance(outs, (list, tuple)) and outs and all(isinstance(t, Tensor) for t in outs):
        return list(outs)
    raise TopiError(f"expected a Tensor or a non-empty list of Tensors, got {outs!r}")


def _simplified(x):
    if isinstance(x, PrimExpr) and not isinstance(x, IntImm):
        from ..arith import simplify
        return simplify(x)
    return x


def get_const_int(x, what: str = "value") -> int:
    """An int from a Python int or a constant expression; TopiError otherwise.

    Example:
        >>> get_const_int(te.const(4))  # doctest: +SKIP
        4
    """
    x = _simplified(x)
    if isinstance(x, bool):
        raise TopiError(f"{what} must be an integer, got {x!r}")
    if isinstance(x, int):
        return x
    if isinstance(x, IntImm):
        return x.value
    if hasattr(x, "__index__") and not isinstance(x, PrimExpr):
        return int(x)
    raise TopiError(f"{what} must be a constant integer, got `{x}`")


def is_const_int(x) -> bool:
    """True when x is (or simplifies to) a constant integer.

    Example:
        >>> is_const_int(3)
        True
    """
    x = _simplified(x)
    return (isinstance(x, int) and not isinstance(x, bool)) or isinstance(x, IntImm)


def dim_equal(a, b) -> bool:
    """Two dimensions known equal: equal constants, or the same symbolic size (sizes are
    interned; == on them would build an expression).

    Example:
        >>> dim_equal(3, 3), dim_equal(te.var("n"), 3)   # doctest: +SKIP
        (True, False)
    """
    if is_const_int(a) and is_const_int(b):
        return get_const_int(a) == get_const_int(b)
    return a is b


def is_const_value(d, value: int) -> bool:
    """True when dimension d is the constant `value`.

    Example:
        >>> is_const_value(1, 1), is_const_value(te.var("n"), 1)   # doctest: +SKIP
        (True, False)
    """
    return is_const_int(d) and get_const_int(d) == value


def get_const_tuple(shape) -> tuple:
    """Each dimension as a Python int when constant, else left as the expression.

    Example:
        >>> get_const_tuple(te.placeholder((2, 3)).shape)  # doctest: +SKIP
        (2, 3)
    """
    out = []
    for s in shape:
        s = _simplified(s)
        out.append(s.value if isinstance(s, IntImm) else int(s) if isinstance(s, int) else s)
    return tuple(out)


def constant_factor(e) -> int:
    """The largest constant factor visible in a size: itself when constant, c for c * n (a
    symbolic batch of c tiles each), else 1; what a tile size may divide.

    Example:
        >>> constant_factor(196), constant_factor(te.var("n") * 196)  # doctest: +SKIP
        (196, 196)
    """
    from ..tir.expr import Mul
    e = _simplified(e)
    if isinstance(e, (int, IntImm)):
        return int(e.value if isinstance(e, IntImm) else e)
    if isinstance(e, Mul):
        return constant_factor(e.a) * constant_factor(e.b)
    return 1


def prod(values):
    """Product of ints or expressions (1 for an empty sequence).

    Example:
        >>> prod((2, 3, 4))
        24
    """
    result = 1
    for v in values:
        result = result * v
    return result


def traverse_inline(s, final_op, callback=None):
    """Walk the producers of `final_op`: inline every injective stage that is not an output of
    the schedule, and call `callback(op)` on every other compute (the anchor: conv2d, dense,
    pool...). The walk does not go past such an op: the anchor's own inputs (e.g. the padding
    stage of a conv2d) are the anchor schedule's business.

    Placeholders are skipped. Each op is visited once, so several outputs can share the walk
    by passing a list of ops.

    Example:
        >>> s = te.create_schedule(relu.op)  # doctest: +SKIP
        >>> traverse_inline(s, relu.op, lambda op: anchors.append(op))  # doctest: +SKIP
    """
    visited: set = set()
    roots = final_op if isinstance(final_op, (list, tuple)) else [final_op]
    todo = [r.op if isinstance(r, Tensor) else r for r in roots]
    order = []
    while todo:
        op = todo.pop()
        if op in visited or not isinstance(op, ComputeOp):
            continue
        visited.add(op)
        if tags.is_injective(op.tag):
            if not s[op].is_output:
                s[op].compute_inline()
            todo.extend(t.op for t in op.input_tensors())
        else:
            order.append(op)
    # Callbacks run after the walk so that a callback rewriting the dataflow (cache_write)
    # cannot disturb it.
    if callback is not None:
        for op in order:
            callback(op)
    return order


def find_anchor(outs, anchor_tags) -> ComputeOp | None:
    """The first compute reachable from `outs` through injective ops whose tag is one of
    `anchor_tags` (a string or a collection), or None.

    Example:
        >>> find_anchor([relu], "conv2d_nchw")  # doctest: +SKIP
    """
    if isinstance(anchor_tags, str):
        anchor_tags = (anchor_tags,)
    todo = [t.op for t in as_tensor_list(outs)]
    seen: set = set()
    while todo:
        op = todo.pop(0)
        if op in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(op)
        if op.tag in anchor_tags:
            return op
        if tags.is_injective(op.tag):
            todo.extend(t.op for t in op.input_tensors())
    return None


def public_functions(module) -> dict:
    """The public functions defined in `module` (not the ones it imports), by name; used to
    re-export operator modules into the topi namespaces.

    Example:
        >>> from kiln.topi import tags
        >>> sorted(public_functions(tags))
        ['is_broadcast', 'is_injective']
    """
    return {name: obj for name, obj in vars(module).items()
            if not name.startswith("_") and callable(obj) and not isinstance(obj, type)
            and getattr(obj, "__module__", None) == module.__name__}


def inline_injective_inputs(s, op, keep=()):
    """Inline, recursively, the injective computes that `op` reads (a reduction fuses its
    elementwise / broadcast / reshape inputs); stop at other anchors, outputs and `keep`.

    Example:
        >>> inline_injective_inputs(s, sum_op)  # doctest: +SKIP
    """
    todo, seen = list(op.input_tensors()), set()
    while todo:
        t = todo.pop()
        p = s[t].op
        if p in seen or not isinstance(p, ComputeOp) or p in keep or t.op in keep:
            continue
        seen.add(p)
        if tags.is_injective(p.tag) and not s[p].is_output:
            s[p].compute_inline()
            todo.extend(p.input_tensors())


def tuned_values(anchor_op):
    """The schedule parameters that an autotvm dispatch context chose for this anchor (see
    kiln.autotvm.templates), else None: then the schedule uses its heuristic. kiln.autotvm is
    consulted only once it is loaded: before that nobody can have entered a dispatch context
    (and topi stays importable alone).

    Example:
        >>> tuned_values(conv.op) is None     # no dispatch context  # doctest: +SKIP
        True
    """
    if "kiln.autotvm.task" not in sys.modules:
        return None
    from ..autotvm.templates import dispatched
    return dispatched(anchor_op)

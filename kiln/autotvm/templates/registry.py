"""Which template covers an anchor op of a fused group on the current target, and the config a
dispatch context answers for it.

Each template module registers, for a target key ("cpu", "gpu": Target.keys, as the op
registry keys schedules; the ".x86" templates serve every CPU target) and the topi tag of the
anchor it schedules, three things: the template's name, a function from the anchor op to the
task args (None when the template does not apply: symbolic shapes, mixed dtypes...),
and a function from a config to the schedule parameters the topi schedule takes. Task
extraction (extract.py) and the topi schedules (through `dispatched`) both go through this one
table, so the keys they compute agree. The current target's keys are tried most specific first.

Example:
    >>> register_anchor("conv2d_nchwc", "conv2d_nchwc.x86", conv2d_nchwc_args,
    ...                 conv_values)                                   # doctest: +SKIP
    >>> anchor_task_args(conv.op)                                     # doctest: +SKIP
    ('conv2d_nchwc.x86', [[1, 4, 56, 56, 16], ...])
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

from ...target import current_target
from ...tir import expr as E
from ...tir.functor import post_order_visit
from ..task import DispatchContext, _canon_args, _lookup, log_dispatch, task_key

__all__ = ["AnchorTemplate", "register_anchor", "anchor_task_args", "dispatched", "const_ints",
           "divisors", "loads"]


@dataclass(frozen=True)
class AnchorTemplate:
    name: str                       # the template's registered name
    args: Callable                  # anchor op -> task args, or None
    values: Callable                # config -> what the topi schedule takes


_ANCHORS: dict[tuple[str, str], AnchorTemplate] = {}      # (target key, tag) -> template


def register_anchor(tag: str, name: str, args: Callable, values: Callable,
                    target_key: str = "cpu") -> None:
    """Make template `name` the one for anchors tagged `tag` on targets with `target_key`
    among their keys (one template per key and tag).

    Example:
        >>> register_anchor("dense", "dense_pack.x86", dense_pack_args,
        ...                 lambda cfg: cfg["tile_y"].val)             # doctest: +SKIP
    """
    known = _ANCHORS.get((target_key, tag))
    if known is not None and known.name != name:
        raise ValueError(f"anchor tag {tag!r} already has template {known.name!r} for "
                         f"target key {target_key!r}")
    _ANCHORS[target_key, tag] = AnchorTemplate(name, args, values)


def _anchor_template(anchor_op) -> AnchorTemplate | None:
    """The template of an anchor op for the current target: its keys, most specific first."""
    tag = getattr(anchor_op, "tag", None)
    for key in current_target().keys:
        entry = _ANCHORS.get((key, tag))
        if entry is not None:
            return entry
    return None


def anchor_task_args(anchor_op) -> tuple | None:
    """(template name, args) of an anchor op that has a template for the current target,
    else None.

    Example:
        >>> anchor_task_args(conv.op)[0]  # doctest: +SKIP
        'conv2d_nchwc.x86'
    """
    entry = _anchor_template(anchor_op)
    if entry is None:
        return None
    args = entry.args(anchor_op)
    return None if args is None else (entry.name, args)


def dispatched(anchor_op):
    """The schedule parameters of the config that the current dispatch context answers for
    this anchor's task (under the current target), or None: no context, no template, or no
    answer — then the topi schedule uses its heuristic, and the context hears of the fallback.

    Example:
        >>> with ApplyFixedConfigs({key: cfg}):  # doctest: +SKIP
        ...     dispatched(conv.op)
        (1, 2, 7, True)
    """
    entry = _anchor_template(anchor_op)
    if entry is None:
        return None
    args = entry.args(anchor_op)
    if args is None:
        return None
    target = current_target()
    args = _canon_args(entry.name, args)
    key = task_key(entry.name, args, target)
    ctx = DispatchContext.current()
    record = ctx.query(key) if ctx is not None else None
    # logged with no context too: the kernel cache keys a kernel by what it was answered
    log_dispatch(key, _lookup(entry.name).module, record)
    if ctx is None:
        return None
    if record is not None:
        try:
            cfg = _lookup(entry.name).space(key, args, target).from_json(record)
        except ValueError as exc:
            warnings.warn(f"template '{entry.name}': the logged config for {key} does not fit "
                          f"its space ({exc}); using the default config", stacklevel=3)
        else:
            return entry.values(cfg)
    ctx.on_fallback(key)
    return None


# ------------------------------------------------------------------------------ helpers
def const_ints(values) -> list | None:
    """The values as Python ints, or None when one is not a constant.

    Example:
        >>> const_ints([1, E.IntImm("int32", 3)])  # doctest: +SKIP
        [1, 3]
    """
    out = []
    for v in values:
        if isinstance(v, E.IntImm):
            v = v.value
        if isinstance(v, bool) or not isinstance(v, int):
            return None
        out.append(int(v))
    return out


def divisors(n: int, limit: int) -> list:
    """Divisors of n up to limit, ascending.

    Example:
        >>> divisors(28, 16)
        [1, 2, 4, 7, 14]
    """
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def loads(expr) -> list:
    """Tensors read by a value expression (or a reduction's sources), in order of first read.

    Example:
        >>> [t.name for t in loads(dense_op.body[0])]  # doctest: +SKIP
        ['data', 'packed']
    """
    found: dict = {}

    def fn(n):
        if isinstance(n, E.ProducerLoad):
            found.setdefault(n.producer, None)

    if isinstance(expr, E.Reduce):
        for src in expr.source:
            post_order_visit(src, fn)
    else:
        post_order_visit(expr, fn)
    return list(found)

"""How a stage's loop variables derive from its root axes: split and fuse relations.

Domains flow down (root ranges → leaf ranges) and index values flow up (leaf loop variables →
root axis values); bound inference and lowering both use these two walks.
"""
from __future__ import annotations

from ..tir.expr import IterVar, Range
from ..tir.op import convert, equal, floordiv, floormod


class Split:
    __slots__ = ("parent", "outer", "inner", "factor", "nparts")

    def __init__(self, parent, outer, inner, factor=None, nparts=None):
        self.parent, self.outer, self.inner = parent, outer, inner
        self.factor, self.nparts = factor, nparts

    def __repr__(self):
        by = f"factor={self.factor}" if self.factor is not None else f"nparts={self.nparts}"
        return f"split({self.parent.var.name} -> {self.outer.var.name}, {self.inner.var.name}, {by})"


class Fuse:
    __slots__ = ("outer", "inner", "fused")

    def __init__(self, outer, inner, fused):
        self.outer, self.inner, self.fused = outer, inner, fused

    def __repr__(self):
        return f"fuse({self.outer.var.name}, {self.inner.var.name} -> {self.fused.var.name})"


def ceildiv(a, b):
    return floordiv(a + b - 1, b)


def pass_down_domain(relations, dom: dict, analyzer, keep_factor=frozenset()) -> None:
    """Fill dom[iv] for every derived iter var from the ranges of its parents.

    The inner loop of a split by a factor larger than its parent's extent is clipped to that
    extent, except for the inner loops in `keep_factor` (loops bound to GPU threads, whose
    extent is the number of threads launched: the split's guard masks the extra ones)."""
    for rel in relations:
        if isinstance(rel, Split):
            r = dom[rel.parent]
            zero = convert(0, r.extent.dtype)
            if rel.factor is not None:
                f = convert(rel.factor, r.extent.dtype)
                if rel.inner not in keep_factor and analyzer.can_prove(r.extent <= f):
                    outer, inner = convert(1, r.extent.dtype), r.extent
                else:
                    outer, inner = analyzer.simplify(ceildiv(r.extent, f)), f
            else:
                p = convert(rel.nparts, r.extent.dtype)
                outer, inner = p, analyzer.simplify(ceildiv(r.extent, p))
            dom[rel.outer] = Range(zero, outer)
            dom[rel.inner] = Range(zero, inner)
        else:
            ro, ri = dom[rel.outer], dom[rel.inner]
            dom[rel.fused] = Range(convert(0, ro.extent.dtype), analyzer.simplify(ro.extent * ri.extent))


def split_factor(rel: Split, dom: dict):
    return rel.factor if rel.factor is not None else dom[rel.inner].extent


def pass_up_index(relations, dom: dict, values: dict) -> None:
    """Given values of the leaf iter vars, fill in the value of every parent, up to the roots."""
    for rel in reversed(relations):
        if isinstance(rel, Split):
            if rel.outer in values and rel.inner in values:
                factor = convert(split_factor(rel, dom), values[rel.outer].dtype)
                values[rel.parent] = dom[rel.parent].min + values[rel.outer] * factor + values[rel.inner]
        else:
            if rel.fused in values:
                ext_i = dom[rel.inner].extent
                v = values[rel.fused]
                values[rel.outer] = dom[rel.outer].min + floordiv(v, ext_i)
                values[rel.inner] = dom[rel.inner].min + floormod(v, ext_i)


def inexact_splits(relations, dom: dict, analyzer) -> list:
    """Parents of splits that do not divide evenly: the loops can overshoot such a parent, and
    an overshoot may land inside its own parent's range (a duplicate iteration), so every one
    of them, not just the roots, needs a guard `value < min + extent`."""
    out = []
    for rel in relations:
        if isinstance(rel, Split):
            ext = dom[rel.parent].extent
            by = convert(rel.factor if rel.factor is not None else rel.nparts, ext.dtype)
            clipped = rel.factor is not None and analyzer.can_prove(ext <= by) and \
                analyzer.can_prove(dom[rel.inner].extent <= ext)
            exact = clipped or \
                analyzer.can_prove(equal(floormod(ext, by), convert(0, ext.dtype)))
            if not exact:
                out.append(rel.parent)
    return out


def is_reduce(iv: IterVar) -> bool:
    return iv.iter_type == "reduce"

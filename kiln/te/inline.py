"""Inlining: the bodies each stage computes once compute_inline'd stages are substituted in."""
from __future__ import annotations

from ..tir.expr import ProducerLoad
from ..tir.functor import IRMutator, post_order_visit, substitute
from .tensor import ComputeOp


class _Inliner(IRMutator):
    def __init__(self, sch, eff):
        super().__init__()
        self.sch, self.eff = sch, eff

    def visit_ProducerLoad(self, e):
        indices = tuple(self.visit(i) for i in e.indices)
        st = self.sch.stage_map[e.producer.op]
        if st.attach_type == "inline":
            body = self.eff[st][e.producer.value_index]
            return substitute(body, {iv.var: i for iv, i in zip(st.op.axis, indices)})
        if all(a is b for a, b in zip(indices, e.indices)):
            return e
        return ProducerLoad(e.producer, indices)


def effective_bodies(sch) -> dict:
    """Stage → its output expressions with every inlined producer substituted (topological)."""
    eff: dict = {}
    for st in sch.stages:
        if isinstance(st.op, ComputeOp):
            inliner = _Inliner(sch, eff)
            eff[st] = tuple(inliner.visit(b) for b in st.op.body)
    return eff


def accesses(bodies) -> list:
    """Every ProducerLoad in the given expressions."""
    found: list = []

    def fn(n):
        if isinstance(n, ProducerLoad):
            found.append(n)

    for b in bodies:
        post_order_visit(b, fn)
    return found


def effective_consumers(sch, eff) -> dict:
    """Stage → the non-inlined stages that read it once inlining is taken into account."""
    out = {st: [] for st in sch.stages}
    for st, bodies in eff.items():
        if st.attach_type == "inline":
            continue
        for load in accesses(bodies):
            producer = sch.stage_map[load.producer.op]
            if st not in out[producer]:
                out[producer].append(st)
    return out

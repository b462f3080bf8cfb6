"""MergeCompilerRegions: join neighbouring regions of one compiler, so that an external code
generator gets whole sub-graphs instead of one call at a time.

Two regions of the same compiler where one feeds the other directly (a compiler_end whose
value enters the other through a compiler_begin) become one: the end -> begin pairs between
them go. Not when that would make a cycle: if a path also leads from one to the other through
something outside both (a call kiln keeps, a region of another compiler), the merged region
would be both before and after that thing.

    A(T) -> B(kiln) -> C(T),  A -> C         A and C stay apart (C needs B, which needs A)
    A(T) -> B(T), A -> C(T), B -> D(T), C -> D     one region (the diamond)

Regions are joined greedily along the dataflow edges in topological order; each join is
checked for cycles in the graph of regions joined so far.

Example:
    >>> f = merge_compiler_regions(annotate_target(f, ["dnnl"]))   # doctest: +SKIP
"""
from __future__ import annotations

from ..expr import Constant, Function, Var
from ..ops.annotation import BEGIN, END, is_annotation
from ..visitor import ExprMutator, post_order
from .compiler_regions import find_regions, inputs
from .pass_infra import FunctionPass


class _Groups:
    """Union-find over the units of the graph (a region, or a node outside every region), with
    the dataflow edges between units, for the cycle test."""

    def __init__(self):
        self.parent: dict = {}
        self.succ: dict = {}        # group root -> units its edges lead to

    def add(self, unit):
        if unit not in self.parent:
            self.parent[unit] = unit
            self.succ[unit] = set()

    def find(self, u):
        while self.parent[u] is not u:
            self.parent[u] = self.parent[self.parent[u]]
            u = self.parent[u]
        return u

    def successors(self, g) -> set:
        out = {self.find(s) for s in self.succ[g]}
        out.discard(g)
        return out

    def other_path(self, a, b) -> bool:
        """Whether group b is reachable from group a other than by a direct edge."""
        stack = [s for s in self.successors(a) if s is not b]
        seen = set(stack)
        while stack:
            g = stack.pop()
            for s in self.successors(g):
                if s is b:
                    return True
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return False

    def union(self, a, b):
        self.parent[b] = a
        # a group keeps the edges leaving it, so successors() need not walk its members
        self.succ[a] = {s for s in self.succ[a] | self.succ.pop(b) if self.find(s) is not a}


def _merge_groups(body):
    """(region_of, groups) with the regions of body joined where no cycle results."""
    regions, region_of = find_regions(body)
    if len(regions) < 2:
        return region_of, None
    order = post_order(body, enter_functions=False)
    groups = _Groups()
    candidates = []            # (consumer region, producer region), in topological order
    for n in order:
        if isinstance(n, (Var, Constant, Function)) or is_annotation(n, BEGIN):
            continue
        unit = region_of.get(n, n)
        groups.add(unit)
        for a in inputs(n):
            begin = a if is_annotation(a, BEGIN) else None
            src = a.args[0] if begin is not None else a
            if isinstance(src, (Var, Constant, Function)):
                continue
            producer = region_of.get(src, src)
            if producer is unit:
                continue
            groups.add(producer)
            groups.succ[producer].add(unit)
            if (begin is not None and is_annotation(src, END) and unit is region_of.get(n)
                    and producer.compiler == unit.compiler == begin.attrs.compiler):
                candidates.append((unit, producer))
    for consumer, producer in candidates:
        a, b = groups.find(producer), groups.find(consumer)
        if a is not b and not groups.other_path(a, b):
            groups.union(a, b)
    return region_of, groups


class _Merger(ExprMutator):
    enter_functions = False

    def __init__(self, region_of, groups):
        super().__init__()
        self.region_of = region_of
        self.groups = groups

    def _absorbed(self, node, a) -> bool:
        """Whether input a of node is an end -> begin pair inside one merged region."""
        if not (is_annotation(a, BEGIN) and is_annotation(a.args[0], END)):
            return False
        mine, theirs = self.region_of.get(node), self.region_of.get(a.args[0])
        if mine is None or theirs is None:
            return False
        return self.groups.find(mine) is self.groups.find(theirs)

    def _inner(self, node, a, new):
        return self.memo[a.args[0].args[0]] if self._absorbed(node, a) else new

    def rewrite_Call(self, call, op, args):
        args = [self._inner(call, a, n) for a, n in zip(call.args, args)]
        return super().rewrite_Call(call, op, args)

    def rewrite_Tuple(self, t, fields):
        fields = [self._inner(t, a, n) for a, n in zip(t.fields, fields)]
        return super().rewrite_Tuple(t, fields)

    def rewrite_TupleGetItem(self, g, value):
        return super().rewrite_TupleGetItem(g, self._inner(g, g.tuple_value, value))


def _merge_function(func: Function) -> Function:
    region_of, groups = _merge_groups(func.body)
    if groups is None:
        return func
    return _Merger(region_of, groups).visit(func)


def merge_compiler_regions(mod_or_func):
    """Merge the neighbouring compiler regions of one compiler in a function (or in every
    function of a module but the external and primitive ones), unless merging would make a
    cycle; see the module docstring.

    Example:
        >>> # end(A) -> begin -> B, both "dnnl": B(A(begin(x))) in one region
        >>> merged = merge_compiler_regions(annotate_target(mod, "dnnl"))   # doctest: +SKIP
    """
    return MergeCompilerRegions().apply(mod_or_func)


def MergeCompilerRegions():
    """The MergeCompilerRegions function pass (opt_level 0).

    Example:
        >>> seq = Sequential([AnnotateTarget("dnnl"), MergeCompilerRegions()])  # doctest: +SKIP
        >>> mod = seq(mod)                                                      # doctest: +SKIP
    """
    return FunctionPass(_merge_function, opt_level=0, name="MergeCompilerRegions")

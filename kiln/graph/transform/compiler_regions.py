"""The compiler regions of an annotated graph, as merge_compiler_regions and partition_graph see
them.

A region is what lies between compiler_begin and compiler_end calls of one compiler: walking
back from each compiler_end through call arguments, tuple fields and tuple projections until
compiler_begin calls, the nodes met are the region's interior; two ends whose walks meet are
one region (one with several outputs). Constants met on the way are copied, not owned (a
constant shared by two regions does not join them); the begins are the region's inputs, the
ends its outputs. Calls of functions (composites) count as one node: they are not entered.

Example:
    >>> regions, region_of = find_regions(func.body)   # doctest: +SKIP
    >>> regions[0].compiler, len(regions[0].ends)      # doctest: +SKIP
    ('dnnl', 1)
"""
from __future__ import annotations

from ..expr import Call, Constant, Function, If, Let, Tuple, TupleGetItem, Var
from ..ops.annotation import BEGIN, END, is_annotation
from ..visitor import post_order


class RegionError(ValueError):
    """Annotations that do not delimit regions: a compiler_begin never closed by a
    compiler_end, a region reaching a variable without a compiler_begin, two compilers' marks
    around one node, regions that depend on each other in a cycle."""


class Region:
    """One region: its compiler, interior nodes, begins (inputs) and ends (outputs), each list
    in the graph's post order."""

    __slots__ = ("compiler", "nodes", "begins", "ends")

    def __init__(self, compiler: str):
        self.compiler = compiler
        self.nodes: list = []
        self.begins: list = []
        self.ends: list = []

    def __repr__(self):
        return (f"Region({self.compiler!r}, {len(self.nodes)} nodes, {len(self.begins)} "
                f"inputs, {len(self.ends)} outputs)")


def inputs(e) -> tuple:
    """The dataflow inputs of a node (a call's arguments, not its op: a composite function
    called is part of the call).

    Example:
        >>> inputs(call("add", x, y)) == (x, y)   # doctest: +SKIP
        True
    """
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    if isinstance(e, Let):
        return (e.value, e.body)
    if isinstance(e, If):
        return (e.cond, e.true_branch, e.false_branch)
    return ()


def describe(e) -> str:
    """A short name of a node for error messages.

    Example:
        >>> describe(var("x", (4,))), describe(call("exp", x))   # doctest: +SKIP
        ('%x', 'exp(...)')
    """
    if isinstance(e, Var):
        return f"%{e.name_hint}"
    if isinstance(e, Call):
        op = e.op
        name = op.attrs.get("Composite", "a function") if isinstance(op, Function) else repr(op)
        where = f" at {e.span}" if e.span else ""
        return f"{name}(...){where}"
    return type(e).__name__


def find_regions(body) -> tuple:
    """(regions in the post order of their first end, {node: region} for every interior node
    and end) of an annotated function body.

    Example:
        >>> regions, region_of = find_regions(func.body)   # doctest: +SKIP
    """
    order = post_order(body, enter_functions=False)
    position = {n: k for k, n in enumerate(order)}
    owner: dict = {}          # interior node or end -> the end whose walk reached it first
    parent: dict = {}         # union-find over ends
    begins_of: dict = {}      # end -> begins its walk reached

    def find(e):
        while parent[e] is not e:
            parent[e] = parent[parent[e]]
            e = parent[e]
        return e

    for end in order:
        if not is_annotation(end, END):
            continue
        compiler = end.attrs.compiler
        parent[end] = end
        owner[end] = end
        begins_of[end] = []
        stack = [end.args[0]]
        while stack:
            n = stack.pop()
            if is_annotation(n, BEGIN):
                if n.attrs.compiler != compiler:
                    raise RegionError(f"compiler_begin(compiler={n.attrs.compiler!r}) of "
                                      f"{describe(n.args[0])} is closed by compiler_end("
                                      f"compiler={compiler!r})")
                begins_of[end].append(n)
                continue
            if isinstance(n, Constant):
                continue
            if is_annotation(n, END):
                raise RegionError(f"a region of {compiler!r} holds the compiler_end("
                                  f"compiler={n.attrs.compiler!r}) of {describe(n.args[0])} "
                                  f"without a compiler_begin after it")
            if isinstance(n, Var):
                raise RegionError(f"a region of {compiler!r} uses {describe(n)} without a "
                                  f"compiler_begin")
            if isinstance(n, (Let, If, Function)):
                raise RegionError(f"a region of {compiler!r} cannot hold a {type(n).__name__}")
            seen = owner.get(n)
            if seen is not None:
                if seen.attrs.compiler != compiler:
                    raise RegionError(f"{describe(n)} is in regions of both "
                                      f"{seen.attrs.compiler!r} and {compiler!r}")
                a, b = find(seen), find(end)
                if a is not b:
                    parent[b] = a
                continue
            owner[n] = end
            stack.extend(inputs(n))

    regions: dict = {}
    for end in owner:                      # ends first: they were inserted in post order
        if owner[end] is end:
            root = find(end)
            if root not in regions:
                regions[root] = Region(end.attrs.compiler)
    region_of: dict = {}
    for n, end in owner.items():
        region = regions[find(end)]
        region_of[n] = region
        (region.ends if n is end else region.nodes).append(n)
    for end, begins in begins_of.items():
        regions[find(end)].begins.extend(begins)
    for region in regions.values():
        region.nodes.sort(key=position.__getitem__)
        region.ends.sort(key=position.__getitem__)
        region.begins = sorted(set(region.begins), key=position.__getitem__)
    ordered = sorted(regions.values(), key=lambda r: position[r.ends[0]])
    return ordered, region_of

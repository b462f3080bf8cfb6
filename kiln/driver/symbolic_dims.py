"""Symbolic dimensions of a graph module, as the execution graph records them.

A dimension of a graph type is an int or a kiln.tir expression over size variables; the
execution graph writes it as an int, the variable's name, or an expression in Python syntax
that kiln.runtime.symbolic evaluates at run time. Each variable's range is declared by the
"dim_ranges" attribute of main ({name: (low, high)}, high None for unbounded; the frontends set
it); a variable without one ranges over [1, unbounded).
"""
from __future__ import annotations

from ..arith.size_bounds import size_bounds
from ..graph.expr import Function
from ..graph.ty import TensorType, TupleType
from ..graph.visitor import post_order
from ..tir import expr as tx
from ..tir.size_text import size_text
from .stages import CompileError

# The size each unbounded dimension is planned at: storages shared by tensors of different
# symbolic sizes are chosen at these sizes, and sized at run time from the actual ones.
PLANNING_SIZE = 128


def dim_text(d):
    """A type's dimension as the execution graph writes it (kiln.tir.size_text).

    Example:
        >>> n = te.var("n"); dim_text(n * 12), dim_text(7)      # doctest: +SKIP
        ('(n * 12)', 7)
    """
    try:
        return size_text(d)
    except ValueError as err:
        raise CompileError(f"dimension: {err}") from None


def symbolic_vars(main: Function) -> dict:
    """{name: Var} of the size variables in the types of main's parameters and result; two
    different variables of one name are an error (the execution graph knows them by name).

    Example:
        >>> sorted(symbolic_vars(mod["main"]))      # doctest: +SKIP
        ['seq']
    """
    found: dict = {}

    def visit(ty):
        if isinstance(ty, TupleType):
            for f in ty.fields:
                visit(f)
        elif isinstance(ty, TensorType):
            for d in ty.shape:
                if not isinstance(d, int):
                    for v in size_vars(d):
                        if found.setdefault(v.name, v) is not v:
                            raise CompileError(f"two different symbolic dimensions are both "
                                               f"named {v.name!r}")
    for p in main.params:
        visit(p.checked_type)
    for node in post_order(main.body, enter_functions=False):
        if not isinstance(node, Function):
            visit(node.checked_type)
    return found


def size_vars(e):
    """The variables of a size expression (ints have none).

    Example:
        >>> [v.name for v in size_vars(te.var("n") * 12)]   # doctest: +SKIP
        ['n']
    """
    if isinstance(e, tx.Var):
        yield e
    elif isinstance(e, tx.BinaryOp):
        yield from size_vars(e.a)
        yield from size_vars(e.b)


def dim_ranges(main: Function, names) -> dict:
    """{name: [low, high]} for the symbolic dimensions `names`, from main's "dim_ranges"
    attribute (checked: integer bounds, 0 <= low <= high).

    Example:
        >>> dim_ranges(mod["main"], ["seq"])        # doctest: +SKIP
        {'seq': [1, 512]}
    """
    declared = dict(main.attrs.get("dim_ranges", {}) or {})
    unknown = sorted(set(declared) - set(names))
    if unknown:
        raise CompileError(f"dim_ranges names {unknown}, which no input or result of main has "
                           f"(its symbolic dimensions: {sorted(names)})")
    ranges = {}
    for name in sorted(names):
        # Without a range in main's attrs, the one its importer declared for the variable.
        given = declared.get(name, size_bounds(names[name]) or (1, None))
        try:
            low, high = given
        except (TypeError, ValueError):
            low = high = None
        if not _size(low) or low < 1 or (high is not None and (not _size(high) or high < low)):
            raise CompileError(f"dim_ranges[{name!r}] = {given!r} is not a range of sizes "
                               f"(integers 1 <= low <= high, high None for unbounded)")
        ranges[name] = [low, high]
    return ranges


def _size(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_bindable(main: Function, names: dict) -> None:
    """Every symbolic dimension must be some input's dimension by itself (a run binds it from
    that input's shape), else a CompileError naming it.

    Example:
        >>> check_bindable(mod["main"], symbolic_vars(mod["main"]))   # doctest: +SKIP
    """
    bound = set()
    for p in main.params:
        ty = p.checked_type
        for t in (ty.fields if isinstance(ty, TupleType) else [ty]):
            if isinstance(t, TensorType):
                bound.update(d.name for d in t.shape if isinstance(d, tx.Var))
    missing = sorted(set(names) - bound)
    if missing:
        raise CompileError(f"symbolic dimension(s) {missing} are no input's dimension by "
                           f"themselves, so no run could give their sizes")


def planning_sizes(ranges: dict) -> dict:
    """The binding the memory plan is chosen at: each range's high end, else PLANNING_SIZE
    within the range."""
    return {n: high if high is not None else max(low, PLANNING_SIZE)
            for n, (low, high) in ranges.items()}

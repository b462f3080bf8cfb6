"""A loop program (PrimFunc) as a DOT tree: the function at the root, then loops (variable,
range, kind), allocations, lets, conditions and stores, each statement under the statement
that encloses it, siblings left to right in program order.

Example:
    >>> from kiln.viz.loop_dot import loop_to_dot
    >>> print(loop_to_dot(kiln.lower(s, [A, B, C])))   # doctest: +SKIP
"""
from __future__ import annotations

from ..tir.buffer import Buffer
from ..tir.expr import IntImm
from ..tir.function import PrimFunc
from ..tir.printer import Printer       # one printer per picture: names match print(func)
from ..tir.stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For, IfThenElse,
                        LetStmt, SeqStmt, is_no_op)
from .dot import TOOLTIP_CHARS, DotWriter, shorten
from .render import register_drawer

# Fill colour of a loop by kind: the parallel and vector structure is what one looks for.
LOOP_COLORS = {"serial": "white", "parallel": "orange", "vectorized": "palegreen",
               "unrolled": "lightblue", "thread_binding": "plum"}

STYLES = {
    "func": {"shape": "box", "style": "filled", "fillcolor": "lightsteelblue"},
    "store": {"shape": "note", "style": "filled", "fillcolor": "lightyellow"},
    "allocate": {"shape": "cylinder", "style": "filled", "fillcolor": "khaki"},
    "let": {"shape": "box"},
    "attr": {"shape": "box", "style": "dashed"},
    "if": {"shape": "diamond", "style": "filled", "fillcolor": "mistyrose"},
    "more": {"shape": "plaintext"},
}

# A fully unrolled body can hold hundreds of stores; past this many, one "... N more" node.
MAX_CHILDREN = 32


class _LoopDrawer:
    def __init__(self, max_children: int):
        self.w = DotWriter("kiln loops", graph={"rankdir": "TB", "ordering": "out",
                                                "fontname": "Helvetica"},
                           node={"fontname": "Courier", "fontsize": "10"},
                           edge={"arrowsize": "0.6"})
        self.p = Printer()
        self.max_children = max_children

    def func(self, f: PrimFunc) -> str:
        params = [self.p.buffer_decl(b) if isinstance(b, Buffer)
                  else f"{self.p.name(b)}: {b.dtype}" for b in f.params]
        root = self.w.node(label="\n".join([f"def {f.name}", *params]), **STYLES["func"])
        self.stmt(f.body, root)
        return self.w.text()

    def stmt(self, s, parent: str, edge_label: str | None = None) -> None:
        handler = _STMT_DRAWERS.get(type(s))
        if handler is None:
            node = self.w.node(label=type(s).__name__)
            self.w.edge(parent, node, label=edge_label)
            return
        handler(self, s, parent, edge_label)

    def leaf(self, text: str, parent: str, edge_label, style: str) -> str:
        node = self.w.node(label=shorten(text), tooltip=shorten(text, TOOLTIP_CHARS),
                           **STYLES[style])
        self.w.edge(parent, node, label=edge_label)
        return node


def _seq(d: _LoopDrawer, s: SeqStmt, parent, edge_label) -> None:
    items = [x for x in s.seq if not is_no_op(x)]
    for x in items[:d.max_children]:
        d.stmt(x, parent, edge_label)
    if len(items) > d.max_children:
        d.leaf(f"... {len(items) - d.max_children} more statements", parent, edge_label, "more")


def _for(d: _LoopDrawer, s: For, parent, edge_label) -> None:
    p = d.p
    var, extent = p.name(s.loop_var), p.expr(s.extent)
    if isinstance(s.min, IntImm) and s.min.value == 0:
        line = f"for {var} in [0, {extent})"
    else:
        line = f"for {var} in [{p.expr(s.min)}, {p.expr(s.min)} + {extent})"
    detail = s.kind + (f" {s.thread_tag}" if s.thread_tag else "")
    detail += "".join(f"\n{k}={v}" for k, v in s.annotations)
    node = d.w.node(label=f"{line}\n{detail}", shape="box", style="filled",
                    fillcolor=LOOP_COLORS.get(s.kind, "white"))
    d.w.edge(parent, node, label=edge_label)
    d.stmt(s.body, node)


def _store(d: _LoopDrawer, s: BufferStore, parent, edge_label) -> None:
    p = d.p
    d.leaf(f"{p.name(s.buffer.data)}[{p.expr(s.index)}] = {p.expr(s.value)}", parent,
           edge_label, "store")


def _allocate(d: _LoopDrawer, s: Allocate, parent, edge_label) -> None:
    b = s.buffer
    scope = "" if b.scope == "global" else f" ({b.scope})"
    node = d.leaf(f"allocate {d.p.name(b.data)}: {b.dtype}[{d.p.expr(s.extent)}]{scope}",
                  parent, edge_label, "allocate")
    d.stmt(s.body, node)


def _let(d: _LoopDrawer, s: LetStmt, parent, edge_label) -> None:
    node = d.leaf(f"{d.p.name(s.var)} = {d.p.expr(s.value)}", parent, edge_label, "let")
    d.stmt(s.body, node)


def _attr(d: _LoopDrawer, s: AttrStmt, parent, edge_label) -> None:
    value = s.value if isinstance(s.value, (int, str)) else d.p.expr(s.value)
    node = d.leaf(f"attr {s.key} = {value}", parent, edge_label, "attr")
    d.stmt(s.body, node)


def _assert(d: _LoopDrawer, s: AssertStmt, parent, edge_label) -> None:
    node = d.leaf(f"assert {d.p.expr(s.condition)}", parent, edge_label, "let")
    d.stmt(s.body, node)


def _if(d: _LoopDrawer, s: IfThenElse, parent, edge_label) -> None:
    node = d.leaf(f"if {d.p.expr(s.condition)}", parent, edge_label, "if")
    d.stmt(s.then_case, node, "then")
    if s.else_case is not None:
        d.stmt(s.else_case, node, "else")


def _evaluate(d: _LoopDrawer, s: Evaluate, parent, edge_label) -> None:
    if not is_no_op(s):
        d.leaf(d.p.expr(s.value), parent, edge_label, "let")


_STMT_DRAWERS = {SeqStmt: _seq, For: _for, BufferStore: _store, Allocate: _allocate,
                 LetStmt: _let, AttrStmt: _attr, AssertStmt: _assert, IfThenElse: _if,
                 Evaluate: _evaluate}


def loop_to_dot(func: PrimFunc, max_children: int = MAX_CHILDREN) -> str:
    """DOT text of a loop program: one node per loop (variable, range, kind; coloured by
    kind), store, allocation, let, attribute and condition. A sequence longer than
    `max_children` shows its first statements and one "... N more" node.

    Example:
        >>> text = loop_to_dot(kiln.lower(s, [A, B, C], name="matmul"))   # doctest: +SKIP
    """
    if not isinstance(func, PrimFunc):
        raise TypeError(f"loop_to_dot draws a PrimFunc (kiln.lower's result), got "
                        f"{type(func).__name__}")
    return _LoopDrawer(max_children).func(func)


@register_drawer(PrimFunc)
def _draw_loops(func, stage=None, max_children: int = MAX_CHILDREN) -> str:
    if stage is not None:
        raise ValueError(f"stage={stage!r} applies to graph modules; a PrimFunc is already a "
                         f"loop program")
    return loop_to_dot(func, max_children)

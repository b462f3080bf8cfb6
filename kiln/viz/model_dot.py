"""A compiled model's execution graph as DOT: inputs, constants, one node per kernel call
(calls of the same kernel function share a colour), views, outputs. Works the same for a
model from kiln.compile and one loaded from a .so, since both carry the execution graph.

Example:
    >>> from kiln.viz.model_dot import model_to_dot
    >>> print(model_to_dot(kiln.runtime.load_module("model.so")))   # doctest: +SKIP
"""
from __future__ import annotations

from ..runtime.describe import tensor_text
from ..runtime.model import ModelLibrary
from .dot import DotWriter
from .graph_dot import STYLES, group_color
from .render import register_drawer


def _entry_type(entry: dict) -> str:
    return tensor_text(entry["dtype"], entry["shape"])


class _ModelDrawer:
    def __init__(self, graph: dict):
        self.g = graph
        self.w = DotWriter("kiln model", graph={"rankdir": "TB", "fontname": "Helvetica"},
                           node={"fontname": "Helvetica", "fontsize": "10"},
                           edge={"arrowsize": "0.6"})
        self.source: dict = {}          # entry -> the DOT node that produces it
        self.colors: dict = {}          # kernel function -> its colour index

    def entry_source(self, e: int) -> str:
        node = self.source.get(e)
        if node is None:
            entry = self.g["entries"][e]
            base = entry.get("view_of")
            if base is None:
                raise ValueError(f"execution graph entry {e} is read before anything writes it")
            # a reshape that became no kernel: the same bytes, another shape
            node = self.w.node(label=f"view\n{_entry_type(entry)}", **STYLES["tuple"])
            self.w.edge(self.entry_source(base), node)
            self.source[e] = node
        return node

    def draw(self) -> str:
        g = self.g
        for i in g["inputs"]:
            self.source[i["entry"]] = self.w.node(
                label=f"{i['name']}\n{_entry_type(g['entries'][i['entry']])}", **STYLES["input"])
        for c in g["constants"]:
            self.source[c["entry"]] = self.w.node(
                label=_entry_type(g["entries"][c["entry"]]), tooltip=c["name"], **STYLES["const"])
        for k in g["kernels"]:
            self.kernel(k)
        for n, e in enumerate(g["outputs"]):
            out = self.w.node(label=f"output{n}\n{_entry_type(g['entries'][e])}",
                              **STYLES["output"])
            self.w.edge(self.entry_source(e), out)
        return self.w.text()

    def kernel(self, k: dict) -> None:
        index = self.colors.setdefault(k["func"], len(self.colors))
        fill, border = group_color(index)
        outs = ", ".join(_entry_type(self.g["entries"][e]) for e in k["outputs"])
        node = self.w.node(label=f"{k['func']}\n{outs}", shape="box", style="rounded,filled",
                           fillcolor=fill, color=border)
        for e in k["inputs"]:
            self.w.edge(self.entry_source(e), node)
        for e in k["outputs"]:
            self.source[e] = node


def model_to_dot(lib) -> str:
    """DOT text of a compiled model's execution graph (kiln.compile's result or a loaded
    library).

    Example:
        >>> text = model_to_dot(kiln.compile(mod, params=params))   # doctest: +SKIP
    """
    graph = getattr(lib, "graph", None)
    if not isinstance(graph, dict) or "kernels" not in graph:
        raise TypeError(f"model_to_dot draws a compiled model (kiln.compile or "
                        f"kiln.runtime.load_module), got {type(lib).__name__}")
    return _ModelDrawer(graph).draw()


@register_drawer(ModelLibrary)
def _draw_model(lib, stage=None) -> str:
    if stage is not None:
        raise ValueError(f"stage={stage!r} applies to graph modules; a compiled model has one "
                         f"execution graph (draw the module with stage= for its graph IR)")
    return model_to_dot(lib)

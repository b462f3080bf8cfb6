"""Writing Graphviz DOT text: quoting, attribute lists, clusters.

Every attribute value is written as a quoted string, so labels may hold any text (quotes,
backslashes, braces, newlines). Edges are kept apart and written last, at the top level: DOT
puts a node into every subgraph that mentions it, so an edge written inside a cluster would
pull its outside end into that cluster.
"""
from __future__ import annotations

from contextlib import contextmanager

# How much of an IR expression a label shows; the full text goes into the tooltip.
LABEL_CHARS = 64
TOOLTIP_CHARS = 1000


def quote(text) -> str:
    """`text` as a DOT quoted string: backslashes and quotes escaped, newlines as \\n.

    Example:
        >>> print(quote('say "hi"\\nback\\\\slash'))
        "say \\"hi\\"\\nback\\\\slash"
    """
    s = str(text).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + s.replace("\r\n", "\n").replace("\n", "\\n") + '"'


def attr_list(attrs: dict) -> str:
    """A DOT attribute list, `[k="v", ...]` (empty text when there are no attributes).

    Example:
        >>> attr_list({"label": "add", "shape": "box"})
        '[label="add", shape="box"]'
    """
    items = [f"{k}={quote(v)}" for k, v in attrs.items() if v is not None]
    return f"[{', '.join(items)}]" if items else ""


def shorten(text: str, limit: int = LABEL_CHARS) -> str:
    """`text` cut to `limit` characters, ending in "..." when cut.

    Example:
        >>> shorten("abcdefgh", 6)
        'abc...'
    """
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _statement(head: str, attrs: dict) -> str:
    listed = attr_list(attrs)
    return f"{head} {listed};" if listed else f"{head};"


class DotWriter:
    """Builds one digraph: nodes and clusters in order, edges at the end.

    Example:
        >>> w = DotWriter("g")
        >>> a, b = w.node(label="x"), w.node(label="relu")
        >>> w.edge(a, b)
        >>> "n0 -> n1" in w.text()
        True
    """

    def __init__(self, name: str = "kiln", graph: dict | None = None, node: dict | None = None,
                 edge: dict | None = None):
        self.name = name
        self.lines: list[str] = []
        self.edges: list[str] = []
        self.depth = 1
        self.count = 0
        self.clusters = 0
        for kind, attrs in (("graph", graph), ("node", node), ("edge", edge)):
            if attrs:
                self._emit(f"{kind} {attr_list(attrs)};")

    def _emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def node(self, **attrs) -> str:
        """Add a node; returns its id (n0, n1, ...)."""
        node_id = f"n{self.count}"
        self.count += 1
        self._emit(_statement(node_id, attrs))
        return node_id

    def edge(self, tail: str, head: str, **attrs) -> None:
        self.edges.append("  " + _statement(f"{tail} -> {head}", attrs))

    @contextmanager
    def cluster(self, **attrs):
        """Nodes added inside the `with` block are drawn inside one box (a DOT cluster)."""
        self._emit(f"subgraph cluster_{self.clusters} {{")
        self.clusters += 1
        self.depth += 1
        for k, v in attrs.items():
            if v is not None:
                self._emit(f"{k}={quote(v)};")
        try:
            yield
        finally:
            self.depth -= 1
            self._emit("}")

    def text(self) -> str:
        """The whole digraph as DOT text."""
        return "\n".join([f"digraph {quote(self.name)} {{", *self.lines, *self.edges, "}"]) + "\n"

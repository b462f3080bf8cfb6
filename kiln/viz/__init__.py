"""kiln.viz: pictures of kiln's IRs — the graph IR (fused kernels as coloured clusters), loop
programs and compiled models' execution graphs — as DOT text, or SVG / PNG through Graphviz.

Example:
    >>> import kiln.viz
    >>> kiln.viz.draw(mod, "resnet_fused.svg", stage="fused", params=params)   # doctest: +SKIP
    >>> print(kiln.viz.to_dot(kiln.lower(s, [A, B, C])))                        # doctest: +SKIP
"""
from .graph_dot import graph_to_dot
from .loop_dot import loop_to_dot
from .model_dot import model_to_dot
from .render import (FORMATS, GraphvizNotFoundError, VizError, draw, register_drawer, render,
                     to_dot)

__all__ = ["FORMATS", "GraphvizNotFoundError", "VizError", "draw", "graph_to_dot",
           "loop_to_dot", "model_to_dot", "register_drawer", "render", "to_dot"]

"""The graph IR as a DOT picture: one node per operator call (op name, output shape and dtype),
inputs and outputs, small boxes for constants and weights, and every fused primitive function
drawn as one coloured cluster holding its operators.

Example:
    >>> from kiln.viz.graph_dot import graph_to_dot
    >>> print(graph_to_dot(fused_mod)[:9])   # doctest: +SKIP
    digraph "
"""
from __future__ import annotations

from ..graph.expr import Call, Constant, Function, Tuple, TupleGetItem, Var
from ..graph.module import IRModule
from ..graph.op import Op
from ..graph.ty import TensorType, TupleType
from ..graph.visitor import post_order
from ..runtime.describe import tensor_text
from .dot import TOOLTIP_CHARS, DotWriter, shorten
from .render import register_drawer

# Node looks by role; constants and weights stay small so the operators stand out.
STYLES = {
    "input": {"shape": "ellipse", "style": "filled", "fillcolor": "lightblue"},
    "weight": {"shape": "box", "style": "filled", "fillcolor": "gray92", "fontsize": "8",
               "height": "0.2", "margin": "0.03,0.01"},
    "const": {"shape": "box", "style": "filled", "fillcolor": "gray92", "fontsize": "8",
              "height": "0.2", "margin": "0.03,0.01"},
    "op": {"shape": "box", "style": "rounded,filled", "fillcolor": "white"},
    "tuple": {"shape": "box", "style": "filled", "fillcolor": "gray96", "fontsize": "9"},
    "output": {"shape": "ellipse", "style": "filled", "fillcolor": "palegreen"},
    "other": {"shape": "diamond"},
}

# Successive golden-ratio steps around the hue circle keep any number of groups apart.
_GOLDEN = 0.618033988749895


def group_color(k: int) -> tuple[str, str]:
    """(fill, border) colours of fused group k, as Graphviz "H S V" strings; all distinct.

    Example:
        >>> group_color(0)
        ('0.120 0.250 1.000', '0.120 0.700 0.700')
    """
    hue = (0.12 + k * _GOLDEN) % 1.0
    return f"{hue:.3f} 0.250 1.000", f"{hue:.3f} 0.700 0.700"


def type_text(ty) -> str:
    """A type as a short label: a tensor as kiln.runtime.describe.tensor_text writes it
    (float32[1x3x224x224]); (a, b) for tuples.

    Example:
        >>> type_text(TensorType((1, 8), "float32"))
        'float32[1x8]'
    """
    if isinstance(ty, TensorType):
        return tensor_text(ty.dtype, ty.shape)
    if isinstance(ty, TupleType):
        return "(" + ", ".join(type_text(f) for f in ty.fields) + ")"
    return repr(ty)


def _constant_label(c: Constant) -> str:
    if c.data.size == 1:
        return f"{c.data.reshape(()).item()!r} ({c.checked_type.dtype})"
    return f"const {type_text(c.checked_type)}"


class _GraphDrawer:
    """Draws one function. `env` maps a node (by identity) to the DOT id holding its value;
    a fused function's parameters map to the ids of the call's arguments."""

    def __init__(self, weights=frozenset()):
        self.w = DotWriter("kiln graph", graph={"rankdir": "TB", "fontname": "Helvetica"},
                           node={"fontname": "Helvetica", "fontsize": "10"},
                           edge={"arrowsize": "0.6"})
        self.weights = set(weights)
        self.groups = 0

    def function(self, fn: Function) -> str:
        env: dict = {}
        for p in fn.params:
            ty = type_text(p.checked_type)
            if p.name_hint in self.weights:
                env[p] = self.w.node(label=p.name_hint, tooltip=ty, **STYLES["weight"])
            else:
                env[p] = self.w.node(label=f"{p.name_hint}\n{ty}", tooltip=ty, **STYLES["input"])
        result = self.body(fn.body, env)
        out = self.w.node(label=f"output\n{type_text(fn.body.checked_type)}", **STYLES["output"])
        self.w.edge(result, out)
        return self.w.text()

    def body(self, root, env: dict) -> str:
        for node in post_order(root, enter_functions=False):
            if node not in env and not isinstance(node, Function):
                env[node] = _NODE_DRAWERS.get(type(node), _draw_other)(self, node, env)
        return env[root]

    def edges_from(self, args, env, head: str) -> None:
        for a in args:
            self.w.edge(env[a], head)


def _draw_var(d: _GraphDrawer, v: Var, env) -> str:
    # a free variable (the parameters of the function being drawn are in env already)
    return d.w.node(label=f"{v.name_hint}\n{type_text(v.checked_type)}", **STYLES["input"])


def _draw_constant(d: _GraphDrawer, c: Constant, env) -> str:
    return d.w.node(label=_constant_label(c), **STYLES["const"])


def _draw_call(d: _GraphDrawer, call: Call, env) -> str:
    if isinstance(call.op, Function):
        return _draw_fused_call(d, call, env)
    # a call of a partitioned region (a GlobalVar) is drawn as one node named @region
    name = call.op.name if isinstance(call.op, Op) else repr(call.op)
    attrs = repr(call.attrs) if len(call.attrs) else name
    node = d.w.node(label=f"{name}\n{type_text(call.checked_type)}",
                    tooltip=shorten(attrs, TOOLTIP_CHARS), **STYLES["op"])
    d.edges_from(call.args, env, node)
    return node


def _draw_fused_call(d: _GraphDrawer, call: Call, env) -> str:
    fn = call.op
    name = fn.attrs.get("Name") or ("primitive" if fn.attrs.get("Primitive") == 1 else "fn")
    fill, border = group_color(d.groups)
    d.groups += 1
    inner = {p: env[a] for p, a in zip(fn.params, call.args)}
    with d.w.cluster(label=name, tooltip=name, style="filled,rounded", fillcolor=fill,
                     color=border, fontsize="9"):
        return d.body(fn.body, inner)


def _draw_tuple(d: _GraphDrawer, t: Tuple, env) -> str:
    node = d.w.node(label=f"tuple\n{type_text(t.checked_type)}", **STYLES["tuple"])
    d.edges_from(t.fields, env, node)
    return node


def _draw_get_item(d: _GraphDrawer, g: TupleGetItem, env) -> str:
    node = d.w.node(label=f".{g.index}\n{type_text(g.checked_type)}", **STYLES["tuple"])
    d.w.edge(env[g.tuple_value], node)
    return node


def _draw_other(d: _GraphDrawer, node, env) -> str:
    # Let / If: rare at this level; drawn plainly with edges from their operands
    from ..graph.expr import children
    out = d.w.node(label=f"{type(node).__name__}\n{type_text(node.checked_type)}",
                   **STYLES["other"])
    d.edges_from([c for c in children(node) if c in env], env, out)
    return out


_NODE_DRAWERS = {Var: _draw_var, Constant: _draw_constant, Call: _draw_call, Tuple: _draw_tuple,
                 TupleGetItem: _draw_get_item}


def graph_to_dot(obj, params=None, function: str = "main") -> str:
    """DOT text of a graph function (an IRModule's `function`, or a Function). Parameters
    named in `params` are drawn as small weight boxes; fused primitive functions are clusters,
    one colour per group.

    Example:
        >>> text = graph_to_dot(mod, params=params)   # doctest: +SKIP
        >>> text.count("subgraph cluster_")            # one per fused kernel call
    """
    fn = obj[function] if isinstance(obj, IRModule) else obj
    if not isinstance(fn, Function):
        raise TypeError(f"graph_to_dot draws an IRModule or a graph Function, got "
                        f"{type(obj).__name__}")
    return _GraphDrawer(weights=params or ()).function(fn)


@register_drawer(IRModule, Function)
def _draw_graph(obj, stage=None, params=None, target="llvm", opt_level=None) -> str:
    if stage is not None:
        from ..driver.stages import module_at_stage
        obj = module_at_stage(obj, stage, target=target, params=params, opt_level=opt_level)
    return graph_to_dot(obj, params=params)

"""kiln.viz: the DOT text of graphs (fused kernels as clusters), loop programs and compiled
models, parsed back and checked against the IR it was drawn from; rendering through Graphviz
(skipped where `dot` is absent) and the error that says how to get it; the reprs of compiled
models, executors and modules.
"""
import re
import shutil

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.driver.stages import module_at_stage
from kiln.graph import Call, Function, IRModule, call, post_order, var
from kiln.graph.transform.fuse_ops import is_primitive
from kiln.runtime import GraphExecutor
from kiln.runtime.describe import byte_text
from kiln.viz import (GraphvizNotFoundError, VizError, draw, graph_to_dot, loop_to_dot,
                      model_to_dot, render)
from kiln.viz.dot import quote

HAVE_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAVE_DOT, reason="Graphviz's dot is not installed "
                                                    "(apt-get install graphviz)")

# ------------------------------------------------------------------ reading DOT back
_NODE = re.compile(r"^(n\d+) \[(.*)\];$")
_EDGE = re.compile(r"^(n\d+) -> (n\d+)")
_ATTR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _unescape(value):
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_dot(text):
    """(nodes {id: {"attrs", "cluster"}}, clusters [{"attrs", "nodes"}], edges [(a, b)])."""
    nodes, clusters, edges, open_clusters = {}, [], [], []
    for line in text.splitlines()[1:-1]:
        s = line.strip()
        if s.startswith("subgraph cluster_"):
            clusters.append({"attrs": {}, "nodes": []})
            open_clusters.append(len(clusters) - 1)
        elif s == "}":
            open_clusters.pop()
        elif m := _EDGE.match(s):
            edges.append((m.group(1), m.group(2)))
        elif m := _NODE.match(s):
            inside = open_clusters[-1] if open_clusters else None
            nodes[m.group(1)] = {"attrs": {k: _unescape(v) for k, v in _ATTR.findall(m.group(2))},
                                 "cluster": inside}
            if inside is not None:
                clusters[inside]["nodes"].append(m.group(1))
        elif open_clusters and (m := _ATTR.fullmatch(s.rstrip(";"))):
            clusters[open_clusters[-1]]["attrs"][m.group(1)] = _unescape(m.group(2))
    assert not open_clusters, "unbalanced braces"
    for a, b in edges:
        assert a in nodes and b in nodes, f"edge {a} -> {b} names an undeclared node"
    return nodes, clusters, edges


def label(node):
    return node["attrs"]["label"]


def is_op(node):
    return node["attrs"].get("style") == "rounded,filled"


def tensor_text(ty):
    return f"{ty.dtype}[{'x'.join(str(d) for d in ty.shape)}]"


# ------------------------------------------------------------------ a small model
@pytest.fixture(scope="module")
def small_resnet():
    from kiln.frontend import from_pytorch
    from kiln.testing.models import example_input, resnet18
    model = resnet18(width=8, layers=(1, 1, 1, 1), num_classes=10)
    inputs = example_input(model, image_size=32)
    mod, params = from_pytorch(model, inputs)
    return mod, params


@pytest.fixture(scope="module")
def small_lib(small_resnet):
    mod, params = small_resnet
    return kiln.compile(mod, target="llvm", params=params)


def test_fused_graph_has_one_cluster_per_kernel_call_with_its_ops_inside(small_resnet):
    mod, params = small_resnet
    fused = module_at_stage(mod, "fused", params=params)
    nodes, clusters, _ = parse_dot(graph_to_dot(fused))
    calls = [n for n in post_order(fused["main"].body, enter_functions=False)
             if isinstance(n, Call) and is_primitive(n.op)]
    assert len(calls) > 10 and len(clusters) == len(calls)
    for cluster, fused_call in zip(clusters, calls):          # drawn in dataflow order
        fn = fused_call.op
        assert cluster["attrs"]["label"] == fn.attrs["Name"]
        want = [(c.op.name, tensor_text(c.checked_type)) for c in post_order(fn.body)
                if isinstance(c, Call)]
        got = [tuple(label(nodes[n]).split("\n")) for n in cluster["nodes"]
               if is_op(nodes[n])]
        assert got == want
    # every operator is inside a kernel, and every kernel has its own colour
    assert all(node["cluster"] is not None for node in nodes.values() if is_op(node))
    fills = [c["attrs"]["fillcolor"] for c in clusters]
    assert len(set(fills)) == len(fills)


def test_imported_graph_draws_each_call_and_small_weights(small_resnet):
    mod, params = small_resnet
    nodes, clusters, edges = parse_dot(graph_to_dot(mod, params=params))
    main = mod["main"]
    calls = [n for n in post_order(main.body) if isinstance(n, Call)]
    ops = [label(n).split("\n") for n in nodes.values() if is_op(n)]
    assert clusters == [] and len(ops) == len(calls)
    assert sorted(o[0] for o in ops) == sorted(c.op.name for c in calls)
    assert ["nn.conv2d", "float32[1x8x16x16]"] in ops            # the stem: stride 2, width 8
    by_label = {label(n): n for n in nodes.values()}
    (image,) = [p for p in main.params if p.name_hint not in params]
    assert f"{image.name_hint}\n{tensor_text(image.checked_type)}" in by_label
    weights = [n for n in nodes.values() if label(n) in params]
    assert len(weights) == len(params) and all(w["attrs"]["fontsize"] == "8" for w in weights)
    outputs = [k for k, n in nodes.items() if label(n).startswith("output\n")]
    assert len(outputs) == 1 and any(b == outputs[0] for _, b in edges)


def test_labels_are_escaped():
    name = 'in"put\\x {a}\nb'
    x = var(name, (2, 3))
    text = graph_to_dot(Function([x], call("nn.relu", x)))
    nodes, _, edges = parse_dot(text)
    assert f"{name}\nfloat32[2x3]" in [label(n) for n in nodes.values()]
    assert len(edges) == 2
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    if HAVE_DOT:
        assert "<svg" in render(text, "svg")


# ------------------------------------------------------------------ loop programs
def _stmts(s):
    """Every statement under s, by structure (a hash-consed node may occur twice)."""
    yield s
    for field in s._fields:
        value = getattr(s, field)
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, tir.Stmt):
                yield from _stmts(v)


def _staged_program():
    # 128 x 128: enough work that the parallel loop stays parallel (serial_small_parallel)
    A = te.placeholder((128, 128), name="A")
    B = te.compute((128, 128), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((128, 128), lambda i, j: B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[B].compute_at(s[C], yo)
    s[C].parallel(xo)
    return kiln.lower(s, [A, C], name="staged")


def test_loop_dot_has_a_node_per_loop_store_and_allocation():
    func = _staged_program()
    stmts = list(_stmts(func.body))
    loops = [s for s in stmts if isinstance(s, tir.For)]
    allocs = [s for s in stmts if isinstance(s, tir.Allocate)]
    stores = [s for s in stmts if isinstance(s, tir.BufferStore)]
    nodes, _, edges = parse_dot(loop_to_dot(func))
    labels = [label(n) for n in nodes.values()]
    for_labels = [t for t in labels if t.startswith("for ")]
    assert len(loops) >= 4 and len(for_labels) == len(loops)
    assert sorted(t.split("\n")[1] for t in for_labels) == sorted(f.kind for f in loops)
    assert any("parallel" in t for t in for_labels)
    assert len(allocs) == 1 and [t for t in labels if t.startswith("allocate ")] == \
        ["allocate B: float32[64]"]
    assert sum(n["attrs"].get("shape") == "note" for n in nodes.values()) == len(stores)
    assert labels[0].startswith("def staged\n")
    assert len(edges) == len(nodes) - 1          # a tree under the function


def test_loop_dot_caps_long_sequences():
    b = tir.Buffer.make("A", "float32", (8,))
    body = tir.SeqStmt.flatten(*[tir.BufferStore(b, tir.const(1.0, "float32"), tir.const(k))
                                 for k in range(5)])
    nodes, _, _ = parse_dot(loop_to_dot(tir.PrimFunc("f", [b], body), max_children=2))
    labels = [label(n) for n in nodes.values()]
    assert labels[1:] == ["A[0] = 1.0f", "A[1] = 1.0f", "... 3 more statements"]


# ------------------------------------------------------------------ compiled models
def test_model_dot_draws_each_kernel_call(small_lib):
    g = small_lib.graph
    nodes, _, edges = parse_dot(model_to_dot(small_lib))
    kernel_labels = [label(n).split("\n")[0] for n in nodes.values()
                     if n["attrs"].get("style") == "rounded,filled"]
    assert kernel_labels == [k["func"] for k in g["kernels"]]
    outputs = [k for k, n in nodes.items() if label(n).startswith("output0\n")]
    assert label(nodes[outputs[0]]) == "output0\nfloat32[1x10]"
    assert len(edges) >= len(g["kernels"])


# ------------------------------------------------------------------ draw and render
def test_draw_dispatches_on_the_object(small_resnet, small_lib, tmp_path):
    mod, params = small_resnet
    assert draw(mod, format="dot") == graph_to_dot(mod)
    fused_text = draw(mod, format="dot", stage="fused", params=params)
    assert "subgraph cluster_" in fused_text
    func = _staged_program()
    assert draw(func, format="dot") == loop_to_dot(func)
    assert draw(small_lib, format="dot") == model_to_dot(small_lib)
    written = draw(func, tmp_path / "loops.dot")              # format from the suffix
    assert (tmp_path / "loops.dot").read_text() == written
    with pytest.raises(TypeError, match=r"cannot draw a object; it draws Function, IRModule, "
                                        r"ModelLibrary, PrimFunc"):
        draw(object())
    with pytest.raises(ValueError, match=r"unknown drawing format 'jpeg'; formats: dot, svg, "
                                         r"png"):
        draw(mod, format="jpeg")
    with pytest.raises(ValueError, match=r"unknown stage 'bogus'; the stages are imported, "
                                         r"optimized, fused"):
        draw(mod, format="dot", stage="bogus")
    with pytest.raises(ValueError, match=r"stage='fused' applies to graph modules"):
        draw(func, format="dot", stage="fused")


def test_missing_dot_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))             # an empty directory: no `dot`
    x = var("x", (2,))
    mod = IRModule.from_expr(Function([x], call("nn.relu", x)))
    assert draw(mod, format="dot").startswith("digraph")   # DOT text needs no Graphviz
    with pytest.raises(GraphvizNotFoundError,
                       match=r"rendering png needs Graphviz's `dot` program, which is not on "
                             r"PATH: install it with `apt-get install graphviz`"):
        draw(mod, tmp_path / "g.png")
    assert not (tmp_path / "g.png").exists()


@needs_dot
def test_png_and_svg_render(small_resnet, tmp_path):
    mod, params = small_resnet
    svg = draw(mod, stage="fused", params=params)
    fused = module_at_stage(mod, "fused", params=params)
    kernels = sum(isinstance(n, Call) and is_primitive(n.op)
                  for n in post_order(fused["main"].body, enter_functions=False))
    assert svg.lstrip().startswith("<?xml") and svg.count('class="cluster"') == kernels
    png = draw(_staged_program(), tmp_path / "loops.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "loops.png").read_bytes() == png


@needs_dot
def test_dot_rejecting_the_text_is_a_viz_error():
    with pytest.raises(VizError, match=r"dot -Tsvg failed"):
        render("digraph { a -> }", "svg")


# ------------------------------------------------------------------ reprs
def test_reprs_say_what_they_hold(small_lib):
    g = small_lib.graph
    (inp,) = g["inputs"]
    nbytes = sum(a.nbytes for a in small_lib.params.values())
    text = repr(small_lib)
    assert text.startswith("<kiln.CompiledModel target='llvm")
    assert f"{len(small_lib.prim_funcs)} kernels, {len(g['kernels'])} kernel calls" in text
    assert f"inputs ({inp['name']}: float32[1x3x32x32])" in text
    assert "outputs (float32[1x10])" in text
    assert f"{len(small_lib.params)} params, {byte_text(nbytes)}>" in text

    ex = GraphExecutor(small_lib)
    assert f"inputs ({inp['name']}: float32[1x3x32x32] (not set))" in repr(ex)
    ex.set_input(inp["name"], np.zeros((1, 3, 32, 32), "float32"))
    text = repr(ex)
    assert text.startswith(f"<kiln.runtime.GraphExecutor: {len(g['kernels'])} kernel calls; "
                           f"inputs ({inp['name']}: float32[1x3x32x32]); "
                           f"outputs (float32[1x10]); {len(g['constants'])} constants; ")
    assert f"{byte_text(ex.memory_plan_bytes)} planned for intermediates>" in text

    names = small_lib.module.function_names()
    text = repr(small_lib.module)
    assert text.startswith(f"<kiln.runtime.Module llvm: {len(names)} functions "
                           f"({', '.join(names[:4])}, ... {len(names) - 4} more); entry ")

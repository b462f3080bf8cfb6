"""Split a gradient function (autodiff.gradient's) into a forward, which also returns what the
backward needs, and a backward, which takes that and the output's gradient.

What the forward saves is a minimum cut: every forward value the backward reads must either be
saved or be recomputed in the backward from saved values and the parameters (which the backward
takes anyway, as PyTorch keeps a module's parameters). Saving a value costs its bytes; a value
of an expensive op (a convolution, a matrix product, a reduction: OpPattern OUT_ELEMWISE_FUSABLE,
COMM_REDUCE, OPAQUE) must not be recomputed, so it lies on the forward's side of the cut. So
cheap elementwise chains (a bias add and ReLU after a matmul, a GELU) are recomputed from the
matmul's saved output instead of being saved themselves, as in PyTorch's min-cut partitioner.
The cut is computed with networkx's maximum flow.

    split = split_gradient(gradient(fn))
    split.forward      # fn(*params) -> (output, *aux, *saved)
    split.backward     # fn([output,] *saved, *params it reads, grad_out) -> (gradients...)
    split.saved_bytes  # what the forward keeps for the backward
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..expr import Call, Constant, Function, Tuple, Var, children, var
from ..op import Op, OpPattern
from ..ty import TensorType
from ..visitor import ExprMutator, post_order

__all__ = ["SplitGradient", "split_gradient"]

# Ops whose outputs are saved rather than recomputed in the backward.
EXPENSIVE = (OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.COMM_REDUCE, OpPattern.OPAQUE)
_SOURCE, _SINK = "source", "sink"


@dataclass(frozen=True)
class SplitGradient:
    """The forward and backward functions of a gradient, and what the forward saves.

    The forward returns (output, *aux, *saved values); `num_aux` counts the auxiliary outputs
    (gradient(..., has_aux=True)). The backward takes (*saved, *the forward's parameters at
    `backward_params`, grad_out): only the parameters it reads, so nothing else is kept alive
    for it. `saved` are the types of the backward's saved values: the output first when
    `saves_output` (the forward returns it once, as its output), then what the forward returns
    after the output and aux; `saved_bytes` the size of the latter; `read_bytes` the size of
    every forward value the backward reads (what saving them all, recomputing nothing, would
    keep); `recomputed` the ops of the forward calls the backward computes again.

    Example:
        >>> split = split_gradient(gradient(fn))                    # doctest: +SKIP
        >>> split.saved_bytes                                       # doctest: +SKIP
        4096
    """

    forward: Function
    backward: Function
    saved: tuple
    saved_bytes: int
    read_bytes: int
    recomputed: tuple
    saves_output: bool = False
    num_aux: int = 0
    backward_params: tuple = ()


def split_gradient(grad_fn: Function, expensive=EXPENSIVE) -> SplitGradient:
    """Split `grad_fn` (fn(*params, grad_out) -> (output, (gradients...)), as
    kiln.graph.transform.gradient makes it, with or without has_aux) into forward and backward
    functions (see the module docstring). `expensive`: the op patterns whose outputs are never
    recomputed.

    Example:
        >>> x, w = var("x", (4, 8)), var("w", (3, 8))
        >>> g = gradient(Function([x, w], call("nn.relu", call("nn.dense", x, w))))
        >>> split_gradient(g).saved_bytes          # ReLU's mask (4 x 3 bools), not any floats
        12
    """
    *params, grad_out = grad_fn.params
    body = grad_fn.body
    if not (isinstance(body, Tuple) and len(body.fields) == 2
            and isinstance(body.fields[1], Tuple)):
        raise ValueError("split_gradient takes a function returning (output, (gradients...)), "
                         "as kiln.graph.transform.gradient makes it")
    returned, grads = body.fields
    output, *aux = returned.fields if isinstance(returned, Tuple) else (returned,)
    order = post_order(body, enter_functions=False)
    backward = _depending_on(order, grad_out)
    # parameters and constants are in both functions: no cut crosses them
    forward = [n for n in order if id(n) not in backward and not isinstance(n, (Var, Constant))
               and n is not body and n is not grads
               and (n is not returned or returned is output)]
    needed = {id(c): c for n in order if id(n) in backward and n is not body
              for c in children(n) if id(c) not in backward
              and not isinstance(c, (Var, Constant))}
    cut = _cut(forward, needed, output, set(expensive))
    # a free edge of the cut (the output's) may be cut without the backward reading it
    read, visited = _reads(grads, cut)
    # The output, when the backward reads it, is passed as itself (it is returned anyway):
    # the backward's first saved value, not a second copy in the forward's results.
    saved = sorted((s for s in cut if id(s) in read), key=lambda s: s is not output)
    recomputed = [n for n in forward if id(n) in visited and id(n) not in read]
    saved_vars = [var(f"saved{k}", s.checked_type.shape, s.checked_type.dtype)
                  for k, s in enumerate(saved)]
    saves_output = bool(saved) and saved[0] is output
    substitute = ExprMutator()
    substitute.memo.update(zip(saved, saved_vars))
    backward_body = substitute.visit(grads)
    used = {id(n) for n in post_order(backward_body, enter_functions=False)}
    kept = tuple(k for k, p in enumerate(params) if id(p) in used)
    return SplitGradient(Function(params, Tuple([output, *aux, *saved[saves_output:]])),
                         Function([*saved_vars, *(params[k] for k in kept), grad_out],
                                  backward_body),
                         tuple(s.checked_type for s in saved),
                         sum(_bytes(s) for s in saved[saves_output:]),
                         sum(_bytes(n) for n in needed.values()),
                         tuple(n.op.name for n in recomputed if isinstance(n, Call)),
                         saves_output, len(aux), kept)


def _reads(root, cut: list) -> tuple:
    """(ids of the cut values the backward reads, ids of every value it computes or reads):
    what is reachable from `root` without passing through a cut value."""
    stop = {id(c) for c in cut}
    seen, stack, found = set(), [root], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if id(n) in stop:
            found.add(id(n))
            continue
        stack.extend(children(n))
    return found, seen


def _depending_on(order: list, root) -> set:
    depends = {id(root)}
    for n in order:
        if any(id(c) in depends for c in children(n)):
            depends.add(id(n))
    return depends


def _bytes(e) -> int:
    ty = e.checked_type
    return int(np.prod(ty.shape, dtype=np.int64)) * np.dtype(ty.dtype).itemsize


def _cut(forward: list, needed: dict, output, expensive: set) -> list:
    """The forward values to save: a minimum-bytes cut between the parameters (and the
    expensive ops, which the forward must compute) and the values the backward reads."""
    graph = nx.DiGraph()
    index = {id(n): k for k, n in enumerate(forward)}

    def node_in(n):
        return ("in", index[id(n)])

    def node_out(n):
        return ("out", index[id(n)])
    for n in forward:
        tensor = isinstance(n.checked_type, TensorType)
        # the output is returned anyway: saving it is free
        cost = 0 if n is output else _bytes(n) if tensor else None
        if cost is None:                     # a tuple cannot be saved whole: cut its fields
            graph.add_edge(node_in(n), node_out(n))          # (no capacity: infinite)
        else:
            graph.add_edge(node_in(n), node_out(n), capacity=cost)
        # (a value computed from the parameters alone needs no edge: the backward has them)
        for c in children(n):
            if id(c) in index:
                graph.add_edge(node_out(c), node_in(n))
        if isinstance(n, Call) and (not isinstance(n.op, Op) or n.op.pattern in expensive):
            graph.add_edge(_SOURCE, node_in(n))              # never recomputed
        if id(n) in needed:
            graph.add_edge(node_out(n), _SINK)
    if _SINK not in graph or _SOURCE not in graph:     # nothing read, or all recomputable
        return []
    _, (reachable, _) = nx.minimum_cut(graph, _SOURCE, _SINK)
    return [n for n in forward if node_in(n) in reachable and node_out(n) not in reachable]

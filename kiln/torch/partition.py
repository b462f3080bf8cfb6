"""A dynamo graph that kiln can take only in part: kiln compiles its supported ATen ops, and
PyTorch runs the others (the torch fallback of the BYOC issue).

The graph is traced to ATen ops as kiln's PyTorch importer sees them (torch.export, then the
importer's decompositions). torch's own CapabilityBasedPartitioner groups the ops kiln
translates into submodules, without creating cycles. Each of these parts is compiled like a
whole graph (KilnGraph: weights bound as constants, tensors passed through DLPack without
copies). What stays outside them runs in PyTorch, between the parts.

Some converters refuse a node for its arguments only (a padding mode, a dtype). If a part
fails for that reason, its op types are taken out and the graph is split again.

Example:
    >>> part = PartitionedGraph(gm, example_inputs, settings, "0/0")   # doctest: +SKIP
    >>> part.fallback_ops                                              # doctest: +SKIP
    {'aten.cumsum.default': 1}
"""
from __future__ import annotations

import logging
import operator
from collections import Counter

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from kiln.frontend.common import UnsupportedOpsError
from kiln.frontend.pytorch.importer import _IGNORED, export_program, translates
from kiln.frontend.pytorch.registry import target_name

__all__ = ["PartitionedGraph", "NothingToCompile"]

log = logging.getLogger("kiln.torch")

_MAX_ROUNDS = 4         # splits of one graph: each round takes out the op types a part refused
_PART_PREFIX = "fused_"  # what CapabilityBasedPartitioner names the submodules it makes


class NothingToCompile(RuntimeError):
    """No op of the graph is one kiln could compile."""


class _KilnOps(OperatorSupportBase):
    """The ATen ops kiln's PyTorch importer translates, less the op types in `excluded`."""

    def __init__(self, excluded: set):
        super().__init__()
        self.excluded = excluded

    def is_node_supported(self, submodules, node) -> bool:
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:        # an element of a supported op's tuple
            source = node.args[0]
            return isinstance(source, torch.fx.Node) and self.is_node_supported(submodules,
                                                                                 source)
        return target_name(node.target) not in self.excluded and translates(node)


def _plain_module(program) -> torch.fx.GraphModule:
    """The program as a GraphModule of flat inputs and outputs, without the checks of
    ExportedProgram.module(): its input-constraint hooks, guards and pytree handling cost
    about 0.15 ms a call, and dynamo's own guards already cover them."""
    unlifted = program.module(check_guards=False)
    graph = unlifted.graph
    graph.set_codegen(torch.fx.graph.CodeGen())
    return torch.fx.GraphModule(unlifted, graph)


class _PartInputs(torch.fx.Interpreter):
    """Runs the split module once, keeping the arguments each part is called with."""

    def __init__(self, module):
        super().__init__(module)
        self.args: dict = {}

    def call_module(self, target, args, kwargs):
        if str(target).startswith(_PART_PREFIX):
            self.args[target] = args
        return super().call_module(target, args, kwargs)


class _KilnPart(torch.nn.Module):
    """A part compiled by kiln, in place of the submodule the partitioner made."""

    def __init__(self, graph):
        super().__init__()
        self.graph = graph

    def forward(self, *args):
        return self.graph(*args)


class PartitionedGraph:
    """One dynamo graph run as kiln-compiled parts with PyTorch ops between them.

    `parts` are the compiled parts (KilnGraph), `fallback_ops` counts the ATen ops PyTorch runs
    by op name, and `refused` names the parts that kiln failed on, with the reason (they run in
    PyTorch too). A NothingToCompile error when no part compiles.

    Example:
        >>> g = PartitionedGraph(gm, example_inputs, settings, "0/0")   # doctest: +SKIP
        >>> outputs = g(*example_inputs)                                # doctest: +SKIP
    """

    def __init__(self, gm, example_inputs, settings, name="graph"):
        from kiln.torch.backend import KilnGraph, _export, _reason_of

        self.name = name
        program = export_program(_export(gm, example_inputs))
        excluded: set = set()
        for round_ in range(_MAX_ROUNDS):
            module = CapabilityBasedPartitioner(
                _plain_module(program), _KilnOps(excluded),
                allows_single_node_partition=True).partition_and_fuse()
            recorder = _PartInputs(module)
            with torch.no_grad():
                recorder.run(*example_inputs)
            parts, refused, refusing = {}, {}, set()
            for target, args in recorder.args.items():
                try:
                    parts[target] = KilnGraph(getattr(module, target), list(args), settings,
                                              f"{name}/{target}")
                except Exception as err:    # that part runs in PyTorch; the others need not
                    log.debug("graph %s: kiln failed on %s", name, target, exc_info=True)
                    refused[target] = _reason_of(err)
                    if isinstance(err, UnsupportedOpsError):
                        # "aten.div.Tensor_mode (why)": the op type, for the next split
                        refusing.update(op.split(" ", 1)[0] for op in err.op_types)
            new = refusing - excluded
            if round_ == _MAX_ROUNDS - 1 or not any(
                    n.op == "call_function" and target_name(n.target) in new
                    for t in refused for n in getattr(module, t).graph.nodes):
                break               # splitting again would give the same parts
            excluded |= new
        # A part of views and copies only compiles to no kernel: PyTorch's views cost nothing,
        # kiln would copy.
        empty = [t for t, g in parts.items() if not g.runner.lib.graph["kernels"]]
        for t in empty:
            del parts[t]
        if not parts:
            why = "; ".join(f"{t}: {r}" for t, r in refused.items())
            raise NothingToCompile(f"no part of graph {name} compiles to kernels with kiln"
                                   + (f" ({why})" if why else ""))
        for target, graph in parts.items():
            setattr(module, target, _KilnPart(graph))
        self.module = module
        self.parts = list(parts.values())
        self.refused = refused
        self.fallback_ops = dict(sorted(Counter(
            target_name(n.target) for n in self._torch_nodes(list(refused) + empty)).items()))

    def _torch_nodes(self, in_torch):
        """The ATen op nodes PyTorch runs: outside the parts, and inside those in `in_torch`
        (targets of parts left to PyTorch)."""
        graphs = [self.module.graph] + [getattr(self.module, t).graph for t in in_torch]
        for graph in graphs:
            for n in graph.nodes:
                if n.op == "call_function" and n.target is not operator.getitem \
                        and target_name(n.target) not in _IGNORED:
                    yield n

    def summary(self) -> str:
        """One line: the parts kiln compiled and the ops PyTorch runs.

        Example:
            >>> g.summary()   # doctest: +SKIP
            '2 part(s) compiled by kiln (9 kernel calls); PyTorch runs aten.cumsum.default'
        """
        calls = sum(len(p.runner.lib.graph["kernels"]) for p in self.parts)
        ops = ", ".join(f"{op}{f' x{n}' if n > 1 else ''}" for op, n in self.fallback_ops.items())
        refused = (f"; kiln failed on {len(self.refused)} part(s), run by PyTorch: "
                   + "; ".join(self.refused.values())) if self.refused else ""
        return (f"{len(self.parts)} part(s) compiled by kiln ({calls} kernel calls); "
                f"PyTorch runs {ops or 'no op'}{refused}")

    def __call__(self, *args):
        return self.module(*args)

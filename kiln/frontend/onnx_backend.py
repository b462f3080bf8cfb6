"""kiln as an ONNX backend (`onnx.backend.base.Backend`): prepare a model, run it on inputs.

This is the interface of the ONNX project's backend test suite (`onnx.backend.test.BackendTest`)
and of tools written against it. `prepare` imports the model; the first `run` compiles it for
the shapes and dtypes of its inputs (kiln compiles static shapes) and later runs with the same
input types reuse the compiled model.

An operand that kiln needs at compile time (Reshape's shape, TopK's k, Resize's sizes ...)
but that the model takes as a graph input is bound to the value given at run time: the rep
compiles a specialization per distinct value of such inputs, as a JIT specializes on shapes.
Data inputs are never specialized: only the inputs the importer asks for, each named in
`rep.specialized`.

Example:
    >>> from kiln.frontend import onnx_backend
    >>> rep = onnx_backend.prepare(onnx.load("model.onnx"))     # doctest: +SKIP
    >>> (y,) = rep.run([x])                                      # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.backend.base import Backend, BackendRep

from .common import FrontendError, StaticValueError
from .onnx import from_onnx
from .onnx.importer import node_reads
from .onnx.loader import load_model

# Specializing binds one more input per attempt; a model needing more than this many is
# not a static-shape model in any useful sense.
_MAX_SPECIALIZED = 16
_CACHE_SIZE = 8


def _producers(graph) -> dict:
    """Value name -> the node computing it, in the graph and in its subgraphs."""
    out = {}
    for node in graph.node:
        out.update((o, node) for o in node.output if o)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == attr.GRAPH else attr.graphs):
                out.update(_producers(sub))
    return out


def _graph_inputs_feeding(graph, value: str, inputs: set) -> list:
    """The graph inputs `value` is computed from (itself, when it is one), in input order."""
    producer = _producers(graph)
    seen, stack, found = set(), [value], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in inputs:
            found.add(name)
        elif name in producer:
            stack.extend(i for i in node_reads(producer[name]) if i)
    return [i.name for i in graph.input if i.name in found]


class KilnBackendRep(BackendRep):
    """A prepared model: `run(inputs)` compiles (once per input signature) and executes it.

    Example:
        >>> rep = KilnBackendRep(model)                      # doctest: +SKIP
        >>> outputs = rep.run([np.ones((1, 3), np.float32)])  # doctest: +SKIP
    """

    def __init__(self, model, target: str = "llvm"):
        self.model = model
        self.target = target
        initializers = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in initializers]
        self.output_names = [o.name for o in model.graph.output]
        self.specialized: list[str] = []     # inputs bound to their run-time values
        self._compiled: dict = {}

    def run(self, inputs, **kwargs):
        """The outputs (numpy arrays, in graph output order) for `inputs` (a list in graph
        input order, a dict by name, or one array)."""
        feeds = self._feeds(inputs)
        while True:
            key = self._key(feeds)
            if key not in self._compiled:
                try:
                    self._compiled[key] = self._compile(feeds)
                except StaticValueError as err:
                    self._specialize(err)
                    continue
                if len(self._compiled) > _CACHE_SIZE:
                    self._compiled.pop(next(iter(self._compiled)))
            executor = self._compiled[key]
            break
        k = 0
        for name in self.input_names:
            if name not in self.specialized:
                executor.set_input(k, feeds[name])
                k += 1
        executor.run()
        return [executor.get_output(j).numpy() for j in range(executor.get_num_outputs())]

    def _feeds(self, inputs) -> dict:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(self.input_names):
                raise FrontendError(f"the model takes {len(self.input_names)} inputs "
                                    f"{self.input_names}, got {len(inputs)}")
            feeds = dict(zip(self.input_names, inputs))
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise FrontendError(f"inputs {missing} are not given")
        out = {}
        for name in self.input_names:
            value = np.asarray(feeds[name])
            if value.dtype == object:
                raise FrontendError(f"input {name!r} is not a tensor of numbers "
                                    f"(kiln runs tensor inputs only)")
            out[name] = np.ascontiguousarray(value) if value.ndim else value
        return out

    def _key(self, feeds) -> tuple:
        sig = tuple((feeds[n].shape, feeds[n].dtype.str) for n in self.input_names)
        values = tuple(feeds[n].tobytes() for n in self.specialized)
        return sig, values

    def _specialize(self, err: StaticValueError) -> None:
        runtime = set(self.input_names) - set(self.specialized)
        needed = _graph_inputs_feeding(self.model.graph, err.value, runtime) if err.value else []
        if not needed or len(self.specialized) + len(needed) > _MAX_SPECIALIZED:
            raise err
        self.specialized.extend(needed)

    def _compile(self, feeds):
        from .. import compile as kiln_compile
        from ..runtime import GraphExecutor

        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        graph = model.graph
        for name in self.specialized:
            graph.initializer.append(numpy_helper.from_array(feeds[name], name))
        kept = [i for i in graph.input if i.name not in self.specialized]
        del graph.input[:]
        graph.input.extend(kept)
        shapes = {n: feeds[n].shape for n in self.input_names if n not in self.specialized}
        mod, params = from_onnx(model, shape_dict=shapes)
        return GraphExecutor(kiln_compile(mod, target=self.target, params=params))


class KilnBackend(Backend):
    """The ONNX backend interface over kiln (CPU only)."""

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):
        """A KilnBackendRep for `model` (a ModelProto, bytes or a path).

        Example:
            >>> rep = KilnBackend.prepare("model.onnx")       # doctest: +SKIP
        """
        if not cls.supports_device(device):
            raise FrontendError(f"kiln's ONNX backend runs on CPU, not {device!r}")
        model, _ = load_model(model)
        return KilnBackendRep(model)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        """Run one NodeProto on `inputs` (arrays for its non-empty inputs, in order).

        Example:
            >>> KilnBackend.run_node(helper.make_node("Relu", ["x"], ["y"]), [x])  # doctest: +SKIP
        """
        names = [n for n in node.input if n]
        if len(inputs) != len(names):
            raise FrontendError(f"node {node.op_type} has {len(names)} inputs, got {len(inputs)}")
        arrays = [np.asarray(v) for v in inputs]
        graph_inputs = [helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in zip(names, arrays)]
        outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        graph = helper.make_graph([node], f"{node.op_type}_node", graph_inputs, outputs)
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return cls.prepare(model, device).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper() == "CPU"


prepare = KilnBackend.prepare
run_model = KilnBackend.run_model
run_node = KilnBackend.run_node
supports_device = KilnBackend.supports_device

"""ModelLibrary: a compiled model as the runtime sees it — execution graph, kernels, constants."""
from __future__ import annotations

import json
from dataclasses import dataclass

from .describe import tensor_text


@dataclass(frozen=True)
class TensorSpec:
    """A named input or output of a compiled model: its shape and dtype (a canonical name).

    Example:
        >>> str(TensorSpec("x", (1, 8), "float32"))
        'x: float32[1x8]'
    """

    name: str
    shape: tuple
    dtype: str

    def type_text(self) -> str:
        """The dtype and shape alone.

        Example:
            >>> TensorSpec("x", (1, 8), "float32").type_text()
            'float32[1x8]'
        """
        return tensor_text(self.dtype, self.shape)

    def __str__(self):
        return f"{self.name}: {self.type_text()}"


class ModelError(ValueError):
    """A model library that is malformed or of an unknown format version."""


SUPPORTED_GRAPH_VERSIONS = (1, 2, 3, 4)  # 2: entries that view another; 3: external
# modules; 4: symbolic dimensions


class ModelLibrary:
    """Execution graph (JSON text), the kernels Module, and constants by name (numpy arrays).

    Example:
        >>> lib = kiln.compile(mod, params=params)            # doctest: +SKIP
        >>> lib = kiln.runtime.load_module("model.so")         # doctest: +SKIP
    """

    def __init__(self, graph_json: str, module, params: dict):
        self.graph_json = graph_json
        self.graph = json.loads(graph_json)
        version = self.graph.get("version")
        if version not in SUPPORTED_GRAPH_VERSIONS:
            raise ModelError(f"execution graph format version {version!r} is not supported by "
                             f"this runtime (supports {SUPPORTED_GRAPH_VERSIONS})")
        self.module = module
        self.params = dict(params)

    def get_function(self, name):
        return self.module.get_function(name)

    def input_specs(self) -> list:
        """The model's inputs in order, as TensorSpecs (the execution graph's inputs).

        Example:
            >>> [str(s) for s in lib.input_specs()]        # doctest: +SKIP
            ['x: float32[1x3x32x32]']
        """
        return [self._spec(i["name"], i["entry"]) for i in self.graph["inputs"]]

    def output_specs(self) -> list:
        """The model's outputs in order, named output0, output1, ... (the execution graph keeps
        no output names).

        Example:
            >>> [str(s) for s in lib.output_specs()]       # doctest: +SKIP
            ['output0: float32[1x10]']
        """
        return [self._spec(f"output{k}", e) for k, e in enumerate(self.graph["outputs"])]

    def _spec(self, name: str, entry: int) -> TensorSpec:
        e = self.graph["entries"][entry]
        # a symbolic dimension is its name or expression (kiln.runtime.symbolic)
        return TensorSpec(name, tuple(d if isinstance(d, str) else int(d) for d in e["shape"]),
                          str(e["dtype"]))

    def __repr__(self):
        g = self.graph
        return (f"<kiln model: {len(g['inputs'])} inputs, {len(g['outputs'])} outputs, "
                f"{len(g['kernels'])} kernel calls, {len(self.params)} constants>")

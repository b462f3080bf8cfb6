"""ModelLibrary: a compiled model as the runtime sees it — execution graph, kernels, constants."""
from __future__ import annotations

import json


class ModelError(ValueError):
    """A model library that is malformed or of an unknown format version."""


SUPPORTED_GRAPH_VERSIONS = (1, 2)       # 2 adds entries that view another


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

    def __repr__(self):
        g = self.graph
        return (f"<kiln model: {len(g['inputs'])} inputs, {len(g['outputs'])} outputs, "
                f"{len(g['kernels'])} kernel calls, {len(self.params)} constants>")

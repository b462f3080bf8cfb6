"""SymbolicGraphExecutor: runs a model compiled over symbolic dimensions at any sizes within
their declared ranges.

Each run binds the dimensions from the inputs' shapes (kiln.runtime.symbolic.bind) and runs the
graph as a static one at that binding: the execution graph with every shape and storage sized
from the binding, run by a GraphExecutor of its own. Those are kept for the most recent
bindings (within BINDINGS_BUDGET_BYTES), so a server meeting the same lengths again allocates
nothing per run; the kernels are the same compiled ones at every binding (they take their
sizes as arguments). Inputs set in a thread are that thread's, as with GraphExecutor.
"""
from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict

import numpy as np

from .graph_executor import GraphExecutor
from .model import ModelLibrary
from .ndarray import NDArray, _aligned_empty
from .packed_func import ArgumentError
from .symbolic import bind, evaluate

# The executors of recent sizes are kept while their planned buffers (per thread that ran
# them) stay within this budget, and never more than MAX_BINDINGS: a decoder's every step
# has a new past length, and a server meets the same lengths again request after request.
BINDINGS_BUDGET_BYTES = 256 << 20
MAX_BINDINGS = 1024


class _AtBinding(ModelLibrary):
    """A compiled model as seen at one binding of its dimensions: the same kernels and
    constants, a static execution graph (its specs are those sizes')."""

    def __init__(self, lib, graph: dict):       # (the graph is made here, not parsed)
        self.graph, self.params, self.module = graph, lib.params, lib.module
        self.graph_json = None
        self._lib = lib

    def get_function(self, name):
        return self._lib.get_function(name)


def static_graph(graph: dict, env: dict) -> dict:
    """The execution graph `graph` (with symbolic "dims") at the binding `env`: every entry's
    shape evaluated, every storage as large as its largest entry there.

    Example:
        >>> static_graph(lib.graph, {"seq": 7})["entries"][0]["shape"]   # doctest: +SKIP
        [1, 7]
    """
    entries = []
    storages = [0] * len(graph["storages"])
    for e in graph["entries"]:
        shape = [d if type(d) is int else evaluate(d, env) for d in e["shape"]]
        entries.append({**e, "shape": shape})
        sid = e.get("storage", -1)
        if sid >= 0:
            nbytes = math.prod(shape) * _itemsize(e["dtype"])
            storages[sid] = max(storages[sid], nbytes)
    out = {k: v for k, v in graph.items() if k != "dims"}
    out["entries"], out["storages"] = entries, storages
    # sizes a kernel takes as arguments (a slice at a past length): their values
    out["kernels"] = [{**k, "scalars": [env[n] for n in k["sizes"]]} if k.get("sizes") else k
                      for k in graph["kernels"]]
    return out


@functools.lru_cache(maxsize=None)
def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


class SymbolicGraphExecutor(GraphExecutor):
    """GraphExecutor of a model with symbolic dimensions (made by GraphExecutor(lib) for one).

    Example:
        >>> m = kiln.runtime.GraphExecutor(lib)          # doctest: +SKIP
        >>> m.run(x=np.ones((5, 16), "float32"))         # doctest: +SKIP
        >>> m.get_output(0).shape                        # doctest: +SKIP
        (5, 8)
    """

    def __init__(self, lib, device=None):
        self.lib = lib
        g = lib.graph
        self._dims = {n: tuple(r) for n, r in g["dims"].items()}
        self._entries = g["entries"]
        self._input_index = {i["name"]: i["entry"] for i in g["inputs"]}
        self._input_names = [i["name"] for i in g["inputs"]]
        self._declared = {n: self._entries[e]["shape"] for n, e in self._input_index.items()}
        self._outputs = g["outputs"]
        self._static: OrderedDict = OrderedDict()      # binding -> GraphExecutor
        self._template = None
        self._bytes = 0                                 # planned bytes of those executors
        self._lock = threading.Lock()
        self._local = threading.local()

    # ------------------------------------------------------------------ bindings
    def _state(self):
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = {"inputs": {}, "current": None}
        return state

    def _at(self, env: dict) -> GraphExecutor:
        key = tuple(sorted(env.items()))
        with self._lock:
            ex = self._static.get(key)
            if ex is not None:
                self._static.move_to_end(key)
                return ex
        lib = _AtBinding(self.lib, static_graph(self.lib.graph, env))
        # The first sizes' executor is made in full; the others share its lookups.
        template = self._template
        ex = GraphExecutor(lib) if template is None else template.sized(lib)
        if template is None:
            self._template = ex
        with self._lock:
            other = self._static.get(key)
            if other is not None:          # another thread made these sizes' meanwhile
                return other
            self._static[key] = ex
            self._bytes += ex.memory_plan_bytes
            while len(self._static) > 1 and (len(self._static) > MAX_BINDINGS or
                                             self._bytes > BINDINGS_BUDGET_BYTES):
                _, old = self._static.popitem(last=False)
                self._bytes -= old.memory_plan_bytes
        return ex

    def bound_sizes(self) -> dict:
        """The sizes the calling thread's last run bound its symbolic dimensions to.

        Example:
            >>> m.run(x=np.ones((5, 16), "float32")); m.bound_sizes()   # doctest: +SKIP
            {'n': 5}
        """
        current = self._state()["current"]
        if current is None:
            raise ArgumentError("run() was never called in this thread")
        return dict(current[0])

    # ------------------------------------------------------------------ inputs
    def _check_input(self, name, data):
        e = self._entries[self._input_index[name]]
        if data.dtype != np.dtype(e["dtype"]):
            raise ArgumentError(f"input {name!r}: expected dtype {e['dtype']}, got {data.dtype}")
        # This input alone: its rank, static sizes and ranges (the others are checked at run).
        bind(self._dims, [(name, self._declared[name], data.shape)], complete=False)

    def _set(self, key, value):
        name, _ = self._input(key)
        src = value.numpy() if isinstance(value, NDArray) else np.asarray(
            value.detach().cpu().numpy() if hasattr(value, "detach") else value)
        self._check_input(name, src)
        own = _aligned_empty(src.shape, src.dtype)     # the caller may change `value` later
        own[...] = src
        self._state()["inputs"][name] = own

    def set_input_zero_copy(self, key, array) -> None:
        name, _ = self._input(key)
        data = np.asarray(array)
        self._check_input(name, data)
        if not data.flags.c_contiguous:
            raise ArgumentError(f"input {name!r}: the array is not C-contiguous (strides "
                                f"{data.strides})")
        self._state()["inputs"][name] = data

    def set_output_zero_copy(self, index: int, array) -> None:
        raise ArgumentError("set_output_zero_copy: the outputs of a model with symbolic "
                            "dimensions are sized by each run; read them with get_output")

    def release_zero_copy(self) -> None:
        state = self._state()
        state["inputs"].clear()
        if state["current"] is not None:
            state["current"][1].release_zero_copy()

    # ------------------------------------------------------------------ running
    def run(self, **inputs):
        for name, value in inputs.items():
            self._set(name, value)
        self.bind().run()

    def bind(self) -> GraphExecutor:
        """Bind the symbolic dimensions from the calling thread's inputs (checked against
        each other and the ranges) and return the static GraphExecutor of those sizes, the
        inputs bound to it; run() runs it. A caller that wants the outputs in its own memory
        binds them to that executor (its output_specs give their shapes) before running it.

        Example:
            >>> m.set_input("x", x); static = m.bind()             # doctest: +SKIP
            >>> static.set_output_zero_copy(0, out); static.run()  # doctest: +SKIP
        """
        state = self._state()
        given = state["inputs"]
        unset = [n for n in self._input_names if n not in given]
        if unset:
            raise ArgumentError(f"input(s) {sorted(unset)} were never set in this thread; "
                                f"use set_input(name, array) or run(name=array) (each thread "
                                f"sets its own inputs)")
        env = bind(self._dims, [(n, self._declared[n], given[n].shape)
                                for n in self._input_names])
        ex = self._at(env)
        previous = state["current"]
        if previous is not None and previous[1] is not ex:
            # the last sizes' executor lets go of this thread's arrays (it stays cached)
            previous[1].release_zero_copy()
        for name in self._input_names:
            ex.set_input_zero_copy(name, given[name])
        state["current"] = (env, ex)
        return ex

    def bound_executor(self) -> GraphExecutor:
        """The static GraphExecutor the calling thread's last run ran on (its sizes' graph,
        with this thread's inputs bound): what kiln.runtime.profile times.

        Example:
            >>> m.run(x=x); m.bound_executor().lib.graph["entries"][0]["shape"]  # doctest: +SKIP
            [5, 16]
        """
        return self._current()

    def _current(self) -> GraphExecutor:
        current = self._state()["current"]
        if current is None:
            raise ArgumentError("run() was never called in this thread (each thread runs the "
                                "model on its own inputs and reads its own outputs)")
        return current[1]

    def get_output(self, index: int) -> NDArray:
        self._output_entry(index)
        return self._current().get_output(index)

    def kernel_calls(self):
        return self._current().kernel_calls()

    @property
    def memory_plan_bytes(self) -> int:
        """Bytes of the planned storage at the sizes the plan was made at (each range's high
        end, where it has one); a run needs that of its own sizes."""
        return int(sum(self.lib.graph["storages"]))

    def __repr__(self):
        ranges = ", ".join(f"{n} in [{lo}, {'...' if hi is None else hi}]"
                           for n, (lo, hi) in self._dims.items())
        inputs = [str(spec) for spec in self.lib.input_specs()]
        return (f"<kiln.runtime.GraphExecutor: {len(self.lib.graph['kernels'])} kernel calls; "
                f"inputs ({', '.join(inputs)}); symbolic dimensions {ranges}>")

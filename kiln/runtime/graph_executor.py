"""GraphExecutor: runs a compiled model — one native call per run for the whole graph.

Buffers are allocated once: inputs and constants get their own, intermediates and outputs
come from the static memory plan, and an entry marked "view_of" (a reshape the compiler turned
into no kernel) is the same bytes as the entry it names, in its own shape. Every kernel's
argument array is packed once at set-up, so a run does no Python work per operator.
"""
from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path

import numpy as np

from .native_build import NativeBuildError, build_shared_library
from .model import ModelError
from .ndarray import NDArray, _aligned_empty
from .packed_func import ArgumentError

_runner = None
_runner_lock = threading.Lock()


def _graph_runner():
    global _runner
    with _runner_lock:
        if _runner is None:
            source = Path(__file__).with_name("graph_runner.c").read_text()
            try:
                lib = ctypes.CDLL(str(build_shared_library(source, "kiln_graph_runner")))
            except NativeBuildError:
                _runner = (None, None)
            else:
                fn = lib.kiln_run_graph
                fn.argtypes = [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.POINTER(ctypes.c_int32)]
                fn.restype = ctypes.c_int32
                _runner = (lib, fn)
        return _runner[1]


class GraphExecutor:
    """Run a model compiled by kiln.compile (or loaded with kiln.runtime.load_module).

    Example:
        >>> m = GraphExecutor(lib)                 # doctest: +SKIP
        >>> m.set_input("x", x); m.run()            # doctest: +SKIP
        >>> y = m.get_output(0).numpy()             # doctest: +SKIP
    """

    def __init__(self, lib, device=None):
        self.lib = lib
        g = lib.graph
        self._entries = g["entries"]
        self._storage = [_aligned_empty((max(n, 1),), np.dtype("uint8")) for n in g["storages"]]
        # Constants are used in place (kernels never write their inputs): the weights of a
        # loaded library stay in its mapped pages and a compiled model's arrays are not copied.
        self._constant_of = {c["entry"]: lib.params[c["name"]] for c in g["constants"]}
        self._arrays = []            # built in order: a view's base entry comes before it
        for k, e in enumerate(self._entries):
            self._arrays.append(self._array_for(k, e))
        self._input_index = {i["name"]: i["entry"] for i in g["inputs"]}
        self._input_names = [i["name"] for i in g["inputs"]]
        self._unset = set(self._input_names)
        self._outputs = g["outputs"]
        self._prepare_kernels(g["kernels"])

    def _array_for(self, k, e):
        shape, dtype = tuple(e["shape"]), np.dtype(e["dtype"])
        if e.get("view_of") is not None:
            return self._view(k, e["view_of"], shape, dtype)
        sid = e["storage"]
        constant = self._constant_of.get(k)
        if constant is not None:
            return self._constant_array(k, constant, shape, dtype)
        if sid < 0:
            return _aligned_empty(shape, dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return self._storage[sid][:nbytes].view(dtype).reshape(shape)

    @staticmethod
    def _constant_array(k, value, shape, dtype):
        value = np.asarray(value)
        if value.shape != shape or value.dtype != dtype:
            raise ModelError(f"constant for execution graph entry {k} is {value.dtype}"
                             f"{list(value.shape)}, expected {dtype}{list(shape)}")
        if value.flags.c_contiguous and value.ctypes.data % dtype.itemsize == 0:
            return value
        copy = _aligned_empty(shape, dtype)
        copy[...] = value
        return copy

    def _view(self, k, base, shape, dtype):
        if not isinstance(base, int) or not 0 <= base < k:
            raise ModelError(f"execution graph entry {k} is a view of entry {base!r}, which is "
                             f"not an earlier entry")
        root = self._arrays[base]
        if root.dtype != dtype or root.size != int(np.prod(shape, dtype=np.int64)):
            raise ModelError(f"execution graph entry {k} ({list(shape)} {dtype}) cannot view "
                             f"entry {base} ({list(root.shape)} {root.dtype}): sizes differ")
        view = root.view()
        view.shape = shape          # raises rather than copy: a view must share the bytes
        return view

    def _prepare_kernels(self, kernels):
        self._funcs, self._keep = [], []
        fn_ptrs, arg_ptrs, nargs = [], [], []
        for kern in kernels:
            func = self.lib.get_function(kern["func"])
            arrays = [self._arrays[e] for e in kern["inputs"] + kern["outputs"]]
            values, keep = func.prepare(*arrays)
            self._funcs.append(func)
            self._keep.append((values, keep))
            fn_ptrs.append(func.address)
            arg_ptrs.append(ctypes.addressof(values))
            nargs.append(len(func.info.params) + len(func.info.shape_vars))
        n = len(kernels)
        self._num_kernels = n
        self._fn_array = (ctypes.c_void_p * max(n, 1))(*fn_ptrs)
        self._arg_array = (ctypes.c_void_p * max(n, 1))(*arg_ptrs)
        self._nargs_array = (ctypes.c_int32 * max(n, 1))(*nargs)
        self._failed = ctypes.c_int32(-1)
        self._run_native = _graph_runner()

    # ------------------------------------------------------------------ inputs
    def get_input_names(self) -> list:
        return list(self._input_names)

    def _input_entry(self, key) -> int:
        if isinstance(key, int):
            if not 0 <= key < len(self._input_names):
                raise ArgumentError(f"input index {key} is out of range: the model has "
                                    f"{len(self._input_names)} inputs {self._input_names}")
            return self._input_index[self._input_names[key]]
        if key not in self._input_index:
            raise ArgumentError(f"the model has no input named {key!r}; its inputs are "
                                f"{self._input_names}")
        return self._input_index[key]

    def set_input(self, key=None, value=None, **params):
        """Set one input by name or index, and/or several by keyword."""
        if key is not None:
            self._set(key, value)
        for name, v in params.items():
            self._set(name, v)

    def _set(self, key, value):
        entry = self._input_entry(key)
        target = self._arrays[entry]
        src = value.numpy() if isinstance(value, NDArray) else np.asarray(
            value.detach().cpu().numpy() if hasattr(value, "detach") else value)
        name = key if isinstance(key, str) else self._input_names[key]
        if src.dtype != target.dtype:
            raise ArgumentError(f"input {name!r}: expected dtype {target.dtype}, got {src.dtype}")
        if src.shape != target.shape:
            raise ArgumentError(f"input {name!r}: expected shape {target.shape}, got {src.shape}")
        target[...] = src
        self._unset.discard(name)

    # ------------------------------------------------------------------ running
    def run(self, **inputs):
        for name, value in inputs.items():
            self._set(name, value)
        if self._unset:
            raise ArgumentError(f"input(s) {sorted(self._unset)} were never set; use "
                                f"set_input(name, array) or run(name=array)")
        if self._run_native is not None:
            status = self._run_native(self._num_kernels, self._fn_array, self._arg_array,
                                      self._nargs_array, ctypes.byref(self._failed))
            if status:
                raise self._funcs[self._failed.value].status_error(status, " while running the model")
            return
        for func, (values, _) in zip(self._funcs, self._keep):
            status = func._native(ctypes.addressof(values), len(func.info.params) + len(func.info.shape_vars))
            if status:
                raise func.status_error(status, " while running the model")

    def get_num_outputs(self) -> int:
        return len(self._outputs)

    def get_output(self, index: int) -> NDArray:
        """A copy of output `index` (the executor's buffers are reused by the next run)."""
        if not 0 <= index < len(self._outputs):
            raise ArgumentError(f"output index {index} is out of range: the model has "
                                f"{len(self._outputs)} outputs")
        return NDArray(self._arrays[self._outputs[index]].copy())

    @property
    def memory_plan_bytes(self) -> int:
        """Bytes of the planned storage for intermediates and outputs."""
        return int(sum(self.lib.graph["storages"]))

    def benchmark(self, number: int = 10, repeat: int = 3, warmup: int = 1):
        """Median and all per-run times (seconds) of `repeat` batches of `number` runs."""
        from .timing import TimingResult
        for _ in range(warmup):
            self.run()
        results = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                self.run()
            results.append((time.perf_counter() - t0) / number)
        return TimingResult(tuple(results))

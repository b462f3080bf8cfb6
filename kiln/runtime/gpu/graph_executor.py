"""Running a compiled model whose kernels are GPU kernels: the execution graph's storages,
inputs and constants live in the device's memory; inputs come from the host (numpy, torch,
NDArrays) and outputs go back to it.

kiln.runtime.GraphExecutor(lib) makes one of these when lib's kernels are a DeviceModule.
"""
from __future__ import annotations

import time

import numpy as np

from ..describe import byte_text
from ..device import Device
from ..graph_executor import GraphExecutor, GraphIO
from ..model import ModelError
from ..ndarray import NDArray
from ..packed_func import ArgumentError
from .api import device_api
from .array import DeviceNDArray


class DeviceGraphExecutor(GraphIO):
    """set_input / run / get_output, as kiln.runtime.GraphExecutor, on a GPU.

    Example:
        >>> lib = kiln.compile(mod, target="opencl", params=params)   # doctest: +SKIP
        >>> m = kiln.runtime.GraphExecutor(lib)                       # doctest: +SKIP
        >>> m.run(x=x); y = m.get_output(0).numpy()                   # doctest: +SKIP
    """

    def __init__(self, lib, device=None):
        module = lib.module
        self.lib = lib
        self.device = device or Device(module.device_type, 0)
        if self.device.device_type != module.device_type:
            raise ArgumentError(f"the model's kernels run on {module.device_type} devices, "
                                f"not {self.device!r}")
        self._api = device_api(self.device)
        g = lib.graph
        entries = g["entries"]
        self._entries = entries
        storages = [DeviceNDArray((max(int(n), 1),), "uint8", self.device) for n in g["storages"]]
        constants = {c["entry"]: lib.params[c["name"]] for c in g["constants"]}
        self._arrays: list = []
        for k, e in enumerate(entries):
            shape, dtype = tuple(e["shape"]), str(np.dtype(e["dtype"]))
            base = e.get("view_of")
            if base is not None:
                if not isinstance(base, int) or not 0 <= base < k:
                    raise ModelError(f"execution graph entry {k} is a view of entry {base!r}, "
                                     "which is not an earlier entry")
                self._arrays.append(self._arrays[base].view(shape, dtype))
            elif k in constants:
                value = GraphExecutor._constant_array(k, constants[k], shape, np.dtype(dtype))
                self._arrays.append(DeviceNDArray(shape, dtype, self.device).copyfrom(value))
            elif e.get("storage", -1) >= 0:
                self._arrays.append(storages[e["storage"]].view(shape, dtype))
            else:
                self._arrays.append(DeviceNDArray(shape, dtype, self.device))
        self._storages = storages
        self._input_index = {i["name"]: i["entry"] for i in g["inputs"]}
        self._input_names = [i["name"] for i in g["inputs"]]
        self._outputs = g["outputs"]
        self._calls = [(module.get_function(k["func"]),
                        [self._arrays[e] for e in k["inputs"] + k["outputs"]])
                       for k in g["kernels"]]
        self._unset = set(self._input_names)
        self._ran = False

    def set_input(self, key=None, value=None, **params):
        """Copy one input (by name or index) and/or several by keyword to the device."""
        if key is not None:
            self._set(key, value)
        for name, v in params.items():
            self._set(name, v)

    def _set(self, key, value):
        key, entry = self._input(key)
        target = self._arrays[entry]
        if isinstance(value, (NDArray, DeviceNDArray)):
            value = value.numpy()
        elif hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        src = np.asarray(value)
        if str(src.dtype) != target.dtype:
            raise ArgumentError(f"input {key!r}: expected dtype {target.dtype}, got {src.dtype}")
        if src.shape != target.shape:
            raise ArgumentError(f"input {key!r}: expected shape {target.shape}, got {src.shape}")
        target.copyfrom(src)
        self._unset.discard(key)

    def run(self, **inputs):
        for name, value in inputs.items():
            self._set(name, value)
        if self._unset:
            raise ArgumentError(f"input(s) {sorted(self._unset)} were never set; use "
                                "set_input(name, array) or run(name=array)")
        for func, args in self._calls:
            func(*args)
        self._ran = True

    def get_output(self, index: int) -> NDArray:
        """A host copy of output `index` of the last run (waits for the device)."""
        entry = self._output_entry(index)
        if not self._ran:
            raise ArgumentError(f"output {index}: run() was never called")
        return NDArray(self._arrays[entry].numpy())

    @property
    def memory_plan_bytes(self) -> int:
        return int(sum(self.lib.graph["storages"]))

    def benchmark(self, number: int = 10, repeat: int = 3, warmup: int = 1):
        """Per-run seconds (device-synchronized) of `repeat` batches of `number` runs."""
        from ..timing import TimingResult
        for _ in range(warmup):
            self.run()
        self._api.sync()
        results = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                self.run()
            self._api.sync()
            results.append((time.perf_counter() - t0) / number)
        return TimingResult(tuple(results))

    def kernel_seconds(self, runs: int) -> list:
        """Seconds each kernel call of the graph takes over `runs` calls, timed by the
        device's events, one call after the other on the model's own buffers (what
        kiln.runtime.profile reads).

        Example:
            >>> m.kernel_seconds(10)[0] > 0      # doctest: +SKIP
            True
        """
        self._api.sync()
        return [self._api.time(lambda f=func, a=args: f(*a), runs) * runs
                for func, args in self._calls]

    def __repr__(self):
        return (f"<kiln.runtime.GraphExecutor on {self.device!r}: {len(self._calls)} kernel "
                f"calls; {byte_text(self.memory_plan_bytes)} planned for intermediates>")

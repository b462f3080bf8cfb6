"""GraphExecutor: runs a compiled model — one native call per run for the whole graph.

Buffers are allocated once per thread that uses the executor: inputs get their own,
intermediates and outputs come from the static memory plan, constants are shared, and an entry
marked "view_of" (a reshape the compiler turned into no kernel) is the same bytes as the entry it
names, in its own shape. Every kernel's argument array is packed once per thread, so a run does
no Python work per operator. Each thread's buffers take memory_plan_bytes plus the inputs.

Inputs and outputs can also live in the caller's memory (set_input_zero_copy /
set_output_zero_copy, TVM's names): binding one rewrites the buffer addresses in the packed
argument arrays, so runs stay one native call and nothing is copied.
"""
from __future__ import annotations

import ctypes
import functools
import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .describe import byte_text, tensor_text
from .model import ModelError
from .native_build import NativeBuildError, build_shared_library
from .ndarray import ALIGNMENT, NDArray, _aligned_empty
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


@dataclass(frozen=True)
class KernelCalls:
    """An executor's kernel calls in run order, bound to its buffers: the arrays its native run
    loop takes (graph_runner.c), for tools that run the same calls another way (the profiler
    times each one). `fns`, `args` and `num_args` are ctypes arrays of the function addresses,
    the argument-value arrays and their lengths; functions[k] is call k's compiled function
    (its name, its status_error). The argument values are the calling thread's arrays of the
    executor, which zero-copy binding rewrites in place, so a KernelCalls stays current.

    Example:
        >>> calls = m.kernel_calls()                       # doctest: +SKIP
        >>> calls.functions[0].name, len(calls)            # doctest: +SKIP
        ('fused_nn_conv2d_add_nn_relu_0', 9)
    """

    functions: tuple
    fns: ctypes.Array
    args: ctypes.Array
    num_args: ctypes.Array
    _values: tuple

    def __len__(self) -> int:
        return len(self.functions)

    def values(self, k: int) -> tuple:
        """The values call k passes for its function's parameters (the kernel's inputs, then
        its outputs): a buffer's address, or a scalar's value.

        Example:
            >>> m.set_input_zero_copy("x", x)                    # doctest: +SKIP
            >>> m.kernel_calls().values(0)[0] == x.ctypes.data   # doctest: +SKIP
            True
        """
        return tuple(self._values[k][:len(self.functions[k].info.params)])

    def call(self, k: int) -> int:
        """Run call k alone, from Python; returns its status (0: success).

        Example:
            >>> m.kernel_calls().call(0)                          # doctest: +SKIP
            0
        """
        return self.functions[k]._native(self.args[k], self.num_args[k])


@functools.lru_cache(maxsize=None)
def _np_dtype(name: str) -> np.dtype:
    return np.dtype(name)


class _Buffers:
    """One thread's working set of an executor: planned storage, every entry's array, the
    packed kernel arguments over them, input/output bindings and which inputs are still unset.
    Built from the executor's read-only plan; nothing in it is shared with another thread."""

    def __init__(self, ex: "GraphExecutor"):
        # One allocation for all planned storages, each at an aligned offset (a symbolic
        # model makes buffers for every new size it runs at: they should be cheap)
        offsets, end = [], 0
        for n in ex._storages:
            offsets.append(end)
            end += -(-max(n, 1) // ALIGNMENT) * ALIGNMENT
        arena = _aligned_empty((max(end, 1),), np.dtype("uint8"))
        self.storage = [arena[o:o + max(n, 1)] for o, n in zip(offsets, ex._storages)]
        self.arrays = []             # built in order: a view's base entry comes before it
        for k, e in enumerate(ex._entries):
            self.arrays.append(self._array_for(ex, k, e))
        self.unset = set(ex._input_names)
        self.keep = []
        arg_ptrs = []
        for func, kern in zip(ex._funcs, ex._kernels):
            values, keep = func.prepare(*[self.arrays[e] for e in kern["inputs"] + kern["outputs"]],
                                        *kern.get("scalars", ()))
            self.keep.append((values, keep))
            arg_ptrs.append(ctypes.addressof(values))
        self.arg_array = (ctypes.c_void_p * max(len(arg_ptrs), 1))(*arg_ptrs)
        self.failed = ctypes.c_int32(-1)
        self.own = tuple(self.arrays)        # this thread's buffers, restored by set_input
        # Where each buffer's address sits in the packed arguments, for zero-copy binding.
        self.slots = defaultdict(list)       # root -> (argument array, slot) of each use
        for kern, (values, _) in zip(ex._kernels, self.keep):
            for slot, e in enumerate(kern["inputs"] + kern["outputs"]):
                self.slots[ex._root[e]].append((values, slot))
        self.owner = {}                      # root -> output index bound to its bytes
        self.copied = {}                     # output index -> array filled after each run
        self.ran = False                     # whether the outputs hold a run's results

    def _array_for(self, ex, k, e):
        shape, dtype = tuple(e["shape"]), _np_dtype(e["dtype"])
        if e.get("view_of") is not None:
            return self._view(k, e["view_of"], shape, dtype)
        constant = ex._constant_of.get(k)
        if constant is not None:
            return constant
        sid = e["storage"]
        if sid < 0:
            return _aligned_empty(shape, dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        return self.storage[sid][:nbytes].view(dtype).reshape(shape)

    def _view(self, k, base, shape, dtype):
        root = self.arrays[base]
        if root.dtype != dtype or root.size != int(np.prod(shape, dtype=np.int64)):
            raise ModelError(f"execution graph entry {k} ({tensor_text(dtype, shape)}) cannot "
                             f"view entry {base} ({tensor_text(root.dtype, root.shape)}): "
                             f"sizes differ")
        view = root.view()
        view.shape = shape          # raises rather than copy: a view must share the bytes
        return view


class GraphIO:
    """Looking up a compiled model's inputs (by name or index) and outputs (by index), for
    the executors of every device. Needs `_input_names`, `_input_index` (name -> entry) and
    `_outputs` (entries)."""

    def get_input_names(self) -> list:
        return list(self._input_names)

    def _input(self, key) -> tuple[str, int]:
        """(name, entry) of input `key`, a name or an index."""
        if isinstance(key, int):
            if not 0 <= key < len(self._input_names):
                raise ArgumentError(f"input index {key} is out of range: the model has "
                                    f"{len(self._input_names)} inputs {self._input_names}")
            key = self._input_names[key]
        elif key not in self._input_index:
            raise ArgumentError(f"the model has no input named {key!r}; its inputs are "
                                f"{self._input_names}")
        return key, self._input_index[key]

    def get_num_outputs(self) -> int:
        return len(self._outputs)

    def _output_entry(self, index: int) -> int:
        if not 0 <= index < len(self._outputs):
            raise ArgumentError(f"output index {index} is out of range: the model has "
                                f"{len(self._outputs)} outputs")
        return self._outputs[index]


class GraphExecutor(GraphIO):
    """Run a model compiled by kiln.compile (or loaded with kiln.runtime.load_module).

    One executor may be used from several threads at once: each thread has its own inputs,
    outputs and intermediate buffers (made on its first call), so a thread's set_input / run /
    get_output sequence never sees another thread's data. Inputs set in one thread are not
    inputs of another.

    Example:
        >>> m = GraphExecutor(lib)                 # doctest: +SKIP
        >>> m.set_input("x", x); m.run()            # doctest: +SKIP
        >>> y = m.get_output(0).numpy()             # doctest: +SKIP
    """

    def __new__(cls, lib=None, device=None):
        # A model compiled for a GPU target runs on the device (kiln.runtime.gpu).
        from .gpu import DeviceModule
        if cls is GraphExecutor and isinstance(getattr(lib, "module", None), DeviceModule):
            from .gpu.graph_executor import DeviceGraphExecutor
            return DeviceGraphExecutor(lib, device)
        if cls is GraphExecutor and "dims" in getattr(lib, "graph", {}):
            from .symbolic_executor import SymbolicGraphExecutor
            return super().__new__(SymbolicGraphExecutor)     # its __init__ runs next
        return super().__new__(cls)

    def __init__(self, lib, device=None):
        self.lib = lib
        g = lib.graph
        self._entries = g["entries"]
        self._storages = g["storages"]
        self._kernels = g["kernels"]
        # Constants are used in place (kernels never write their inputs): the weights of a
        # loaded library stay in its mapped pages and a compiled model's arrays are not copied.
        # Every thread's buffers share them.
        self._constant_of = {}
        for c in g["constants"]:
            e = self._entries[c["entry"]]
            self._constant_of[c["entry"]] = self._constant_array(
                c["entry"], lib.params[c["name"]], tuple(e["shape"]), np.dtype(e["dtype"]))
        self._input_index = {i["name"]: i["entry"] for i in g["inputs"]}
        self._input_names = [i["name"] for i in g["inputs"]]
        self._outputs = g["outputs"]
        self._index_views()
        self._funcs = [lib.get_function(kern["func"]) for kern in self._kernels]
        n = len(self._funcs)
        self._num_kernels = n
        self._fn_array = (ctypes.c_void_p * max(n, 1))(*[f.address for f in self._funcs])
        self._nargs_array = (ctypes.c_int32 * max(n, 1))(
            *[len(f.info.params) + len(f.info.shape_vars) for f in self._funcs])
        self._run_native = _graph_runner()
        self._local = threading.local()
        self._buffers()             # this thread's, now: a malformed graph fails here

    def sized(self, lib) -> "GraphExecutor":
        """A GraphExecutor of `lib`, an execution graph of this one's structure (the same
        kernels, constants, inputs and views) whose entries and storages have other sizes: a
        symbolic model's graph at other sizes. It shares everything else with this one, so
        it is made without looking anything up again.

        Example:
            >>> other = m.sized(library_at_other_sizes)        # doctest: +SKIP
        """
        ex = object.__new__(type(self))
        ex.__dict__.update(self.__dict__)
        g = lib.graph
        ex.lib, ex._entries, ex._storages, ex._kernels = lib, g["entries"], g["storages"], \
            g["kernels"]
        ex._local = threading.local()
        ex._buffers()
        return ex

    @staticmethod
    def _constant_array(k, value, shape, dtype):
        value = np.asarray(value)
        if value.shape != shape or value.dtype != dtype:
            raise ModelError(f"constant for execution graph entry {k} is "
                             f"{tensor_text(value.dtype, value.shape)}, expected "
                             f"{tensor_text(dtype, shape)}")
        if value.flags.c_contiguous and value.ctypes.data % dtype.itemsize == 0:
            return value
        copy = _aligned_empty(shape, dtype)
        copy[...] = value
        return copy

    def _index_views(self):
        # A view shares its root's bytes from the same address: re-pointing a root re-points
        # every view of it.
        self._root = []
        for k, e in enumerate(self._entries):
            base = e.get("view_of")
            if base is not None and (not isinstance(base, int) or not 0 <= base < k):
                raise ModelError(f"execution graph entry {k} is a view of entry {base!r}, "
                                 f"which is not an earlier entry")
            self._root.append(k if base is None else self._root[base])
        self._group = defaultdict(list)       # root -> entries over its bytes
        for k, r in enumerate(self._root):
            self._group[r].append(k)
        self._written = {self._root[e] for kern in self._kernels for e in kern["outputs"]}

    def _buffers(self) -> _Buffers:
        """The calling thread's buffers, made on its first call."""
        buffers = getattr(self._local, "buffers", None)
        if buffers is None:
            buffers = self._local.buffers = _Buffers(self)
        return buffers

    def kernel_calls(self) -> KernelCalls:
        """The graph's kernel calls as this executor runs them in the calling thread (see
        KernelCalls).

        Example:
            >>> [f.name for f in m.kernel_calls().functions][:1]   # doctest: +SKIP
            ['fused_nn_conv2d_add_nn_relu_0']
        """
        b = self._buffers()
        b.ran = True            # whoever runs the calls makes the outputs; get_output reads them
        return KernelCalls(tuple(self._funcs), self._fn_array, b.arg_array,
                           self._nargs_array, tuple(values for values, _ in b.keep))

    # ------------------------------------------------------------------ inputs
    def set_input(self, key=None, value=None, **params):
        """Set one input by name or index, and/or several by keyword."""
        if key is not None:
            self._set(key, value)
        for name, v in params.items():
            self._set(name, v)

    def _set(self, key, value):
        name, entry = self._input(key)
        b = self._buffers()
        if b.arrays[entry] is not b.own[entry]:
            self._restore(b, self._root[entry])   # a copy goes to our buffer, never the caller's
        target = b.arrays[entry]
        src = value.numpy() if isinstance(value, NDArray) else np.asarray(
            value.detach().cpu().numpy() if hasattr(value, "detach") else value)
        if src.dtype != target.dtype:
            raise ArgumentError(f"input {name!r}: expected dtype {target.dtype}, got {src.dtype}")
        if src.shape != target.shape:
            raise ArgumentError(f"input {name!r}: expected shape {target.shape}, got {src.shape}")
        target[...] = src
        b.unset.discard(name)

    def set_input_zero_copy(self, key, array) -> None:
        """Let the kernels read input `key` (name or index) in place from `array` (an NDArray
        or numpy array, C-contiguous, of the input's shape and dtype; kernels never write
        inputs). The binding lasts until the input is set again; the executor keeps `array`
        alive meanwhile. Like every input, the binding holds for the calling thread only.

        Example:
            >>> m.set_input_zero_copy("x", kiln.runtime.from_dlpack(x))   # doctest: +SKIP
            >>> m.run()                                                   # doctest: +SKIP
        """
        name, entry = self._input(key)
        b = self._buffers()
        self._point(b, self._root[entry], self._checked(array, entry, f"input {name!r}"))
        b.unset.discard(name)

    def set_output_zero_copy(self, index: int, array) -> None:
        """Let the kernels write output `index` straight into `array` (writable, C-contiguous,
        of the output's shape and dtype). An output no kernel writes (an input or a constant
        returned as it is, or a second output over another's bytes) is copied into `array`
        after each run instead. The binding holds for the calling thread only.

        Example:
            >>> m.set_output_zero_copy(0, y)            # doctest: +SKIP
            >>> m.run()                                 # doctest: +SKIP
        """
        entry = self._output_entry(index)
        data = self._checked(array, entry, f"output {index}")
        if not data.flags.writeable:
            raise ArgumentError(f"output {index}: the array is read-only")
        root = self._root[entry]
        b = self._buffers()
        if root in self._written and b.owner.get(root, index) == index:
            self._point(b, root, data.reshape(self._entries[root]["shape"]))
            b.owner[root] = index
            b.copied.pop(index, None)
        else:
            b.copied[index] = data

    def _checked(self, array, entry, what) -> np.ndarray:
        data = np.asarray(array)          # an NDArray's own memory, not a copy
        e = self._entries[entry]
        shape, dtype = tuple(e["shape"]), np.dtype(e["dtype"])
        if data.dtype != dtype or data.shape != shape:
            raise ArgumentError(f"{what}: expected {tensor_text(dtype, shape)}, got "
                                f"{tensor_text(data.dtype, data.shape)}")
        if not data.flags.c_contiguous:
            raise ArgumentError(f"{what}: the array is not C-contiguous (strides "
                                f"{data.strides})")
        if data.ctypes.data % dtype.itemsize:
            raise ArgumentError(f"{what}: address {data.ctypes.data:#x} is not aligned to its "
                                f"{dtype.itemsize}-byte elements")
        return data

    def release_zero_copy(self) -> None:
        """Drop the calling thread's zero-copy bindings (inputs and outputs): the executor stops
        referring to the caller's arrays, so they can be freed. Inputs that were bound must be
        set again before the next run; outputs go back to the executor's own buffers.

        Example:
            >>> m.set_input_zero_copy("x", x); m.run(); m.release_zero_copy()   # doctest: +SKIP
        """
        b = self._buffers()
        bound = {self._root[k] for k, a in enumerate(b.arrays) if a is not b.own[k]}
        for root in bound:
            self._restore(b, root)
        b.unset.update(name for name, entry in self._input_index.items()
                       if self._root[entry] in bound)
        b.owner.clear()
        b.copied.clear()

    def _point(self, b: _Buffers, root, data) -> None:
        """Make the bytes of `root` and its views those of `data` (shaped as root)."""
        for k in self._group[root]:
            b.arrays[k] = data.reshape(self._entries[k]["shape"])
        self._repack(b, root)

    def _restore(self, b: _Buffers, root) -> None:
        for k in self._group[root]:
            b.arrays[k] = b.own[k]
        self._repack(b, root)

    @staticmethod
    def _repack(b: _Buffers, root) -> None:
        address = b.arrays[root].ctypes.data
        for values, slot in b.slots[root]:
            values[slot] = address

    # ------------------------------------------------------------------ running
    def run(self, **inputs):
        for name, value in inputs.items():
            self._set(name, value)
        b = self._buffers()
        if b.unset:
            raise ArgumentError(f"input(s) {sorted(b.unset)} were never set in this thread; "
                                f"use set_input(name, array) or run(name=array) (each thread "
                                f"sets its own inputs)")
        if self._run_native is not None:
            status = self._run_native(self._num_kernels, self._fn_array, b.arg_array,
                                      self._nargs_array, ctypes.byref(b.failed))
            if status:
                raise self._funcs[b.failed.value].status_error(status,
                                                               " while running the model")
        else:
            for func, nargs, (values, _) in zip(self._funcs, self._nargs_array, b.keep):
                status = func._native(ctypes.addressof(values), nargs)
                if status:
                    raise func.status_error(status, " while running the model")
        for index, target in b.copied.items():
            np.copyto(target, b.arrays[self._outputs[index]])
        b.ran = True

    def get_output(self, index: int) -> NDArray:
        """A copy of output `index` of this thread's last run (the buffers are reused by the
        next run)."""
        entry = self._output_entry(index)
        b = self._buffers()
        if not b.ran:
            raise ArgumentError(f"output {index}: run() was never called in this thread (each "
                                f"thread runs the model on its own inputs and reads its own "
                                f"outputs)")
        return NDArray(b.arrays[entry].copy())

    @property
    def memory_plan_bytes(self) -> int:
        """Bytes of the planned storage for intermediates and outputs (of each thread that
        uses the executor)."""
        return int(sum(self.lib.graph["storages"]))

    def __repr__(self):
        buffers = getattr(self._local, "buffers", None)       # looking makes none
        unset = buffers.unset if buffers is not None else set(self._input_names)
        inputs = [f"{spec}{' (not set)' if spec.name in unset else ''}"
                  for spec in self.lib.input_specs()]
        outputs = [spec.type_text() for spec in self.lib.output_specs()]
        return (f"<kiln.runtime.GraphExecutor: {self._num_kernels} kernel calls; inputs "
                f"({', '.join(inputs)}); outputs ({', '.join(outputs)}); "
                f"{len(self._constant_of)} constants; {byte_text(self.memory_plan_bytes)} "
                f"planned for intermediates>")

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

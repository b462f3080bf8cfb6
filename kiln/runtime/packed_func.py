"""PackedFunction: call a compiled function with arrays and numbers, every argument checked.

Native code trusts its arguments, so every check happens here, before the call: count, dtype,
rank, constant extents, symbolic sizes bound consistently, contiguity, element alignment, and
scalar kinds and ranges. A failure raises ArgumentError naming the argument; it never reaches
native code.

Per-call cost matters (small kernels are called millions of times by the tuner and the graph
executor), so each parameter gets a checker prepared once, with the order in which symbolic
sizes are bound worked out ahead of time, and the KilnValue array is reused between calls.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from . import _dtype
from . import symbolic
from .function_info import FunctionInfo, ParamInfo
from .ndarray import NDArray

_NATIVE_SIGNATURE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)
_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof

_CHECK_CONSTANT, _BIND, _CHECK_BOUND, _CHECK_EXPRESSION = 0, 1, 2, 3
_INT_RANGES = {name: (int(np.iinfo(name).min), int(np.iinfo(name).max))
               for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                            "uint64")}


class ArgumentError(TypeError, ValueError):
    """A call argument that does not match the compiled function's signature."""


class NativeCallError(RuntimeError):
    """Native code returned a non-zero status (a generated assertion failed)."""


class _Param:
    """Shared state of one parameter's checker: where it sits and how to name it."""

    def __init__(self, function: str, position: int, info: ParamInfo):
        self.info = info
        self.slot = position
        self.where = f"{function}: argument {info.name!r} (#{position})"


class _BufferParam(_Param):
    def __init__(self, function, position, info, dims, binders, shape_var_dtypes,
                 shape_var_bounds=()):
        super().__init__(function, position, info)
        self.shape_var_bounds = shape_var_bounds     # slot -> (low, high or None) or None
        self.np_dtype = _dtype.to_numpy(info.dtype)
        self.itemsize = self.np_dtype.itemsize
        self.ndim = len(info.shape)
        self.dims = dims              # ((axis, op, constant-or-slot), ...)
        self.binders = binders        # shape-var slot -> (name, binding argument)
        self.shape_var_dtypes = shape_var_dtypes

    def pack(self, arg, ints, floats, bound):
        converted = None
        if type(arg) is NDArray:
            array, ptr = arg._array, arg._ptr
            if not arg._contiguous:
                raise self._not_contiguous(array)
        elif type(arg) is np.ndarray:
            array = arg
            try:
                # ~5x cheaper than __array_interface__; succeeds only on writable C-contiguous
                # arrays of at least one byte: the rest take the slow path.
                ptr = _addressof(_from_buffer(array))
            except (TypeError, ValueError, BufferError):
                ptr = self._checked_address(array)
        else:
            array = converted = self._convert(arg)
            ptr = self._checked_address(array)
        if array.dtype != self.np_dtype:
            raise ArgumentError(f"{self.where} has dtype {_dtype.describe(array.dtype)}, "
                                f"expected {self.info.dtype}")
        shape = array.shape
        if len(shape) != self.ndim:
            raise ArgumentError(f"{self.where} has {len(shape)} dimension(s) (shape "
                                f"{shape}), expected {self.ndim} (shape {self._declared()})")
        for axis, op, value in self.dims:
            extent = shape[axis]
            if op == _CHECK_CONSTANT:
                if extent != value:
                    raise ArgumentError(f"{self.where} dimension {axis}: expected {value}, got "
                                        f"{extent} (shape {shape}, declared "
                                        f"{self._declared()})")
            elif op == _CHECK_EXPRESSION:
                # checked by PackedFunction._pack once every size is bound
                bound.append((self, axis, value, extent))
            elif op == _BIND:
                if extent > 0x7FFFFFFF and self.shape_var_dtypes[value] == "int32":
                    raise ArgumentError(f"{self.where} dimension {axis}: "
                                        f"{self.binders[value][0]}={extent} does not fit the "
                                        f"function's int32 size")
                limits = self.shape_var_bounds[value] if self.shape_var_bounds else None
                if limits is not None and (extent < limits[0] or
                                           limits[1] is not None and extent > limits[1]):
                    raise ArgumentError(
                        f"{self.where} dimension {axis}: {self.binders[value][0]}={extent} is "
                        f"outside [{limits[0]}, {'...' if limits[1] is None else limits[1]}], "
                        f"the range the function was compiled for")
                bound[value] = extent
            elif extent != bound[value]:
                name, binder = self.binders[value]
                raise ArgumentError(f"{self.where} dimension {axis}: expected {name}="
                                    f"{bound[value]} (bound by argument {binder!r}), got "
                                    f"{extent}")
        if ptr % self.itemsize:
            raise ArgumentError(f"{self.where}: data at address {ptr:#x} is not aligned to its "
                                f"{self.itemsize}-byte elements; pass a copy (np.array(x))")
        ints[self.slot] = ptr
        return converted

    def _declared(self) -> tuple:
        return self.info.shape

    def _checked_address(self, array: np.ndarray) -> int:
        if not array.flags.c_contiguous:
            raise self._not_contiguous(array)
        return array.__array_interface__["data"][0]

    def _not_contiguous(self, array) -> ArgumentError:
        return ArgumentError(f"{self.where} is not C-contiguous (shape {array.shape}, strides "
                             f"{array.strides}); kiln writes outputs in place, so it will not "
                             f"copy it for you: pass np.ascontiguousarray(x)")

    def _convert(self, arg) -> np.ndarray:
        if isinstance(arg, NDArray):
            if not arg._contiguous:
                raise self._not_contiguous(arg._array)
            return arg._array
        if isinstance(arg, np.ndarray):
            return arg
        if hasattr(arg, "__dlpack__"):
            try:
                return np.from_dlpack(arg)
            except (BufferError, TypeError, ValueError, RuntimeError) as err:
                raise ArgumentError(f"{self.where}: cannot import {type(arg).__name__} through "
                                    f"DLPack: {err}") from None
        raise ArgumentError(f"{self.where} expects an array of {self.info.dtype} (kiln NDArray, "
                            f"numpy array or DLPack tensor), got {type(arg).__name__}")


class _IntParam(_Param):
    def __init__(self, function, position, info, size_range=None, checked=False):
        super().__init__(function, position, info)
        self.low, self.high = _INT_RANGES[info.dtype]
        self.size_range = size_range         # a size argument's compiled range, or None
        self.checked = checked               # whether the function's size checks read it

    def pack(self, arg, ints, floats, bound):
        value = arg if type(arg) is int else self._convert(arg)
        if not self.low <= value <= self.high:
            raise ArgumentError(f"{self.where}: {value} is out of range for {self.info.dtype}")
        r = self.size_range
        if r is not None and (value < r[0] or r[1] is not None and value > r[1]):
            raise ArgumentError(f"{self.where}: {value} is outside [{r[0]}, "
                                f"{'...' if r[1] is None else r[1]}], the range the function "
                                f"was compiled for")
        if self.size_range is not None or self.checked:
            bound.append((self, None, self.info.name, value))     # for the size checks
        # uint64 values above 2**63 travel as their two's-complement bit pattern.
        ints[self.slot] = value if value <= 0x7FFFFFFFFFFFFFFF else value - (1 << 64)

    def _convert(self, arg) -> int:
        if isinstance(arg, np.ndarray) and arg.ndim == 0:
            arg = arg[()]
        if isinstance(arg, (int, np.integer)) and not isinstance(arg, (bool, np.bool_)):
            return int(arg)
        raise ArgumentError(f"{self.where} expects an integer ({self.info.dtype}), got "
                            f"{_describe_value(arg)}")


class _FloatParam(_Param):
    def pack(self, arg, ints, floats, bound):
        kind = type(arg)
        floats[self.slot] = arg if kind is float or kind is int else self._convert(arg)

    def _convert(self, arg) -> float:
        if isinstance(arg, np.ndarray) and arg.ndim == 0:
            arg = arg[()]
        if isinstance(arg, (int, float, np.integer, np.floating)) \
                and not isinstance(arg, (bool, np.bool_)):
            return float(arg)
        raise ArgumentError(f"{self.where} expects a real number ({self.info.dtype}), got "
                            f"{_describe_value(arg)}")


class _BoolParam(_Param):
    def pack(self, arg, ints, floats, bound):
        if isinstance(arg, np.ndarray) and arg.ndim == 0:
            arg = arg[()]
        if isinstance(arg, (bool, np.bool_)) or (isinstance(arg, (int, np.integer))
                                                 and arg in (0, 1)):
            ints[self.slot] = 1 if arg else 0
            return
        raise ArgumentError(f"{self.where} expects a bool, got {_describe_value(arg)}")


def _describe_value(arg) -> str:
    text = repr(arg)
    return f"{type(arg).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _make_params(info: FunctionInfo) -> list[_Param]:
    slots = {name: k for k, (name, _) in enumerate(info.shape_vars)}
    shape_var_dtypes = tuple(d for _, d in info.shape_vars)
    shape_var_bounds = tuple(info.bounds.get(n) for n, _ in info.shape_vars)
    binders: dict[int, tuple[str, str]] = {}
    params: list[_Param] = []
    for position, p in enumerate(info.params):
        if p.kind == "buffer":
            dims = []
            for axis, extent in enumerate(p.shape):
                if isinstance(extent, int):
                    dims.append((axis, _CHECK_CONSTANT, extent))
                elif not extent.isidentifier():      # an expression of the sizes
                    dims.append((axis, _CHECK_EXPRESSION, extent))
                elif slots[extent] in binders:
                    dims.append((axis, _CHECK_BOUND, slots[extent]))
                else:
                    # The first buffer dimension (in parameter order) that mentions a size binds it.
                    binders[slots[extent]] = (extent, p.name)
                    dims.append((axis, _BIND, slots[extent]))
            params.append(_BufferParam(info.name, position, p, tuple(dims), binders,
                                       shape_var_dtypes, shape_var_bounds))
        elif p.dtype == "bool":
            params.append(_BoolParam(info.name, position, p))
        elif p.dtype.startswith("float"):
            params.append(_FloatParam(info.name, position, p))
        else:
            params.append(_IntParam(info.name, position, p, info.bounds.get(p.name),
                                    bool(info.checks)))
    return params


class PackedFunction:
    """A compiled function checked against its FunctionInfo; call it like a Python function.

    Buffer arguments are kiln NDArrays, numpy arrays (used in place: outputs are written into
    them) or DLPack tensors; scalars are Python or numpy numbers.

    Example:
        >>> f = module["vadd"]                              # doctest: +SKIP
        >>> f(np.ones(4, "float32"), np.ones(4, "float32"), out)  # doctest: +SKIP
    """

    def __init__(self, info: FunctionInfo, address: int, owner=None, status_messages=None):
        if not isinstance(address, int) or address <= 0:
            raise ValueError(f"function {info.name!r}: invalid native address {address!r}")
        self.info = info
        self.address = address
        self._owner = owner           # keeps the JIT engine / shared library (the code) alive
        self._status_messages = status_messages
        self._native = _NATIVE_SIGNATURE(address)
        self._params = _make_params(info)
        self._packers = tuple(p.pack for p in self._params)
        self._num_params = len(info.params)
        self._num_values = self._num_params + len(info.shape_vars)
        self._unbound = [0] * len(info.shape_vars)
        self._ints, self._floats = self._new_values()
        self._values_address = _addressof(self._ints)
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.info.name

    def _new_values(self):
        ints = (ctypes.c_int64 * max(self._num_values, 1))()
        return ints, (ctypes.c_double * max(self._num_values, 1)).from_buffer(ints)

    def _pack(self, args, ints, floats) -> list | None:
        """Check `args` and write them into the KilnValue array; returns converted arrays that
        must live until the call returns (None when there are none)."""
        if len(args) != self._num_params:
            raise ArgumentError(f"{self.info.signature()} takes {self._num_params} argument(s), "
                                f"got {len(args)}")
        bound = self._unbound.copy()
        keep = None
        for pack, arg in zip(self._packers, args):
            converted = pack(arg, ints, floats, bound)
            if converted is not None:
                keep = [converted] if keep is None else keep + [converted]
        base = self._num_params
        n = len(self._unbound)
        for k in range(n):
            ints[base + k] = bound[k]
        if len(bound) > n or self.info.checks:
            self._check_sizes(bound)
        return keep

    def _check_sizes(self, bound: list) -> None:
        """Extents that are expressions of the sizes, then the function's size checks, once
        every size (extent or integer argument) is known."""
        env = {name: bound[k] for k, (name, _) in enumerate(self.info.shape_vars)}
        extents = []
        for param, axis, text, value in bound[len(self._unbound):]:
            if axis is None:
                env[text] = value                 # an integer size argument
            else:
                extents.append((param, axis, text, value))
        for param, axis, text, extent in extents:
            want = symbolic.evaluate(text, env)
            if extent != want:
                raise ArgumentError(f"{param.where} dimension {axis}: expected {text} = {want}, "
                                    f"got {extent}")
        for text in self.info.checks:
            if symbolic.evaluate(text, env) < 0:
                raise ArgumentError(f"{self.info.name}: the sizes {env} put a slice outside "
                                    f"its tensor ({text} < 0)")

    def __call__(self, *args) -> None:
        # The shared value array is used when no other thread is inside a call of this
        # function (ctypes releases the GIL during the native call); otherwise a fresh one.
        if self._lock.acquire(False):
            try:
                keep = self._pack(args, self._ints, self._floats)  # noqa: F841
                status = self._native(self._values_address, self._num_values)
            finally:
                self._lock.release()
        else:
            ints, floats = self._new_values()
            keep = self._pack(args, ints, floats)  # noqa: F841  (alive across the call)
            status = self._native(_addressof(ints), self._num_values)
        if status:
            raise self.status_error(status)

    def status_error(self, status: int, during: str = "") -> NativeCallError:
        """The error for a non-zero status, with the code generator's message when known.

        Example:
            >>> f.status_error(3)   # doctest: +SKIP
            NativeCallError("kiln function 'f' failed with status 3: assert n > 0")
        """
        known = self._status_messages
        message = None
        if known is not None:
            message = known(status) if callable(known) else known.get(status)
        detail = f": {message}" if message else " (a check in the generated code did not hold)"
        return NativeCallError(f"kiln function {self.info.name!r} failed with status "
                               f"{status}{during}{detail}")

    def prepare(self, *args):
        """Check `args` once and return (values, keepalive) for repeated raw calls (timing).

        Example:
            >>> values, keep = f.prepare(a, b, c)   # doctest: +SKIP
        """
        ints, floats = self._new_values()
        keep = self._pack(args, ints, floats)
        return ints, (keep, args)

    def __repr__(self):
        return f"<kiln.PackedFunction {self.info.signature()}>"

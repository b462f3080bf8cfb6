"""NDArray: an n-dimensional array on a device, backed on the CPU by a numpy array.

Arrays kiln allocates are 64-byte aligned (a full AVX-512 register / cache line), so generated
code may use aligned vector loads on them. Arrays imported through DLPack keep the producer's
memory and alignment.
"""
from __future__ import annotations

import numpy as np

from . import _dtype
from .device import Device, as_device, cpu, require_cpu

ALIGNMENT = 64


def _aligned_empty(shape: tuple, np_dtype: np.dtype) -> np.ndarray:
    # Over-allocate bytes and start at the first aligned address; the array keeps the raw block
    # alive through its .base.
    nbytes = int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGNMENT
    # (np.ndarray keeps the offset even for zero-size arrays, where slicing would not.)
    return np.ndarray(shape, dtype=np_dtype, buffer=raw, offset=offset)


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _check_shape(shape) -> tuple:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    for extent in shape:
        if isinstance(extent, bool) or not isinstance(extent, (int, np.integer)) or extent < 0:
            raise ValueError(f"shape {shape!r}: every extent must be a non-negative int")
    return tuple(int(e) for e in shape)


class NDArray:
    """An array on a device (the CPU: a numpy array kiln may hand to native code).

    Build one with `array`, `empty` or `from_dlpack`; `NDArray(np_array)` wraps an existing
    numpy array without copying.

    Example:
        >>> a = array(np.arange(4, dtype="float32"))
        >>> a.shape, a.dtype
        ((4,), 'float32')
    """

    __slots__ = ("_array", "_device", "_ptr", "_contiguous", "__weakref__")

    def __init__(self, data: np.ndarray, device: Device | None = None):
        if not isinstance(data, np.ndarray):
            raise TypeError(f"NDArray wraps a numpy array, got {type(data).__name__}; "
                            f"use kiln.runtime.array(...) to convert other data")
        _dtype.canonical(data.dtype)
        self._device = as_device(device)
        require_cpu(self._device, "NDArray")
        self._array = data
        # The wrapped array is private, so its address and layout never change: cache them
        # for the per-call checks of PackedFunction.
        self._ptr = _address(data)
        self._contiguous = bool(data.flags.c_contiguous)

    # ------------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple:
        return self._array.shape

    @property
    def dtype(self) -> str:
        return self._array.dtype.name

    @property
    def device(self) -> Device:
        return self._device

    @property
    def ndim(self) -> int:
        return self._array.ndim

    @property
    def size(self) -> int:
        return self._array.size

    @property
    def nbytes(self) -> int:
        return self._array.nbytes

    @property
    def data_ptr(self) -> int:
        """Address of the first element."""
        return self._ptr

    @property
    def is_contiguous(self) -> bool:
        """True when the elements are packed in row-major (C) order."""
        return self._contiguous

    # ------------------------------------------------------------------ copies
    def numpy(self) -> np.ndarray:
        """A numpy copy of the contents.

        Example:
            >>> array([1, 2]).numpy()
            array([1, 2])
        """
        return self._array.copy()

    def copyfrom(self, source) -> "NDArray":
        """Overwrite the contents from a numpy array, list or NDArray of the same shape.

        Values are converted to this array's dtype as numpy's astype would.

        Example:
            >>> empty((2,), "int32").copyfrom([3, 4]).numpy()
            array([3, 4], dtype=int32)
        """
        if isinstance(source, NDArray):
            source = source._array
        source = np.asarray(source)
        if source.shape != self.shape:
            raise ValueError(f"copyfrom: source has shape {source.shape}, this array has shape "
                             f"{self.shape}")
        np.copyto(self._array, source, casting="unsafe")
        return self

    def copyto(self, target):
        """Copy into an NDArray or numpy array of the same shape and dtype, or to a Device
        (returning a new NDArray there).

        Example:
            >>> out = np.empty(2, "int64")
            >>> _ = array([5, 6]).copyto(out); out
            array([5, 6])
        """
        if isinstance(target, (Device, str)):
            result = empty(self.shape, self.dtype, target)
            np.copyto(result._array, self._array)
            return result
        dest = target._array if isinstance(target, NDArray) else target
        if not isinstance(dest, np.ndarray):
            raise TypeError(f"copyto: target must be an NDArray, numpy array or Device, got "
                            f"{type(target).__name__}")
        if dest.shape != self.shape or dest.dtype != self._array.dtype:
            raise ValueError(f"copyto: target is {_dtype.describe(dest.dtype)}{list(dest.shape)}, "
                             f"this array is {self.dtype}{list(self.shape)}")
        np.copyto(dest, self._array)
        return target

    # ------------------------------------------------------------------ interop
    def __dlpack__(self, **kwargs):
        """Export through DLPack (zero-copy), so np.from_dlpack / torch.from_dlpack work."""
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    def __array__(self, dtype=None, copy=None):
        # Lets np.asarray(nd) see the same memory; numpy asks for a copy explicitly when needed.
        data = self._array if dtype is None else self._array.astype(dtype, copy=False)
        return data.copy() if copy else data

    def __repr__(self):
        return (f"<kiln.NDArray shape={self.shape} dtype={self.dtype} device={self._device!r}>\n"
                f"{np.array2string(self._array, threshold=64)}")


def empty(shape, dtype="float32", device=None) -> NDArray:
    """An uninitialised array: on the CPU 64-byte aligned, on a GPU in its memory.

    Example:
        >>> empty((2, 3)).shape
        (2, 3)
    """
    device = as_device(device)
    if device.device_type != "cpu":
        from .gpu import DeviceNDArray
        return DeviceNDArray(_check_shape(shape), _dtype.canonical(dtype), device)
    return NDArray(_aligned_empty(_check_shape(shape), _dtype.to_numpy(dtype)), device)


def array(data, device=None, dtype=None) -> NDArray:
    """An NDArray from a numpy array, list, scalar, NDArray or DLPack tensor (e.g. torch).

    numpy arrays, lists and NDArrays are COPIED into new aligned storage (or, for a GPU
    `device` such as kiln.opencl(0), into the device's memory). An object with
    `__dlpack__` is imported without a copy (np.from_dlpack); asking for another `dtype` then
    makes a converted copy.

    Example:
        >>> array([[1.0, 2.0]], dtype="float32")
        <kiln.NDArray shape=(1, 2) dtype=float32 device=cpu(0)>
        [[1. 2.]]
    """
    device = as_device(device)
    if device.device_type != "cpu":
        from .gpu import DeviceNDArray
        host = array(data.numpy() if isinstance(data, DeviceNDArray) else data, dtype=dtype)
        return empty(host.shape, host.dtype, device).copyfrom(host._array)
    if isinstance(data, NDArray):
        source = data._array
    elif isinstance(data, np.ndarray):
        source = data
    elif hasattr(data, "__dlpack__"):
        imported = from_dlpack(data)
        if dtype is None or _dtype.canonical(dtype) == imported.dtype:
            return imported
        source = imported._array
    else:
        try:
            source = np.asarray(data, dtype=None if dtype is None else _dtype.to_numpy(dtype))
        except (TypeError, ValueError) as err:
            raise TypeError(f"cannot make a kiln array from {type(data).__name__}: {err}") from None
    if source.dtype == object:
        raise TypeError(f"cannot make a kiln array from {type(data).__name__}: numpy reads it "
                        f"as dtype object")
    # A copy is made anyway, so a byte-swapped source simply becomes native.
    target_dtype = _dtype.canonical(source.dtype.newbyteorder("=") if dtype is None else dtype)
    result = empty(source.shape, target_dtype, device)
    np.copyto(result._array, source, casting="unsafe")
    return result


def from_dlpack(tensor) -> NDArray:
    """Import a DLPack tensor (torch, numpy, jax, another NDArray, ...) without copying.

    Example:
        >>> x = np.arange(3.0)
        >>> from_dlpack(x).data_ptr == x.ctypes.data
        True
    """
    if isinstance(tensor, NDArray):
        return NDArray(tensor._array, tensor.device)
    if not hasattr(tensor, "__dlpack__"):
        raise TypeError(f"from_dlpack needs an object with __dlpack__ (a torch tensor, numpy "
                        f"array, ...), got {type(tensor).__name__}")
    try:
        data = np.from_dlpack(tensor)
    except (BufferError, TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"cannot import {type(tensor).__name__} through DLPack: {err} (kiln "
                         f"imports CPU tensors; a torch tensor that requires grad must be "
                         f"detached first)") from None
    return NDArray(data, cpu(0))


"""Arrays in a GPU's memory."""
from __future__ import annotations

import weakref

import numpy as np

from .. import _dtype
from ..device import Device
from .api import device_api


class DeviceNDArray:
    """An n-dimensional array in a device's memory (row-major, contiguous).

    Made by kiln.nd.array(x, device=kiln.opencl(0)) / kiln.nd.empty(shape, dtype, device);
    `numpy()` copies it back to the host.

    Example:
        >>> a = kiln.nd.array(np.ones(4, "float32"), device=kiln.opencl(0))   # doctest: +SKIP
        >>> a.numpy()                                                         # doctest: +SKIP
        array([1., 1., 1., 1.], dtype=float32)
    """

    __slots__ = ("shape", "dtype", "device", "handle", "_api", "_base", "__weakref__")

    def __init__(self, shape: tuple, dtype: str, device: Device):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = _dtype.canonical(dtype)
        self.device = device
        self._api = device_api(device)
        self._base = None
        self.handle = self._api.alloc(self.nbytes)
        weakref.finalize(self, self._api.free, self.handle)

    def view(self, shape: tuple, dtype: str) -> "DeviceNDArray":
        """The first bytes of this array's memory as another shape and dtype (no copy), e.g.
        an execution graph's entry in its planned storage.

        Example:
            >>> storage.view((2, 3), "float32")   # doctest: +SKIP
        """
        out = object.__new__(DeviceNDArray)
        out.shape, out.dtype = tuple(int(s) for s in shape), _dtype.canonical(dtype)
        out.device, out._api, out.handle, out._base = self.device, self._api, self.handle, self
        if out.nbytes > self.nbytes:
            raise ValueError(f"a {out.dtype}{list(out.shape)} view needs {out.nbytes} bytes; the "
                             f"array has {self.nbytes}")
        return out

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * _dtype.to_numpy(self.dtype).itemsize

    def copyfrom(self, source) -> "DeviceNDArray":
        """Overwrite the contents from host data (numpy array, list, CPU NDArray) or another
        array on the same device, of the same shape."""
        if isinstance(source, DeviceNDArray):
            if source.shape != self.shape or source.dtype != self.dtype:
                raise ValueError(f"copyfrom: source is {source.dtype}{list(source.shape)}, this "
                                 f"array is {self.dtype}{list(self.shape)}")
            if source.device != self.device:
                source = source.numpy()
            else:
                self._api.copy_on_device(self.handle, source.handle, self.nbytes)
                return self
        host = np.asarray(source)
        if host.shape != self.shape:
            raise ValueError(f"copyfrom: source has shape {host.shape}, this array has shape "
                             f"{self.shape}")
        host = np.ascontiguousarray(host, dtype=_dtype.to_numpy(self.dtype))
        self._api.copy_from_host(self.handle, host)
        return self

    def numpy(self) -> np.ndarray:
        """A host copy of the contents (waits for the device's queued work)."""
        out = np.empty(self.shape, _dtype.to_numpy(self.dtype))
        self._api.sync()
        self._api.copy_to_host(self.handle, out)
        return out

    def copyto(self, target):
        """Copy to a Device (a new array there), or into an array of the same shape."""
        from ..device import as_device
        from ..ndarray import array
        if isinstance(target, (Device, str)):
            device = as_device(target)
            return array(self.numpy(), device=device)
        if isinstance(target, DeviceNDArray):
            return target.copyfrom(self)
        if isinstance(target, np.ndarray):
            np.copyto(target, self.numpy())
            return target
        return target.copyfrom(self.numpy())

    def __array__(self, dtype=None, copy=None):
        data = self.numpy()
        return data if dtype is None else data.astype(dtype)

    def __repr__(self):
        return f"<kiln.DeviceNDArray shape={self.shape} dtype={self.dtype} device={self.device!r}>"

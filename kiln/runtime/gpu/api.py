"""The interface each GPU runtime implements, and the registry from device type to it."""
from __future__ import annotations

from typing import Callable

from ..device import Device


class DeviceUnavailableError(RuntimeError):
    """A device that cannot be used here: its driver or Python package is missing, or there
    is no such device. The message says what is missing and how to get it."""


class DeviceAPI:
    """Memory, copies, programs and launches on one device.

    Handles (device memory, programs, kernels) are whatever the driver binding uses; only
    the DeviceAPI that made them looks inside.

    Example:
        >>> api = device_api(kiln.opencl(0))            # doctest: +SKIP
        >>> mem = api.alloc(1024); api.free(mem)        # doctest: +SKIP
    """

    device: Device
    name: str = ""

    def alloc(self, nbytes: int): raise NotImplementedError
    def free(self, mem) -> None: raise NotImplementedError
    def copy_from_host(self, mem, host) -> None: raise NotImplementedError
    def copy_to_host(self, mem, host) -> None: raise NotImplementedError
    def copy_on_device(self, dst, src, nbytes: int) -> None: raise NotImplementedError
    def load_program(self, binary: bytes | str): raise NotImplementedError
    def get_kernel(self, program, name: str): raise NotImplementedError

    def launch(self, kernel, grid, block, args) -> None:
        """Run kernel on grid x block threads; args are (kind, value, dtype) with kind
        "buffer" (a handle from alloc) or "scalar"."""
        raise NotImplementedError

    def sync(self) -> None: raise NotImplementedError

    def time(self, fn: Callable[[], None], number: int) -> float:
        """Seconds per call of fn (which queues work), measured by device events."""
        raise NotImplementedError


_FACTORIES: dict[str, Callable[[int], DeviceAPI]] = {}
_APIS: dict[Device, DeviceAPI] = {}


def register_device_api(device_type: str, factory: Callable[[int], DeviceAPI]) -> None:
    """Make `factory(index)` the way to open devices of a type.

    Example:
        >>> register_device_api("opencl", OpenCLDeviceAPI)   # doctest: +SKIP
    """
    _FACTORIES[device_type] = factory


def device_api(device: Device) -> DeviceAPI:
    """The (one, cached) DeviceAPI of a device.

    Example:
        >>> device_api(kiln.opencl(0)).name   # doctest: +SKIP
        'pthread-haswell-AMD EPYC 7B13'
    """
    api = _APIS.get(device)
    if api is None:
        _load_builtin()
        factory = _FACTORIES.get(device.device_type)
        if factory is None:
            raise DeviceUnavailableError(f"no runtime for {device!r}; kiln runs arrays and "
                                         f"kernels on: cpu, {', '.join(sorted(_FACTORIES))}")
        api = _APIS[device] = factory(device.index)
    return api


def _load_builtin():
    from . import cuda, opencl  # noqa: F401  (they register themselves)

"""Devices: where an array lives and a function runs ("cpu(0)")."""
from __future__ import annotations

from dataclasses import dataclass

# DLPack's device codes, so that __dlpack_device__ and Device agree.
DLPACK_CODES = {"cpu": 1, "cuda": 2, "opencl": 4, "vulkan": 7, "metal": 8, "ext_dev": 12}


@dataclass(frozen=True)
class Device:
    """A device type and index; equal devices compare and hash equal.

    Arrays live on "cpu", "cuda" and "opencl" devices (kiln.runtime.gpu drives the GPUs); the
    other DLPack device types are named so that later back-ends extend this table rather than
    the API.

    Example:
        >>> Device("cpu", 0)
        cpu(0)
    """

    device_type: str
    index: int = 0

    def __post_init__(self):
        if self.device_type not in DLPACK_CODES:
            raise ValueError(f"unknown device type {self.device_type!r}; expected one of "
                             f"{', '.join(DLPACK_CODES)}")
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise ValueError(f"device index must be a non-negative int, got {self.index!r}")

    @property
    def dlpack_code(self) -> int:
        """DLPack's code for this device type (1 for the CPU)."""
        return DLPACK_CODES[self.device_type]

    def sync(self) -> None:
        """Wait for queued work on the device (CPU calls are synchronous)."""
        if self.device_type != "cpu":
            from .gpu import device_api
            device_api(self).sync()

    def __repr__(self):
        return f"{self.device_type}({self.index})"


def cpu(index: int = 0) -> Device:
    """The host CPU.

    Example:
        >>> cpu(0)
        cpu(0)
    """
    return Device("cpu", index)


def cuda(index: int = 0) -> Device:
    """An NVIDIA GPU, driven through the CUDA driver API.

    Example:
        >>> cuda(0)
        cuda(0)
    """
    return Device("cuda", index)


def opencl(index: int = 0) -> Device:
    """The index-th OpenCL device (over all platforms in order; PoCL's CPU device where no
    GPU driver is installed).

    Example:
        >>> opencl(0)
        opencl(0)
    """
    return Device("opencl", index)


def as_device(device) -> Device:
    """Accept None (the CPU), a Device, or a string such as "cpu" or "cpu:0".

    Example:
        >>> as_device("cpu")
        cpu(0)
    """
    if device is None:
        return cpu(0)
    if isinstance(device, Device):
        return device
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if index and not index.isdigit():
            raise ValueError(f"cannot read device {device!r}; write e.g. 'cpu' or 'cpu:0'")
        return Device(kind, int(index) if index else 0)
    raise TypeError(f"expected a kiln Device (e.g. kiln.runtime.cpu(0)), got {device!r}")


def require_cpu(device: Device, what: str) -> None:
    """Raise a clear error when `what` is asked of a device the runtime cannot drive yet."""
    if device.device_type != "cpu":
        raise NotImplementedError(f"{what} on {device!r}: only cpu devices are supported by "
                                  f"this runtime")

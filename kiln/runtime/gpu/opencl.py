"""OpenCL devices through pyopencl: any OpenCL implementation (a GPU's driver, or PoCL on the
CPU, which runs GPU-style kernels with work-groups, local memory and barriers).

KILN_OPENCL_BUILD_OPTIONS (e.g. "-cl-opt-disable") is handed to the driver's compiler: a test
of hundreds of small kernels on PoCL runs 2-3x faster unoptimized.

PoCL 3.1 (Debian 12) has a bug that this option works around: optimizing, with its default
work-group method, it computed wrong results for some tiled kernels with virtual threads — a
matmul tile of 8 virtual threads of one column each lost the second step of its reduction in
up to 790 of 1,073 outputs, differently from run to run, while the same OpenCL C was right
built with "-cl-opt-disable" (and under PoCL's other method, "loops", which aborted on a tiled
convolution instead). The tests that run tuned or random GPU schedules on PoCL build that
way. kiln does not turn optimization off by itself: it made whole models 9x slower on PoCL
(ResNet-18: 19 s -> 172 s for its test), and no model's default schedule was seen to trip the
bug.
"""
from __future__ import annotations

import os
import time

import numpy as np

from ..device import Device
from .api import DeviceAPI, DeviceUnavailableError, register_device_api

INSTALL = ("pip install pyopencl, and an OpenCL driver: a GPU vendor's, or on any CPU "
           "Debian's pocl-opencl-icd (apt-get install pocl-opencl-icd)")


def opencl_devices() -> list:
    """Every OpenCL device of every platform, in platform order (index = kiln.opencl(i))."""
    try:
        import pyopencl as cl
    except ImportError as err:
        raise DeviceUnavailableError(f"OpenCL needs the pyopencl package ({err}); {INSTALL}") from None
    try:
        platforms = cl.get_platforms()
    except cl.Error as err:
        raise DeviceUnavailableError(f"no OpenCL platform ({err}); {INSTALL}") from None
    return [d for p in platforms for d in p.get_devices()]


class OpenCLDeviceAPI(DeviceAPI):
    def __init__(self, index: int):
        devices = opencl_devices()            # a DeviceUnavailableError without pyopencl
        import pyopencl as cl
        if index >= len(devices):
            raise DeviceUnavailableError(f"opencl({index}) does not exist: this machine has "
                                         f"{len(devices)} OpenCL device(s)")
        self.cl = cl
        self.device = Device("opencl", index)
        self.cl_device = devices[index]
        self.name = self.cl_device.name
        self.context = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(self.context,
                                     properties=cl.command_queue_properties.PROFILING_ENABLE)
        self._last_event = None

    def alloc(self, nbytes: int):
        return self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, size=max(1, nbytes))

    def free(self, mem) -> None:
        mem.release()

    def copy_from_host(self, mem, host) -> None:
        if host.nbytes:
            self.cl.enqueue_copy(self.queue, mem, np.ascontiguousarray(host), is_blocking=True)

    def copy_to_host(self, mem, host) -> None:
        if host.nbytes:
            self.cl.enqueue_copy(self.queue, host, mem, is_blocking=True)

    def copy_on_device(self, dst, src, nbytes: int) -> None:
        if nbytes:
            self.cl.enqueue_copy(self.queue, dst, src, byte_count=nbytes)

    def load_program(self, binary):
        source = binary.decode() if isinstance(binary, bytes) else binary
        try:
            options = os.environ.get("KILN_OPENCL_BUILD_OPTIONS", "").split()
            return self.cl.Program(self.context, source).build(options=options)
        except self.cl.Error as err:
            raise RuntimeError(f"the OpenCL driver ({self.name}) rejected the kernels: {err}") from None

    def get_kernel(self, program, name: str):
        return getattr(program, name)

    def launch(self, kernel, grid, block, args) -> None:
        values = [v if kind == "buffer" else np.dtype(dtype).type(v) for kind, v, dtype in args]
        global_size = tuple(int(g) * int(b) for g, b in zip(grid, block))
        self._last_event = kernel(self.queue, global_size, tuple(int(b) for b in block), *values)

    def sync(self) -> None:
        self.queue.finish()

    def time(self, fn, number: int) -> float:
        self.sync()
        start = time.perf_counter()
        first = None
        for _ in range(number):
            fn()
            first = first or self._last_event
        self.sync()
        if first is not None and self._last_event is not None:
            try:
                return (self._last_event.profile.end - first.profile.start) * 1e-9 / number
            except self.cl.Error:
                pass
        return (time.perf_counter() - start) / number


register_device_api("opencl", OpenCLDeviceAPI)

"""CUDA devices through the CUDA driver API (the `cuda-bindings` package): memory, copies,
modules loaded from PTX (the driver compiles it for the GPU it has), launches, event timing."""
from __future__ import annotations

import ctypes

from ..device import Device
from .api import DeviceAPI, DeviceUnavailableError, register_device_api

INSTALL = "pip install cuda-bindings, on a machine with an NVIDIA GPU and its driver"
_CTYPES = {"int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
           "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16,
           "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64, "bool": ctypes.c_bool,
           "float32": ctypes.c_float, "float64": ctypes.c_double}


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as err:
        raise DeviceUnavailableError(f"CUDA needs the cuda-bindings package ({err}); "
                                     f"{INSTALL}") from None
    return driver


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


class CudaDeviceAPI(DeviceAPI):
    def __init__(self, index: int):
        cu = self.cu = _driver()
        try:
            self._check(cu.cuInit(0), "cuInit")
        except (CudaError, RuntimeError, OSError) as err:
            raise DeviceUnavailableError(f"cuda({index}): no usable CUDA driver here ({err}); "
                                         f"{INSTALL}") from None
        count = self._check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
        if index >= count:
            raise DeviceUnavailableError(f"cuda({index}) does not exist: this machine has "
                                         f"{count} CUDA device(s)")
        self.device = Device("cuda", index)
        self.cu_device = self._check(cu.cuDeviceGet(index), "cuDeviceGet")
        self.name = self._check(cu.cuDeviceGetName(256, self.cu_device), "cuDeviceGetName") \
            .split(b"\0")[0].decode()
        self.context = self._check(cu.cuDevicePrimaryCtxRetain(self.cu_device),
                                   "cuDevicePrimaryCtxRetain")
        self._current()

    def _check(self, result, call: str):
        err, *values = result
        if int(err) != 0:
            _, text = self.cu.cuGetErrorString(err)
            raise CudaError(f"{call} failed: {err!r} ({text.decode() if text else 'unknown'})")
        return values[0] if len(values) == 1 else tuple(values)

    def _current(self):
        self._check(self.cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def alloc(self, nbytes: int):
        self._current()
        return self._check(self.cu.cuMemAlloc(max(1, nbytes)), "cuMemAlloc")

    def free(self, mem) -> None:
        self._current()
        self._check(self.cu.cuMemFree(mem), "cuMemFree")

    def copy_from_host(self, mem, host) -> None:
        if host.nbytes:
            self._current()
            self._check(self.cu.cuMemcpyHtoD(mem, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def copy_to_host(self, mem, host) -> None:
        if host.nbytes:
            self._current()
            self._check(self.cu.cuMemcpyDtoH(host.ctypes.data, mem, host.nbytes), "cuMemcpyDtoH")

    def copy_on_device(self, dst, src, nbytes: int) -> None:
        if nbytes:
            self._current()
            self._check(self.cu.cuMemcpyDtoD(dst, src, nbytes), "cuMemcpyDtoD")

    def load_program(self, binary):
        data = binary.encode() if isinstance(binary, str) else binary
        self._current()
        return self._check(self.cu.cuModuleLoadData(data + b"\0"), "cuModuleLoadData")

    def get_kernel(self, program, name: str):
        return self._check(self.cu.cuModuleGetFunction(program, name.encode()),
                           f"cuModuleGetFunction({name})")

    def launch(self, kernel, grid, block, args) -> None:
        values = [ctypes.c_uint64(int(v)) if kind == "buffer" else _CTYPES[dtype](v)
                  for kind, v, dtype in args]
        pointers = (ctypes.c_void_p * max(1, len(values)))(
            *[ctypes.addressof(v) for v in values])
        self._current()
        self._check(self.cu.cuLaunchKernel(kernel, *[int(g) for g in grid],
                                           *[int(b) for b in block], 0, 0,
                                           ctypes.addressof(pointers), 0), "cuLaunchKernel")

    def sync(self) -> None:
        self._current()
        self._check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")

    def time(self, fn, number: int) -> float:
        cu = self.cu
        self._current()
        start = self._check(cu.cuEventCreate(0), "cuEventCreate")
        end = self._check(cu.cuEventCreate(0), "cuEventCreate")
        try:
            self._check(cu.cuEventRecord(start, 0), "cuEventRecord")
            for _ in range(number):
                fn()
            self._check(cu.cuEventRecord(end, 0), "cuEventRecord")
            self._check(cu.cuEventSynchronize(end), "cuEventSynchronize")
            ms = self._check(cu.cuEventElapsedTime(start, end), "cuEventElapsedTime")
        finally:
            cu.cuEventDestroy(start)
            cu.cuEventDestroy(end)
        return ms * 1e-3 / number


register_device_api("cuda", CudaDeviceAPI)

"""GPU devices for the runtime: device memory, copies, kernel modules and launches.

One DeviceAPI per device type (kiln.runtime.gpu.opencl through pyopencl, kiln.runtime.gpu.cuda
through the CUDA driver API of `cuda-bindings`), found through `device_api(device)`; arrays on
a device are DeviceNDArrays; a compiled GPU function is a DeviceModule: kernels plus the
host's launch plan. Like the rest of kiln.runtime, nothing here imports the compiler.
"""
from .api import DeviceAPI, DeviceUnavailableError, device_api, register_device_api
from .array import DeviceNDArray
from .module import DeviceModule

__all__ = ["DeviceAPI", "DeviceModule", "DeviceNDArray", "DeviceUnavailableError",
           "device_api", "register_device_api"]

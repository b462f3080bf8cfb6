"""What the GPU code generators share: the host / device split, the C-family kernel emitter
core, and the build driver that ties them into a kiln.runtime.gpu.DeviceModule."""
from .build import build_gpu, check_kernel_limits
from .split import Kernel, Split, split_host_device

__all__ = ["Kernel", "Split", "build_gpu", "check_kernel_limits", "split_host_device"]

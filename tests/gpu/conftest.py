"""Devices for the GPU tests: OpenCL (PoCL runs it on any CPU), CUDA (compiled through NVRTC
and ptxas everywhere they are installed; run only where an NVIDIA GPU is)."""
import pytest


def _device(kind):
    """(the device, None) when kiln can use device 0 of `kind`, else (None, why not)."""
    from kiln.runtime import Device
    from kiln.runtime.gpu import DeviceUnavailableError, device_api
    try:
        device_api(Device(kind, 0))
    except DeviceUnavailableError as err:
        return None, str(err)
    return Device(kind, 0), None


def _require(kind, fix):
    device, why = _device(kind)
    if device is None:
        pytest.skip(f"no {kind} device: {why}{fix}")
    return device


@pytest.fixture(scope="session")
def opencl_device():
    return _require("opencl", " (kiln selfcheck says how to install PoCL)")


@pytest.fixture(scope="session")
def cuda_device():
    return _require("cuda", "")


@pytest.fixture(scope="session")
def nvrtc():
    from kiln.codegen.cuda.nvrtc import nvrtc_available
    why = nvrtc_available()
    if why is not None:
        pytest.skip(f"NVRTC is not installed: {why}")


@pytest.fixture(scope="session")
def ptxas(nvrtc):
    from kiln.codegen.cuda.nvrtc import ptxas_path
    if ptxas_path() is None:
        pytest.skip("ptxas is not installed (pip install nvidia-cuda-nvcc; make installs it)")

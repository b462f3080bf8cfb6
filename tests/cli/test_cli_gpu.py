"""The CLI with GPU targets: compile for OpenCL and run the library (on PoCL here), print a
model's kernels as CUDA / PTX / OpenCL, and selfcheck's GPU lines."""
import numpy as np
import pytest


@pytest.fixture(scope="module")
def opencl_here():
    import kiln
    from kiln.runtime.gpu import DeviceUnavailableError, device_api
    try:
        device_api(kiln.opencl(0))
    except DeviceUnavailableError as err:
        pytest.skip(f"no OpenCL device: {err}")


def test_compile_for_opencl_and_run(cli, opencl_here, model_dir, image, onnx_reference, tmp_path):
    lib = tmp_path / "tiny_cl.so"
    out = cli.ok(cli("compile", model_dir / "tiny.onnx", "--target", "opencl", "-o", lib)).stdout
    assert out.startswith(f"wrote {lib}")
    np.savez(tmp_path / "in.npz", data=image)
    cli.ok(cli("run", lib, "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz"))
    with np.load(tmp_path / "out.npz") as npz:
        cli.close(npz["output0"], onnx_reference(image))
    source = cli.ok(cli("inspect", lib, "--format", "opencl")).stdout
    assert "__kernel void" in source and "get_local_id(0)" in source
    cli.error(cli("inspect", lib, "--format", "cuda"), 2, "holds no cuda kernels",
              "--target cuda")


def test_inspect_kernel_sources(cli, model_dir):
    from kiln.codegen.cuda.nvrtc import nvrtc_available
    cl = cli.ok(cli("inspect", model_dir / "tiny.onnx", "--format", "opencl")).stdout
    assert cl.count("__kernel void") >= 2
    if nvrtc_available() is None:           # a cuda build compiles its kernels with NVRTC
        cuda = cli.ok(cli("inspect", model_dir / "tiny.onnx", "--format", "cuda")).stdout
        assert 'extern "C" __global__ void' in cuda and "threadIdx.x" in cuda
        ptx = cli.ok(cli("inspect", model_dir / "tiny.onnx", "--format", "ptx")).stdout
        assert ".visible .entry" in ptx
    cli.error(cli("inspect", model_dir / "tiny.onnx", "--format", "cuda", "--target", "opencl"),
              2, "--format cuda shows cuda kernels, but --target is 'opencl'")


def test_selfcheck_gpu_lines(cli):
    out = cli.ok(cli("selfcheck")).stdout
    lines = {line.split()[1]: line for line in out.splitlines() if len(line.split()) > 2}
    assert "opencl" in lines and "cuda" in lines
    assert lines["opencl"].split()[0] in ("ok", "optional")
    if lines["opencl"].split()[0] == "optional":
        assert "pocl-opencl-icd" in lines["opencl"]
    if lines["cuda"].split()[0] == "optional":
        assert "pip install" in lines["cuda"]

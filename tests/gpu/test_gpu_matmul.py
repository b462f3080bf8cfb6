"""The paper's GPU matrix multiply written with kiln.te: on OpenCL (PoCL here, compared with
numpy) and as CUDA (NVRTC → PTX, checked by ptxas; run only where a CUDA GPU is)."""
import numpy as np
import pytest

import kiln
from matmul_schedules import matmul, paper_schedule

RTOL = 1e-5        # float32 sums of up to 256 products, compared with float64 numpy


def _run(mod, device, a, b, shape):
    A_d, B_d = kiln.nd.array(a, device=device), kiln.nd.array(b, device=device)
    C_d = kiln.nd.empty(shape, "float32", device)
    mod(A_d, B_d, C_d)
    return C_d.numpy()


@pytest.mark.parametrize("n,m,l", [(128, 128, 64), (100, 75, 37), (64, 200, 19)])
def test_paper_matmul_opencl(opencl_device, rng, n, m, l):
    A, B, C = matmul(n, m, l)
    s = paper_schedule(A, B, C)
    mod = kiln.build(s, [A, B, C], target="opencl")
    a = rng.standard_normal((l, n)).astype("float32")
    b = rng.standard_normal((l, m)).astype("float32")
    ref = a.astype("float64").T @ b.astype("float64")
    out = _run(mod, opencl_device, a, b, (n, m))
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=RTOL * np.abs(ref).max())


def test_paper_matmul_kernel_structure():
    """One kernel; shared tiles fetched between two barriers per k step; the accumulators
    private per virtual thread (2 x 2 x 4 x 4 = 64 registers' worth)."""
    A, B, C = matmul(128, 128, 64)
    f = kiln.lower(paper_schedule(A, B, C), [A, B, C], name="mm", target="opencl")
    text = str(f)
    assert text.count("thread_barrier()") == 2
    assert "C.local = allocate(float32, [64], scope='local')" in text
    assert "A.shared = allocate(float32, [512], scope='shared')" in text
    from kiln.codegen.gpu import split_host_device
    split = split_host_device(f)
    assert [k.name for k in split.kernels] == ["mm_kernel0"]
    assert split.plan == [["launch", "mm_kernel0", [2, 2, 1], [8, 8, 1],
                           [["buffer", "A"], ["buffer", "B"], ["buffer", "C"]]]]


def test_storage_align_pads_the_shared_tiles(opencl_device, rng):
    """Rows of the shared tiles padded from 64 to 65 floats (so that a column's elements fall
    in different memory banks): 8 rows take 8 x 65 elements, and the result is unchanged."""
    A, B, C = matmul(100, 75, 37)
    s = paper_schedule(A, B, C, align=(32, 1))
    text = str(kiln.lower(s, [A, B, C], target="opencl"))
    assert "A.shared = allocate(float32, [520], scope='shared')" in text
    assert "= A.shared[k.inner.outer*65 + " in text           # the compute reads padded rows
    mod = kiln.build(paper_schedule(A, B, C, align=(32, 1)), [A, B, C], target="opencl")
    a = rng.standard_normal((37, 100)).astype("float32")
    b = rng.standard_normal((37, 75)).astype("float32")
    ref = a.astype("float64").T @ b.astype("float64")
    out = _run(mod, opencl_device, a, b, (100, 75))
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=RTOL * np.abs(ref).max())


def test_paper_matmul_cuda_ptx(ptxas):
    """Every kernel compiles through NVRTC; ptxas (sm_80) reports no spills and shared
    memory within 48 KiB."""
    from kiln.codegen.cuda.nvrtc import ptxas_report
    A, B, C = matmul(1024, 1024, 1024)
    mod = kiln.build(paper_schedule(A, B, C), [A, B, C], target="cuda -arch=sm_80")
    assert ".visible .entry default_function_kernel0" in mod.get_source("ptx")
    report = ptxas_report(mod.get_source("ptx"), "sm_80")
    (res,) = report.values()
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    assert 0 < res.shared_bytes <= 48 * 1024, res


def test_paper_matmul_cuda_runs(cuda_device, rng):
    A, B, C = matmul(512, 384, 256)
    mod = kiln.build(paper_schedule(A, B, C), [A, B, C], target="cuda")
    a = rng.standard_normal((256, 512)).astype("float32")
    b = rng.standard_normal((256, 384)).astype("float32")
    ref = a.astype("float64").T @ b.astype("float64")
    out = _run(mod, cuda_device, a, b, (512, 384))
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=RTOL * np.abs(ref).max())

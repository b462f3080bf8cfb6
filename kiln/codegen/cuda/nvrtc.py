"""CUDA C → PTX with NVRTC (the `nvidia-cuda-nvrtc` and `cuda-bindings` packages), and
ptxas's resource report (registers, spills, shared memory) for a PTX text.

NVRTC and ptxas run without a GPU: kiln checks CUDA kernels here by compiling them; running
them needs an NVIDIA GPU and its driver (kiln.runtime.gpu.cuda).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from typing import NamedTuple

from ..common import CodegenError

INSTALL = "pip install nvidia-cuda-nvrtc cuda-bindings (make installs them)"
INSTALL_PTXAS = "pip install nvidia-cuda-nvcc (make installs it)"


class CudaToolMissing(CodegenError):
    """NVRTC or ptxas is not installed; the message says how to install it."""


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as err:
        raise CudaToolMissing(f"compiling CUDA needs NVRTC ({err}); {INSTALL}") from None
    return nvrtc


def nvrtc_available() -> str | None:
    """None when NVRTC works here, else why not."""
    try:
        nvrtc = _nvrtc()
        err, major, minor = nvrtc.nvrtcVersion()
        return None if int(err) == 0 else f"nvrtcVersion failed: {err!r}"
    except (CudaToolMissing, RuntimeError, OSError) as err:
        return str(err)


def compile_ptx(source: str, arch: str, name: str = "kiln.cu") -> str:
    """PTX for `arch` (e.g. "sm_80": PTX of the virtual architecture compute_80).

    Example:
        >>> "visible .entry" in compile_ptx(source, "sm_80")   # doctest: +SKIP
        True
    """
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        virtual = "compute_" + arch[3:]
        opts = [f"--gpu-architecture={virtual}".encode(), b"--std=c++17", b"-lineinfo"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if int(err) != 0:
            raise CodegenError(f"NVRTC rejected the CUDA kernels ({arch}):\n{_log(nvrtc, prog)}")
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _check(nvrtc, err, "nvrtcGetPTXSize")
        ptx = b" " * size
        (err,) = nvrtc.nvrtcGetPTX(prog, ptx)
        _check(nvrtc, err, "nvrtcGetPTX")
        return ptx.rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _log(nvrtc, prog) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    return log.rstrip(b"\0").decode(errors="replace")


def _check(nvrtc, err, call):
    if int(err) != 0:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise CodegenError(f"{call} failed: {text.decode() if text else err!r}")


def ptxas_path() -> str | None:
    """ptxas from the nvidia-cuda-nvcc wheel, else from PATH; None when neither exists."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations if spec else []):
        for sub in ("cu13/bin/ptxas", "cuda_nvcc/bin/ptxas", "cu12/bin/ptxas"):
            path = os.path.join(root, sub)
            if os.access(path, os.X_OK):
                return path
    return shutil.which("ptxas")


class KernelResources(NamedTuple):
    """ptxas's report for one kernel."""

    registers: int
    shared_bytes: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int


def ptxas_report(ptx: str, arch: str) -> dict[str, KernelResources]:
    """Assemble PTX for `arch` with `ptxas -v`: kernel name → its resources.

    Example:
        >>> ptxas_report(mod.get_source("ptx"), "sm_80")["f_kernel0"].spill_stores  # doctest: +SKIP
        0
    """
    exe = ptxas_path()
    if exe is None:
        raise CudaToolMissing(f"ptxas is not installed; {INSTALL_PTXAS}")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernels.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        run = subprocess.run([exe, f"-arch={arch}", "-v", src, "-o", os.path.join(tmp, "k.cubin")],
                             capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise CodegenError(f"ptxas ({arch}) rejected the PTX:\n{run.stderr}")
    report, current = {}, None
    for line in run.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = m.group(1)
            report[current] = dict(registers=0, shared_bytes=0, spill_stores=0, spill_loads=0,
                                   stack_bytes=0)
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            report[current].update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                                   spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            report[current]["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            report[current]["shared_bytes"] = int(s.group(1)) if s else 0
    return {k: KernelResources(**v) for k, v in report.items()}

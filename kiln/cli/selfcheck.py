"""`kiln selfcheck`: what kiln found on this machine, and the fix for anything missing.

    $ kiln selfcheck
    kiln 0.1.0, Python 3.11.2 (/usr/bin/python3)
      ok        LLVM         22.1.0 (llvmlite 0.50.0), JIT for x86_64-unknown-linux-gnu
      ok        CPU          znver5: avx2 yes, avx512f yes, fma yes; kernels use 512-bit vectors
      ...
      optional  graphviz     dot not found: `apt-get install graphviz` (needed only for ...)

Each check is one function registered with @check, returning a Finding. The exit status is 1
when something kiln needs is missing; optional things (PyTorch, Graphviz) never fail it.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass

from .errors import one_line

HELP = "report what kiln found on this machine and what is missing"

_CPU_FEATURES = ("avx2", "avx512f", "fma")


@dataclass(frozen=True)
class Finding:
    """One line of the report: what was checked, whether it is fine, what was found, and
    (when not fine) the fix. `required=False` marks things only some features need.

    Example:
        >>> Finding("graphviz", False, "dot not found", "apt-get install graphviz", False).status
        'optional'
    """

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True

    @property
    def status(self) -> str:
        return "ok" if self.ok else ("MISSING" if self.required else "optional")

    def line(self) -> str:
        text = self.detail if self.ok or not self.fix else f"{self.detail}: {self.fix}"
        return f"  {self.status:<9} {self.name:<12} {text}"


CHECKS: list = []


def check(fn):
    """Register a check: a function of no arguments returning a Finding, run in order.

    Example:
        >>> @check
        ... def _disk(): return Finding("disk", True, "plenty")     # doctest: +SKIP
    """
    CHECKS.append(fn)
    return fn


def _version_line(banner: str) -> str:
    # a program's --version banner: its first line names it; the rest is licence text
    lines = [line.strip() for line in (banner or "").splitlines() if line.strip()]
    return lines[0] if lines else ""


@check
def _llvm() -> Finding:
    fix = "pip install 'llvmlite==0.50.*'"
    try:
        import llvmlite
        import llvmlite.binding as llvm
    except ImportError as err:
        return Finding("LLVM", False, f"llvmlite cannot be imported ({err})", fix)
    version = ".".join(map(str, llvm.llvm_version_info))
    try:
        from kiln.codegen.llvm.jit import machine_for
        from kiln.target import Target
        machine_for(Target("llvm"))
    except Exception as err:     # LLVM's own errors come in several types
        return Finding("LLVM", False, f"LLVM {version} cannot make a JIT for this machine "
                       f"({type(err).__name__}: {one_line(err)})", fix)
    return Finding("LLVM", True, f"{version} (llvmlite {llvmlite.__version__}), JIT for "
                   f"{llvm.get_process_triple()}")


@check
def _cpu() -> Finding:
    try:
        import llvmlite.binding as llvm
        from kiln.target import Target
    except ImportError:
        return Finding("CPU", False, "unknown (needs llvmlite)", "see LLVM above")
    features = llvm.get_host_cpu_features()
    flags = ", ".join(f"{f} {'yes' if features.get(f) else 'no'}" for f in _CPU_FEATURES)
    bits = Target("llvm").vector_width_bits
    return Finding("CPU", True, f"{llvm.get_host_cpu_name()}: {flags}; kernels use {bits}-bit "
                   f"vectors; {os.cpu_count()} CPUs")


@check
def _c_compiler() -> Finding:
    from kiln.runtime.native_build import NativeBuildError, build_shared_library, c_compiler
    compiler = c_compiler()
    fix = "install one (`apt-get install gcc`) or set CC to a C compiler"
    path = shutil.which(compiler[0])
    if path is None:
        return Finding("C compiler", False, f"{' '.join(compiler)!r} not found (kiln links "
                       f"exported models and builds its runtime with it)", fix)
    try:
        version = _version_line(subprocess.run([*compiler, "--version"], capture_output=True,
                                             text=True, timeout=30).stdout)
        lib = ctypes.CDLL(str(build_shared_library(
            "int kiln_selfcheck_answer(void) { return 42; }", "kiln_selfcheck")))
        if lib.kiln_selfcheck_answer() != 42:
            raise NativeBuildError("the test library returned a wrong value")
    except (NativeBuildError, OSError, subprocess.SubprocessError) as err:
        return Finding("C compiler", False, f"{' '.join(compiler)} cannot build a shared "
                       f"library ({one_line(err)})", fix)
    return Finding("C compiler", True, f"{' '.join(compiler)}: {version or path}; builds and "
                   f"loads a shared library")


@check
def _openmp() -> Finding:
    from kiln.runtime.native_build import NativeBuildError
    try:
        from kiln.runtime.support_lib import library
        library()
    except (NativeBuildError, OSError) as err:
        return Finding("OpenMP", False, f"the runtime support library does not build with "
                       f"-fopenmp ({one_line(err)})",
                       "install gcc with libgomp (`apt-get install gcc`) or set CC to a compiler "
                       "with OpenMP")
    return Finding("OpenMP", True, "the runtime support library (thread pool) builds and loads")


@check
def _threads() -> Finding:
    from kiln.runtime import num_threads
    try:
        n = num_threads()
    except ValueError as err:
        return Finding("threads", False, str(err), "set KILN_NUM_THREADS to a positive integer "
                       "or unset it")
    if os.environ.get("KILN_NUM_THREADS", "").strip():
        source = "$KILN_NUM_THREADS"
    else:
        source = "the CPUs this process may run on; set KILN_NUM_THREADS to change it"
    return Finding("threads", True, f"{n} (from {source})")


@check
def _kernel() -> Finding:
    """End to end: a vector add through te, lowering, LLVM and the runtime."""
    try:
        import numpy as np

        import kiln
        from kiln import te
        n = 64
        a = te.placeholder((n,), name="a")
        b = te.compute((n,), lambda i: a[i] * 2.0 + 1.0, name="b")
        f = kiln.build(te.create_schedule(b.op), [a, b], target="llvm")
        x = np.arange(n, dtype="float32")
        y = np.empty_like(x)
        f(x, y)
        if not np.array_equal(y, x * 2 + 1):
            raise ValueError("wrong result")
    except Exception as err:    # any stage can fail; the message says which
        return Finding("kernel", False, f"a test kernel does not build or run "
                       f"({type(err).__name__}: {one_line(err)})",
                       "fix the problems above; rerun with --verbose for details")
    return Finding("kernel", True, "a test kernel builds, runs and is correct")


# import name -> (distributions that provide it, needed?, what it is for)
PACKAGES = {
    "numpy": (("numpy",), True, "arrays everywhere"),
    "onnx": (("onnx",), True, "reading .onnx models"),
    "xgboost": (("xgboost-cpu", "xgboost"), True, "the auto-tuner's cost model"),
    "tqdm": (("tqdm",), True, "tuning progress bars"),
    "torch": (("torch",), False, "reading .pt2 models and torch.compile(backend='kiln')"),
    "onnxruntime": (("onnxruntime",), False,
                    "running ONNX nodes kiln lacks (from_onnx(..., fallback='onnxruntime'))"),
}

_PIP_NAMES = {"xgboost": "xgboost-cpu", "torch": "torch", "onnxruntime": "onnxruntime"}


def _package(name: str, dists, required: bool, purpose: str) -> Finding:
    # find_spec + metadata: the version without importing (importing torch takes seconds).
    if importlib.util.find_spec(name) is None:
        return Finding(name, False, "not installed",
                       f"pip install {_PIP_NAMES.get(name, name)} (needed for {purpose})",
                       required)
    for dist in dists:
        try:
            return Finding(name, True, importlib.metadata.version(dist), required=required)
        except importlib.metadata.PackageNotFoundError:
            continue
    return Finding(name, True, "installed (version unknown)", required=required)


for _name, _spec in PACKAGES.items():
    check(functools.partial(_package, _name, *_spec))


@check
def _graphviz() -> Finding:
    fix = "`apt-get install graphviz` (needed only for kiln inspect --format png and kiln.viz)"
    path = shutil.which("dot")
    if path is None:
        return Finding("graphviz", False, "dot not found", fix, required=False)
    try:
        done = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        return Finding("graphviz", False, f"{path} does not run ({err})", fix, required=False)
    # dot prints its version to stderr.
    return Finding("graphviz", True, _version_line(done.stderr or done.stdout) or path,
                   required=False)


@check
def _opencl() -> Finding:
    from kiln.runtime.gpu.api import DeviceUnavailableError
    from kiln.runtime.gpu.opencl import INSTALL, opencl_devices
    try:
        devices = opencl_devices()
    except DeviceUnavailableError as err:
        return Finding("opencl", False, one_line(err).split(";")[0], INSTALL, required=False)
    if not devices:
        return Finding("opencl", False, "no OpenCL device", INSTALL, required=False)
    names = ", ".join(f"opencl({k}) {d.name.strip()}" for k, d in enumerate(devices))
    return Finding("opencl", True, f"target='opencl' runs on: {names}", required=False)


@check
def _cuda() -> Finding:
    from kiln.codegen.cuda.nvrtc import INSTALL, INSTALL_PTXAS, nvrtc_available, ptxas_path
    why = nvrtc_available()
    if why is not None:
        return Finding("cuda", False, "NVRTC missing: target='cuda' cannot compile", INSTALL,
                       required=False)
    if ptxas_path() is None:
        return Finding("cuda", False, "NVRTC works, ptxas missing (no register / spill "
                       "report)", INSTALL_PTXAS, required=False)
    from kiln.runtime import cuda as cuda_device
    from kiln.runtime.gpu import DeviceUnavailableError, device_api
    try:
        gpu = f"runs on cuda(0) {device_api(cuda_device(0)).name}"
    except DeviceUnavailableError:
        gpu = "compiled and checked by ptxas only: no NVIDIA GPU / driver here"
    return Finding("cuda", True, f"NVRTC and ptxas work; {gpu}", required=False)


@check
def _arm() -> Finding:
    from kiln.runtime import NativeBuildError
    from kiln.runtime.toolchain import compiler_for, emulator_for
    triple = "aarch64-linux-gnu"
    try:
        compiler = compiler_for(triple)
    except NativeBuildError as err:
        return Finding("arm", False, "no aarch64 cross compiler: target='rasp4b' cannot link",
                       one_line(err).split("(", 1)[-1].rstrip(")"), required=False)
    try:
        emulator_for(triple)
    except NativeBuildError as err:
        return Finding("arm", False, f"{compiler[0]} links aarch64 models; no QEMU to run them "
                       f"here", one_line(err).split("(", 1)[-1].rstrip(")"), required=False)
    return Finding("arm", True, f"{compiler[0]} links aarch64 models (target='rasp4b'); "
                   f"qemu-aarch64 runs them here (correctness, not ARM speed)", required=False)


@check
def _cluster() -> Finding:
    from kiln.autotvm.cluster.device import device_resource
    resource = device_resource("llvm")
    fix = ("pip install 'kiln[cluster]' (the project's `make` installs it; needed only for "
           "tuning on a dask cluster: kiln tune --cluster)")
    for name in ("distributed", "cryptography"):
        if importlib.util.find_spec(name) is None:
            return Finding("cluster", False, f"{name} not installed", fix, required=False)
    version = importlib.metadata.version("distributed")
    return Finding("cluster", True, f"dask.distributed {version}; this machine measures as "
                   f"--resources {resource}=1", required=False)


@check
def _zoo() -> Finding:
    # test and bench models only: found without importing them (torchvision's import is slow
    # and needs kiln.testing.zoo's operator schemas)
    from kiln.testing.zoo import INSTALL_HINT, ZOO_PATH
    found = {d.metadata["Name"].lower(): d.version
             for d in importlib.metadata.distributions(path=[ZOO_PATH])}
    missing = [name for name in ("torchvision", "timm") if name not in found]
    if missing:
        return Finding("zoo", False, f"{' and '.join(missing)} not in {ZOO_PATH} (only the "
                       f"model-zoo tests and bench/zoo.py need them)", INSTALL_HINT,
                       required=False)
    return Finding("zoo", True, f"torchvision {found['torchvision']}, timm {found['timm']} in "
                   f"{ZOO_PATH} (the model zoo of kiln.testing.zoo)", required=False)


@check
def _cache() -> Finding:
    from kiln.runtime.native_build import NativeBuildError, cache_dir, cache_root
    try:
        root = cache_root()
    except NativeBuildError as err:
        return Finding("cache", False, one_line(err))
    if root != cache_dir():
        return Finding("cache", False, f"{cache_dir()} is not writable (kiln uses {root} instead, "
                       f"which the system may clean)", "set KILN_CACHE_DIR to a writable "
                       f"directory", required=False)
    return Finding("cache", True, f"{root} (writable by you alone)")


def _run_check(fn, verbose: bool) -> Finding:
    # A check that breaks must not hide the others' findings (with --verbose it stops, to show
    # the traceback).
    try:
        return fn()
    except Exception as err:
        if verbose:
            raise
        name = getattr(fn, "__name__", None) or getattr(fn, "args", ["check"])[0]
        return Finding(str(name).strip("_"), False, f"the check itself failed "
                       f"({type(err).__name__}: {one_line(err)})",
                       "rerun with --verbose for the traceback")


def add_arguments(parser) -> None:
    """`kiln selfcheck` takes no options.

    Example:
        >>> add_arguments(argparse.ArgumentParser())          # doctest: +SKIP
    """


def run(args) -> int:
    """Print one line per check and a verdict; 1 when something required is missing.

    Example:
        >>> run(build_parser("selfcheck").parse_args(["selfcheck"]))   # doctest: +SKIP
        0
    """
    from kiln import __version__
    print(f"kiln {__version__}, Python {platform.python_version()} ({sys.executable})")
    findings = []
    for fn in CHECKS:
        finding = _run_check(fn, getattr(args, "verbose", False))
        print(finding.line(), flush=True)
        findings.append(finding)
    missing = [f.name for f in findings if not f.ok and f.required]
    optional = [f.name for f in findings if not f.ok and not f.required]
    if missing:
        print(f"kiln cannot work here until {', '.join(missing)} "
              f"{'is' if len(missing) == 1 else 'are'} fixed (see the fixes above)")
        return 1
    note = f" ({len(optional)} optional thing{'s' if len(optional) != 1 else ''} missing: " \
           f"{', '.join(optional)})" if optional else ""
    print(f"everything kiln needs is here{note}")
    return 0

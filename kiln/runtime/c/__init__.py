"""kiln's C runtime: a small C library (kiln_runtime.h) that runs an exported model library
without Python, for this machine or, cross-compiled, for another (an ARM board).

    kiln c-runtime -o build/ [--target rasp4b]     # kiln_runtime.h + libkiln_runtime.so
    cc app.c -Ibuild -Lbuild -lkiln_runtime -Wl,-rpath,'$ORIGIN' -o app

It holds the graph runner (kiln_runtime.c, over the plan export_library embeds: plan.py) and
the support code generated kernels call (kiln/runtime/threadpool.c and workspace.c, the same
sources the Python runtime builds). run_model.c is a program over it that runs an exported model
on inputs from files (`kiln c-runtime` writes it beside the library); runner.py drives it from
Python, here or under an emulator.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..native_build import NativeBuildError
from ..toolchain import compiler_for, host_arch

HERE = Path(__file__).parent
HEADER = HERE / "kiln_runtime.h"
SOURCES = (HERE / "kiln_runtime.c", HERE.parent / "threadpool.c", HERE.parent / "workspace.c")
PROGRAM = HERE / "run_model.c"
# Programs over the library: name -> sources (time_kernel times one kernel for the tuner).
PROGRAMS = {"run_model": (PROGRAM,),
            "time_kernel": (HERE / "time_kernel.c", HERE.parent / "timer.c")}
LIBRARY = "libkiln_runtime.so"
FLAGS = ("-O2", "-std=gnu11", "-fPIC", "-shared", "-fopenmp", "-pthread")


def build_runtime(out_dir, triple: str | None = None) -> Path:
    """Write kiln_runtime.h and build libkiln_runtime.so into `out_dir`, for `triple` (default:
    this machine; another is cross-compiled, kiln.runtime.toolchain). Returns the library's path.
    Raises NativeBuildError when the compiler is missing or fails.

    Example:
        >>> build_runtime("build").name                          # doctest: +SKIP
        'libkiln_runtime.so'
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cc = compiler_for(triple or host_triple())
    shutil.copyfile(HEADER, out_dir / HEADER.name)
    shutil.copyfile(PROGRAM, out_dir / PROGRAM.name)
    library = out_dir / LIBRARY
    _compile([*cc, *FLAGS, f"-I{HERE}", *map(str, SOURCES), "-ldl"], library)
    return library


def build_program(out_dir, triple: str | None = None, name: str = "run_model") -> Path:
    """build_runtime, then the program `name` (PROGRAMS) into `out_dir`, linked to the library
    beside it (rpath $ORIGIN). Returns the program's path.

    Example:
        >>> build_program("build")                    # doctest: +SKIP
        PosixPath('build/run_model')
    """
    library = build_runtime(out_dir, triple)
    program = library.with_name(name)
    _compile([*compiler_for(triple or host_triple()), "-O2", "-std=gnu11", f"-I{HERE}",
              *map(str, PROGRAMS[name]), f"-L{library.parent}", "-lkiln_runtime",
              "-Wl,-rpath,$ORIGIN"], program)
    return program


def host_triple() -> str:
    """This machine's Linux triple, in the GNU tool-chain's spelling ("x86_64-linux-gnu").

    Example:
        >>> host_triple().endswith("-linux-gnu")
        True
    """
    return f"{host_arch()}-linux-gnu"


def _compile(cmd: list, out: Path) -> None:
    # Built beside the output and renamed over it: a program running the old file keeps it.
    with tempfile.TemporaryDirectory(prefix=".kiln-runtime-", dir=out.parent) as tmp:
        built = Path(tmp) / out.name
        done = subprocess.run([*cmd, "-o", str(built)], capture_output=True, text=True)
        if done.returncode != 0:
            raise NativeBuildError(f"building {out.name} failed ({' '.join(cmd)}):\n"
                                   f"{done.stderr[-2000:]}")
        built.replace(out)

"""Helpers for tests that build and call small C libraries: compile a C file with the system
compiler, and the address of one of its functions. A module of its own, with a name no other
test module has, so that test folders can import it together (`from conftest import ...` would
find whichever conftest.py was imported first).

Example:
    >>> lib = compile_c(Path("tests/runtime/kernels.c"), tmp_dir)     # doctest: +SKIP
    >>> address_of(lib, "vadd") > 0                                   # doctest: +SKIP
    True
"""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path


def compile_c(source: Path, out_dir: Path, flags=("-O2",)) -> ctypes.CDLL:
    """Build the C file `source` into a shared library in out_dir and load it."""
    target = Path(out_dir) / (Path(source).stem + ".so")
    subprocess.run(["cc", *flags, "-shared", "-fPIC", "-o", str(target), str(source)],
                   check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(target))


def address_of(lib: ctypes.CDLL, name: str) -> int:
    """The address of function `name` in a loaded library."""
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value

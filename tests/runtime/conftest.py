"""Helpers for the runtime tests: compile small C files with the system compiler."""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def compile_c(source_name: str, out_dir: Path, flags=("-O2",)) -> ctypes.CDLL:
    """Build tests/runtime/<source_name> into out_dir and load it."""
    target = out_dir / (Path(source_name).stem + ".so")
    subprocess.run(["cc", *flags, "-shared", "-fPIC", "-o", str(target),
                    str(HERE / source_name)], check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(target))


def address_of(lib: ctypes.CDLL, name: str) -> int:
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


@pytest.fixture(scope="session")
def kernels_lib(tmp_path_factory):
    return compile_c("kernels.c", tmp_path_factory.mktemp("kernels"))


@pytest.fixture(scope="session")
def tasks_lib(tmp_path_factory):
    return compile_c("tasks.c", tmp_path_factory.mktemp("tasks"))

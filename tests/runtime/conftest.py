"""Fixtures for the runtime tests: small C files built with the system compiler."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers_native import compile_c

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def kernels_lib(tmp_path_factory):
    return compile_c(HERE / "kernels.c", tmp_path_factory.mktemp("kernels"))


@pytest.fixture(scope="session")
def tasks_lib(tmp_path_factory):
    return compile_c(HERE / "tasks.c", tmp_path_factory.mktemp("tasks"))

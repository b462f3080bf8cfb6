import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

# Compiled kernels are cached per test run, shared by its tests: a run starts cold whatever
# the user's cache holds (tests that count builds or phases see builds).
if "KILN_KERNEL_CACHE_DIR" not in os.environ:
    import tempfile
    os.environ["KILN_KERNEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln_test_kernels_")


def pytest_configure(config):
    config.addinivalue_line("markers", "full_model: the real-size ResNet-18 / MobileNet-V2 / "
                                       "BERT-base (deselect with -m 'not full_model')")
    config.addinivalue_line("markers", "timing: asserts on measured speed, so it needs the "
                                       "machine to itself (make test runs these alone, after "
                                       "the others ran in parallel)")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def avx512():
    """Heuristics within this test see an AVX-512 target (16 float32 lanes, 32 registers)."""
    from kiln.target import Target
    from pinned_targets import AVX512
    with Target(AVX512) as target:
        yield target


@pytest.fixture
def host_lanes():
    """float32 lanes of one vector register on the machine running the tests."""
    from kiln.target import Target
    from kiln.topi.x86.utils import vector_lanes
    with Target("llvm"):
        return vector_lanes("float32")

"""The workspace allocator generated code takes heap temporaries from (runtime/workspace.c)."""
import ctypes
import threading

import numpy as np
import pytest

from kiln.runtime import support_lib


@pytest.fixture
def ws():
    lib = support_lib.library()
    lib.kiln_workspace_release_thread()
    yield lib
    lib.kiln_workspace_release_thread()


def test_blocks_are_aligned_and_writable(ws):
    for nbytes in (0, 1, 63, 64, 4097, 3 << 20):
        p = ws.kiln_workspace_alloc(nbytes)
        assert p is not None and p % 64 == 0, nbytes
        if nbytes:
            ctypes.memset(p, 0xAB, nbytes)
        ws.kiln_workspace_free(p)


def test_a_freed_block_is_reused_for_a_request_it_fits(ws):
    p = ws.kiln_workspace_alloc(2 << 20)
    ws.kiln_workspace_free(p)
    assert ws.kiln_workspace_kept_blocks() == 1
    assert ws.kiln_workspace_kept_bytes() == 2 << 20
    assert ws.kiln_workspace_alloc(2 << 20) == p          # same size: the kept block
    ws.kiln_workspace_free(p)
    assert ws.kiln_workspace_alloc((2 << 20) - 1000) == p  # a bit smaller: still fits
    assert ws.kiln_workspace_kept_blocks() == 0
    ws.kiln_workspace_free(p)


def test_a_big_block_is_not_pinned_by_a_small_request(ws):
    big = ws.kiln_workspace_alloc(4 << 20)
    ws.kiln_workspace_free(big)
    small = ws.kiln_workspace_alloc(1 << 10)
    assert small != big and ws.kiln_workspace_kept_blocks() == 1
    ws.kiln_workspace_free(small)
    assert ws.kiln_workspace_alloc(4 << 20) == big


def test_the_cache_is_bounded(ws):
    sizes = [(k + 1) << 16 for k in range(12)]
    blocks = [ws.kiln_workspace_alloc(n) for n in sizes]
    for p in blocks:
        ws.kiln_workspace_free(p)
    assert ws.kiln_workspace_kept_blocks() == 8
    assert ws.kiln_workspace_kept_bytes() == sum(sizes[-8:])   # the largest ones stay
    huge = ws.kiln_workspace_alloc(300 << 20)                  # over the per-thread byte cap
    ws.kiln_workspace_free(huge)
    assert ws.kiln_workspace_kept_bytes() == sum(sizes[-8:])
    ws.kiln_workspace_release_thread()
    assert ws.kiln_workspace_kept_blocks() == 0 and ws.kiln_workspace_kept_bytes() == 0


def test_caches_are_per_thread(ws):
    p = ws.kiln_workspace_alloc(1 << 20)
    ws.kiln_workspace_free(p)
    seen = {}

    def other():
        seen["kept"] = ws.kiln_workspace_kept_blocks()
        q = ws.kiln_workspace_alloc(1 << 20)
        seen["same"] = q == p
        ws.kiln_workspace_free(q)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == {"kept": 0, "same": False}
    assert ws.kiln_workspace_kept_blocks() == 1


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_generated_code_returns_its_heap_temporaries(ws, target, rng):
    import kiln
    from kiln import te

    n = 1 << 18                                  # 1 MiB of float32: a heap temporary
    A = te.placeholder((n,), name="A")
    T = te.compute((n,), lambda i: A[i] * 2.0, name="T")
    B = te.compute((n,), lambda i: T[n - 1 - i] + 1.0, name="B")
    f = kiln.build(te.create_schedule(B.op), [A, B], target=target)
    a = rng.standard_normal(n).astype("float32")
    for _ in range(3):
        b = np.zeros(n, "float32")
        f(a, b)
        np.testing.assert_array_equal(b, (a * 2 + 1)[::-1])
        # The temporary went back to this thread's cache; the next call takes it again.
        assert ws.kiln_workspace_kept_blocks() == 1
        assert ws.kiln_workspace_kept_bytes() >= n * 4

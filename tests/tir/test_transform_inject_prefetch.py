"""inject_prefetch (Stage.prefetch): where the prefetches go, that they cover the region a later
iteration reads and stay inside the buffer (reference interpreter), that they change no result
(interpreter and both back-ends), and the errors."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import te
from kiln.te.schedule import ScheduleError
from kiln.tir import For, post_order_visit
from kiln.tir.op import IRError
from kiln.tir.transform.inject_prefetch import PREFETCH_KEY, inject_prefetch
from kiln.topi.nn.dense import dense
from interp import run

LINE = 16       # float32 elements per 64-byte cache line


def _row_sums(n, m, factor, offset=1, prefetch=True):
    a = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    b = te.compute((n,), lambda i: te.sum(a[i, k], axis=k), name="B")
    s = te.create_schedule(b.op)
    s[b].split(k, factor=factor)
    if prefetch:
        s[b].prefetch(a, s[b].op.axis[0], offset)
    return s, a, b


def _prefetch_calls(func):
    found = []
    post_order_visit(func.body, lambda x: found.append(x) if getattr(x, "op", None) == "prefetch"
                     else None)
    return found


def _lines(indices):
    return {i // LINE for i in indices}


def _check_covers(prefetches, buf, loop_name, extent, offset, region_of):
    """While iteration v of the loop runs, every line that iteration v + offset reads was
    requested."""
    per_iteration = {}
    for b, index, loops in prefetches:
        assert b is buf
        per_iteration.setdefault(loops[loop_name], set()).add(index // LINE)
    for v in range(extent - offset):
        wanted = _lines(region_of(v + offset))
        missing = wanted - per_iteration.get(v, set())
        assert not missing, f"iteration {v}: lines {sorted(missing)[:5]} of {v + offset} missed"


def test_prefetch_is_spread_over_the_inner_loop_one_line_per_step():
    s, a, b = _row_sums(64, 256, 16)
    f = kiln.lower(s, [a, b])
    text = str(f)
    # k.outer has 16 steps for the 16 lines of the next row: one prefetch at its top.
    assert "for k.outer in range(16):\n      prefetch(A[min(i*256 + k.outer*16 + 256, 16383)])" \
        in text, text
    assert f"{PREFETCH_KEY}=(" not in text    # the annotation is consumed
    assert len(_prefetch_calls(f)) == 1


def test_lowered_annotation_is_printed_before_the_pass():
    s, a, b = _row_sums(8, 64, 16, offset=2)
    f = kiln.lower(s, [a, b], pipeline=[])
    assert "for i in range(8) prefetch=(A+2):" in str(f)
    assert "prefetch(" in str(inject_prefetch(f))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 9), m=st.sampled_from([16, 40, 64, 96, 200]),
       factor=st.sampled_from([1, 2, 4, 8, 16]), offset=st.integers(1, 3))
def test_prefetches_cover_the_later_iteration_and_stay_in_the_buffer(n, m, factor, offset):
    s, a, b = _row_sums(n, m, factor, offset)
    f = kiln.lower(s, [a, b])
    (buf_a, buf_b) = f.params
    x = np.random.default_rng(0).random((n, m), dtype=np.float32)
    out = np.zeros(n, np.float32)
    prefetches = run(f, {buf_a: x.copy(), buf_b: out})   # out-of-buffer addresses raise
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5)
    _check_covers(prefetches, buf_a, "i", n, offset, lambda v: range(v * m, (v + 1) * m))


def test_dense_panels_prefetched_a_tile_ahead_inside_the_k_loop():
    # Column tiles in parallel over packed panels [nb, k, 32]: the next panel is requested
    # while the current one is multiplied, spread over the row tiles and the k loop.
    data = te.placeholder((16, 64), name="data")
    weight = te.placeholder((4, 64, 32), name="weight")
    y = dense(data, weight, units=128)
    s = te.create_schedule(y.op)
    from kiln.topi.x86.dense import schedule_gemm_tile
    with kiln.target.Target("llvm"):
        schedule_gemm_tile(s, y.op, [y], 4, k_unroll=4, col_parallel=True, prefetch=1)
        f = kiln.lower(s, [data, weight, y])
    loops = []
    post_order_visit(f.body, lambda x: loops.append(x) if isinstance(x, For) else None)
    k_loop = next(lp for lp in loops if lp.loop_var.name == "k.outer")
    assert "prefetch(weight" in str(k_loop.body).split("\n")[0]
    d = np.random.default_rng(1).random((16, 64), dtype=np.float32)
    w = np.random.default_rng(2).random((4, 64, 32), dtype=np.float32)
    out = np.zeros((16, 128), np.float32)
    buf_d, buf_w, buf_y = f.params
    prefetches = run(f, {buf_d: d, buf_w: w, buf_y: out})
    ref = d @ w.transpose(1, 0, 2).reshape(64, 128)
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    panel = 64 * 32
    tile_loop = next(lp for lp in loops if lp.kind == "parallel").loop_var.name
    _check_covers(prefetches, buf_w, tile_loop, 4, 1,
                  lambda v: range(v * panel, (v + 1) * panel))


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_both_back_ends_run_prefetching_code(target):
    s, a, b = _row_sums(33, 200, 8)
    mod = kiln.build(s, [a, b], target=target)
    x = np.random.default_rng(3).random((33, 200), dtype=np.float32)
    out = np.zeros(33, np.float32)
    mod(x, out)
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5)


def test_errors_name_the_problem():
    s, a, b = _row_sums(8, 64, 16, prefetch=False)
    with pytest.raises(ScheduleError, match="offset must be a positive"):
        s[b].prefetch(a, s[b].op.axis[0], 0)
    with pytest.raises(ScheduleError, match="expected a tensor"):
        s[b].prefetch("A", s[b].op.axis[0])
    # A loop that does not read the tensor: the init-free outer loop of another stage.
    c = te.compute((8,), lambda i: b[i] * 2.0, name="C")
    other = te.placeholder((8, 64), name="other")
    s2 = te.create_schedule(c.op)
    s2[c].prefetch(other, s2[c].op.axis[0])
    with pytest.raises(IRError, match="neither computed here nor given as an argument"):
        kiln.lower(s2, [a, c])
    with pytest.raises(IRError, match="the loop does not read it"):
        kiln.lower(s2, [a, other, c])

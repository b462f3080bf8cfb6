"""Measurement: builder and runner in isolated workers, every outcome classified.

Candidates are tiny (16x16x16 matmul, 64-element maps) so the file stays fast; the faults come
from tests/autotvm/fault_templates.py ("test.fault"), imported by the workers through the
parent's sys.path.
"""
import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import fault_templates  # noqa: E402  (registers "test.fault")
import kiln.autotvm.testing  # noqa: E402,F401  (registers "test.matmul")
from kiln.autotvm.measure import (LocalBuilder, LocalRunner, MeasureBatch,  # noqa: E402
                                  create_measure_batch, measure_option)
from kiln.autotvm.measure_jobs import _mismatch, reference_outputs  # noqa: E402
from kiln.autotvm.record import (MeasureInput, RecordWriter, STATUSES,  # noqa: E402
                                 load_records)
from kiln.autotvm.task import Task  # noqa: E402
from kiln.autotvm.workers import WorkerPool, WorkerPoolError  # noqa: E402
from kiln.runtime import num_threads  # noqa: E402
from kiln.runtime.timing import can_flush_cache  # noqa: E402

MATMUL = (16, 16, 16, "float32")
TOL = dict(rtol=1e-5, atol=1e-5)  # float32 sums of 16 products in [-1, 1]


def fault_config(task, mode):
    return task.config_space.get(fault_templates.MODES.index(mode))


@pytest.fixture(scope="module")
def option():
    """One builder (2 workers) and one checking runner shared by the tests of this file."""
    opt = measure_option(LocalBuilder(timeout=20.0, n_parallel=2),
                         LocalRunner(number=2, repeat=3, timeout=20.0, check_correctness=True))
    yield opt
    opt.builder.close()
    opt.runner.close()


# ------------------------------------------------------------------------------ ok results
def test_matmul_candidates_are_timed(option):
    task = Task("test.matmul", MATMUL)
    space = task.config_space
    configs = [space.get(i) for i in (0, 7, len(space) // 2, len(space) - 1)]
    before = time.time()
    with create_measure_batch(task, option) as measure:
        assert measure.n_parallel == 2
        results = measure(configs)
    assert [r.status for r in results] == ["ok"] * 4, [r.message for r in results]
    for r in results:
        assert len(r.costs) == 3 and all(c > 0 for c in r.costs)
        assert r.message == ""                  # checked against the default config
        assert r.all_cost > 0 and before <= r.timestamp <= time.time()


def test_reference_outputs_match_numpy(tmp_path):
    """The runner's reference (the default config on the seeded inputs) is a real matmul."""
    task = Task("test.matmul", MATMUL)
    path = str(tmp_path / "ref.npz")
    reference_outputs({"task": task.to_json(), "path": path})
    with np.load(path) as ref:
        a, b, c = ref["A"], ref["B"], ref["C"]
    assert a.std() > 0.1 and b.std() > 0.1     # random inputs, not zeros
    np.testing.assert_allclose(c, a @ b, **TOL)


# ------------------------------------------------------------------------------ faults
def test_mixed_batch_is_classified_in_order(option):
    task = Task("test.fault", (64,))
    modes = ["none", "abort", "raise", "wrong", "segfault", "bad_split", "none"]
    results = create_measure_batch(task, option)([fault_config(task, m) for m in modes])
    assert [r.status for r in results] == ["ok", "compile_error", "compile_error",
                                           "wrong_answer", "runtime_error", "compile_error", "ok"]
    by_mode = dict(zip(modes, results))
    assert "crashed the builder" in by_mode["abort"].message
    assert "SIGABRT" in by_mode["abort"].message
    assert "this candidate's template raises" in by_mode["raise"].message
    assert "factor must be positive" in by_mode["bad_split"].message
    assert "differs from the reference" in by_mode["wrong"].message
    assert "SIGSEGV" in by_mode["segfault"].message
    for r in results:
        assert r.status in STATUSES and r.all_cost >= 0 and r.timestamp > 0
        assert (len(r.costs) == 3) == (r.status == "ok")


def test_build_hang_is_a_timeout_and_the_batch_goes_on():
    task = Task("test.fault", (64,))
    opt = measure_option(LocalBuilder(timeout=1.5, n_parallel=1), LocalRunner(number=1, repeat=1))
    with create_measure_batch(task, opt) as measure:
        start = time.monotonic()
        results = measure([fault_config(task, "hang"), fault_config(task, "none")])
        elapsed = time.monotonic() - start
    assert [r.status for r in results] == ["timeout", "ok"]
    assert "timeout of 1.5 s" in results[0].message
    assert 1.5 <= results[0].all_cost < 10 and elapsed < 20     # not the 60 s sleep


def test_code_past_the_size_bound_is_a_compile_error_before_llvm():
    task = Task("test.matmul", MATMUL)
    configs = [task.config_space.get(1)]     # not built by another test (so not cached)
    small = measure_option(LocalBuilder(timeout=20.0, n_parallel=1, max_ir_lines=5),
                           LocalRunner(number=1, repeat=1))
    with create_measure_batch(task, small) as measure:
        (result,) = measure(configs)
    assert result.status == "compile_error", result
    assert "lines of LLVM IR, over the bound of 5" in result.message
    with pytest.raises(ValueError, match="max_ir_lines"):
        LocalBuilder(max_ir_lines=0)


def test_the_default_size_bound_follows_the_targets_registers():
    """1,500 lines per vector register: a tile past the registers spills (measure.py)."""
    from kiln.autotvm.measure import max_ir_lines_for
    from kiln.target import Target
    assert LocalBuilder().max_ir_lines is None
    assert max_ir_lines_for(Target("llvm -mcpu=haswell")) == 24_000
    assert max_ir_lines_for(Target("llvm -mcpu=skylake-avx512")) == 48_000


def test_run_past_timeout_is_a_timeout():
    task = Task("test.fault", (64,))
    # Each repeat must last 60 s: far past the runner's 1 s.
    opt = measure_option(LocalBuilder(timeout=20.0, n_parallel=1),
                         LocalRunner(number=1, repeat=1, min_repeat_ms=60000, timeout=1.0))
    with create_measure_batch(task, opt) as measure:
        (result,) = measure([fault_config(task, "none")])
    assert result.status == "timeout" and "running config #0 ran past" in result.message


def test_correctness_not_checked_by_default():
    task = Task("test.fault", (64,))
    opt = measure_option(LocalBuilder(timeout=20.0, n_parallel=1), LocalRunner(number=1, repeat=1))
    with create_measure_batch(task, opt) as measure:
        (result,) = measure([fault_config(task, "wrong")])
    assert result.status == "ok"


def test_results_go_into_records(option, tmp_path):
    task = Task("test.fault", (64,))
    configs = [fault_config(task, m) for m in ("none", "raise")]
    results = create_measure_batch(task, option)(configs)
    log = tmp_path / "tune.jsonl"
    with RecordWriter(log) as writer:
        writer.write_batch((MeasureInput(task.key, c.to_json(), str(task.target)), r)
                           for c, r in zip(configs, results))
    back = list(load_records(log))
    assert [r.status for _, r in back] == ["ok", "compile_error"]
    assert back[0][1].costs == results[0].costs


def test_cache_flushing_runner_times_and_checks(option):
    if not can_flush_cache():
        pytest.skip("enable_cpu_cache_flush needs a C compiler and an x86 CPU")
    task = Task("test.matmul", MATMUL)
    runner = LocalRunner(number=2, repeat=2, timeout=20.0, check_correctness=True,
                         enable_cpu_cache_flush=True)
    try:
        with create_measure_batch(task, measure_option(option.builder, runner)) as measure:
            results = measure([task.config_space.get(i) for i in (0, 5)])
    finally:
        runner.close()
    assert [r.status for r in results] == ["ok", "ok"], [r.message for r in results]
    assert all(len(r.costs) == 2 and min(r.costs) > 0 for r in results)


# ------------------------------------------------------------------------------ interface
def test_batch_inputs_and_option_errors(option):
    task = Task("test.matmul", MATMUL)
    measure = create_measure_batch(task, option)
    assert isinstance(measure, MeasureBatch) and measure([]) == []
    with pytest.raises(TypeError, match="a candidate is a ConfigEntity"):
        measure(["tile"])
    with pytest.raises(TypeError, match="option must come from measure_option"):
        create_measure_batch(task, {"builder": None})
    with pytest.raises(ValueError, match="number must be an int > 0"):
        LocalRunner(number=0)
    with pytest.raises(ValueError, match="timeout must be a number > 0"):
        LocalBuilder(timeout=-1)
    with pytest.raises(ValueError, match="enable_cpu_cache_flush must be True or False"):
        LocalRunner(enable_cpu_cache_flush="yes")
    with pytest.raises(TypeError, match="runner must have run"):
        measure_option(runner=object())
    assert measure_option().builder.timeout == 10.0


def test_stale_config_is_a_compile_error(option):
    task = Task("test.matmul", MATMUL)
    stale = {"index": 0, "knobs": {"no_such_knob": 3}}
    (result,) = create_measure_batch(task, option)([stale])
    assert result.status == "compile_error" and "no_such_knob" in result.message


# ------------------------------------------------------------------------------ the pool
def test_pool_recycles_workers_and_passes_thread_count():
    pool = WorkerPool(1, {"KILN_NUM_THREADS": str(num_threads())}, max_jobs=2)
    try:
        out = pool.map("fault_templates:worker_facts", [1, 2, 3], timeout=20.0)
        bad = pool.map("fault_templates:raise_error", ["x"], timeout=20.0)
    finally:
        pool.close()
    assert [o.kind for o in out] == ["ok"] * 3
    assert [o.value["payload"] for o in out] == [1, 2, 3]
    pids = [o.value["pid"] for o in out]
    assert pids[0] == pids[1] != pids[2] and os.getpid() not in pids
    assert all(o.value["threads"] == num_threads() for o in out)
    assert bad[0].kind == "error" and "KeyError" in bad[0].value


def test_a_prestarted_worker_serves_the_first_map_and_close_stops_it():
    pool = WorkerPool(1)
    try:
        pool.prestart()
        pool.prestart()                   # the pool has its one worker coming: no second one
        (pending,) = pool._pending
        (out,) = pool.map("fault_templates:worker_facts", [1], timeout=20.0)
        assert out.kind == "ok" and out.value["pid"] == pending.proc.pid
        assert pool._pending == []
        pool.close()
        pool.prestart()
        (pending,) = pool._pending
    finally:
        pool.close()
    assert pending.proc.poll() is not None and pool._pending == []


def test_pool_reports_a_worker_that_cannot_start():
    pool = WorkerPool(1, preload=("kiln_no_such_module",))
    with pytest.raises(WorkerPoolError, match="kiln_no_such_module"):
        pool.map("fault_templates:worker_facts", [1], timeout=20.0)
    pool.close()


def test_mismatch_tolerance():
    ref = {"B": np.array([1.0, 2.0, 3.0], np.float32)}
    assert _mismatch({"B": ref["B"] * (1 + 5e-4)}, ref, 1e-3, 1e-3) is None
    why = _mismatch({"B": ref["B"] + 0.1}, ref, 1e-3, 1e-3)
    assert "3 of 3 elements" in why
    ints = {"C": np.array([1, 2], np.int32)}
    assert _mismatch({"C": np.array([1, 3], np.int32)}, ints, 1e-3, 1e-3).startswith("buffer 'C'")
    assert "buffers" in _mismatch({"D": ints["C"]}, ints, 1e-3, 1e-3)

"""The thread pool: thread-count configuration and kiln_parallel_launch semantics."""
import ctypes
import os

import pytest

import kiln.runtime as rt
from kiln.runtime import support_lib, threadpool

from helpers_native import address_of

MAX_TASKS = 256


class Record(ctypes.Structure):
    _fields_ = [("runs", ctypes.c_int32 * MAX_TASKS),
                ("seen_num_tasks", ctypes.c_int32 * MAX_TASKS),
                ("thread_of", ctypes.c_uint64 * MAX_TASKS),
                ("fail_from", ctypes.c_int32),
                ("launch", ctypes.c_void_p),
                ("nested_tasks", ctypes.c_int32),
                ("nested_runs", ctypes.c_int32)]


def launch(tasks_lib, task_name, num_tasks, fail_from=-1, nested_tasks=0):
    record = Record(fail_from=fail_from, launch=rt.parallel_launch_address(),
                    nested_tasks=nested_tasks)
    status = support_lib.library().kiln_parallel_launch(address_of(tasks_lib, task_name),
                                                       ctypes.addressof(record), num_tasks)
    return status, record


@pytest.fixture
def pool_threads():
    """Run a test with a given pool size, restoring the previous one afterwards."""
    before = rt.num_threads()

    def use(n):
        rt.set_num_threads(n)
        return n

    yield use
    rt.set_num_threads(before)


# ------------------------------------------------------------------ configuration
def test_num_threads_default_respects_affinity(monkeypatch):
    monkeypatch.delenv("KILN_NUM_THREADS", raising=False)
    monkeypatch.setattr(threadpool, "_explicit_threads", None)
    assert rt.num_threads() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("value, expected", [("1", 1), ("3", 3), (" 8 ", 8), ("", None)])
def test_num_threads_from_environment(monkeypatch, value, expected):
    monkeypatch.setenv("KILN_NUM_THREADS", value)
    monkeypatch.setattr(threadpool, "_explicit_threads", None)
    assert rt.num_threads() == (expected or len(os.sched_getaffinity(0)))


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_num_threads_rejects_bad_environment(monkeypatch, value):
    monkeypatch.setenv("KILN_NUM_THREADS", value)
    monkeypatch.setattr(threadpool, "_explicit_threads", None)
    with pytest.raises(ValueError, match=f"KILN_NUM_THREADS must be a positive integer, "
                                         f"got '{value}'"):
        rt.num_threads()


@pytest.mark.parametrize("value", [0, -1, 2.0, True, "2"])
def test_set_num_threads_rejects_bad_values(value):
    with pytest.raises(ValueError, match="positive int"):
        rt.set_num_threads(value)


def test_set_num_threads_reaches_the_pool(pool_threads):
    pool_threads(3)
    assert rt.num_threads() == 3
    assert support_lib.library().kiln_get_num_threads() == 3


def test_launch_address_is_the_exported_symbol():
    lib = support_lib.library()
    assert rt.parallel_launch_address() == address_of(lib, "kiln_parallel_launch")


# ------------------------------------------------------------------ launches
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("num_tasks", [1, 2, 7, 64])
def test_every_task_runs_exactly_once(tasks_lib, pool_threads, threads, num_tasks):
    pool_threads(threads)
    status, record = launch(tasks_lib, "record_task", num_tasks)
    assert status == 0
    assert list(record.runs[:num_tasks]) == [1] * num_tasks
    assert sum(record.runs) == num_tasks
    assert set(record.seen_num_tasks[:num_tasks]) == {num_tasks}
    # Static blocks: every thread of the team gets work, no more threads than tasks.
    assert len(set(record.thread_of[:num_tasks])) == min(threads, num_tasks)


@pytest.mark.parametrize("num_tasks", [0, -1])
def test_non_positive_count_means_one_task_per_thread(tasks_lib, pool_threads, num_tasks):
    threads = pool_threads(3)
    status, record = launch(tasks_lib, "record_task", num_tasks)
    assert status == 0
    assert list(record.runs[:threads]) == [1] * threads and sum(record.runs) == threads
    assert set(record.seen_num_tasks[:threads]) == {threads}


@pytest.mark.parametrize("threads", [1, 2])
def test_first_failing_task_status_is_returned(tasks_lib, pool_threads, threads):
    pool_threads(threads)
    status, record = launch(tasks_lib, "record_task", 16, fail_from=5)
    assert status == 105
    assert list(record.runs[:6]) == [1] * 6   # every task before the failure ran
    assert max(record.runs) == 1


def test_nested_launch_runs_inline(tasks_lib, pool_threads):
    pool_threads(2)
    status, record = launch(tasks_lib, "nesting_task", 4, nested_tasks=3)
    assert status == 0
    assert list(record.runs[:4]) == [1] * 4
    assert record.nested_runs == 4 * 3


@pytest.mark.timing
def test_launch_overhead_is_measurable(tasks_lib, pool_threads):
    # Correctness of the timing helper only; speed is reported by bench_overhead.py.
    pool_threads(2)
    tasks_lib.time_launches.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32]
    tasks_lib.time_launches.restype = ctypes.c_double
    seconds = tasks_lib.time_launches(rt.parallel_launch_address(), 100, 0)
    assert 0 < seconds < 0.1

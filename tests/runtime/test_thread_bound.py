"""The thread pool's bound (issue 31, item 5): KILN_NUM_THREADS=100000 or set_num_threads(100000)
used to end the process with SIGSEGV inside libgomp (32,768: "Thread creation failed"); now
either is a ValueError naming the setting, the value and the bound, and the bound itself runs.

The crash cases run in a subprocess: the process must exit with a message, not a signal.
"""
import os
import subprocess
import sys

import pytest

from kiln.runtime import threadpool

# The stated rule: 1024 threads, or the CPU count where that is more.
BOUND = max(1024, os.cpu_count() or 1)

# A ReLU over 4096x512 floats: its parallel loop has more tasks (131,072) than 100,000, so
# every launch asks the pool for all its threads (before the bound: SIGSEGV at 100,000).
_RUN_MODEL = """
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper
import kiln
from kiln.frontend import from_onnx
from kiln.runtime import GraphExecutor, set_num_threads

if len(sys.argv) > 1:
    set_num_threads(int(sys.argv[1]))
graph = helper.make_graph(
    [helper.make_node("Relu", ["x"], ["y"])], "relu",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096, 512])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096, 512])])
mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
ex = GraphExecutor(kiln.compile(mod, target="llvm", params=params))
x = np.random.default_rng(0).standard_normal((4096, 512)).astype("float32")
ex.run(x=x)
assert np.array_equal(ex.get_output(0).numpy(), np.maximum(x, 0))
threads = [line.split()[1] for line in open("/proc/self/status") if line.startswith("Threads:")]
print("ok", threads[0])
"""


def run_model(threads_env=None, set_threads=None):
    pytest.importorskip("onnx")
    env = dict(os.environ)
    env.pop("KILN_NUM_THREADS", None)
    if threads_env is not None:
        env["KILN_NUM_THREADS"] = str(threads_env)
    args = [] if set_threads is None else [str(set_threads)]
    return subprocess.run([sys.executable, "-c", _RUN_MODEL, *args], env=env,
                          capture_output=True, text=True, timeout=600)


def assert_refused(result, *fragments):
    """Exit status 1 from the ValueError (not a signal: negative), its message holding each
    fragment."""
    assert result.returncode > 0, f"exit {result.returncode}\n{result.stderr}"
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: "), result.stderr
    for fragment in fragments:
        assert fragment in last, f"{fragment!r} not in {last!r}"


@pytest.mark.parametrize("value", [100000, 32768, BOUND + 1])
def test_environment_above_the_bound_is_refused(value):
    assert_refused(run_model(threads_env=value), f"KILN_NUM_THREADS={value}",
                   f"at most {BOUND} threads")


def test_set_num_threads_above_the_bound_is_refused():
    assert_refused(run_model(set_threads=100000), "set_num_threads(100000)",
                   f"at most {BOUND} threads")


@pytest.mark.parametrize("how", ["environment", "set_num_threads"])
def test_the_bound_itself_runs(how):
    result = (run_model(threads_env=BOUND) if how == "environment"
              else run_model(set_threads=BOUND))
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr}"
    status, threads = result.stdout.split()
    assert status == "ok"
    assert int(threads) > BOUND, "the pool did not start its BOUND threads: the test checks less"


def test_in_process_refusal_keeps_the_pool_size(monkeypatch):
    before = threadpool.num_threads()
    with pytest.raises(ValueError, match=rf"set_num_threads\({BOUND + 1}\).*at most {BOUND} "):
        threadpool.set_num_threads(BOUND + 1)
    assert threadpool.num_threads() == before
    monkeypatch.setattr(threadpool, "_explicit_threads", None)
    monkeypatch.setenv("KILN_NUM_THREADS", str(BOUND + 1))
    with pytest.raises(ValueError, match=rf"KILN_NUM_THREADS={BOUND + 1} .*at most {BOUND} "):
        threadpool.num_threads()
    monkeypatch.setenv("KILN_NUM_THREADS", str(BOUND))
    assert threadpool.num_threads() == BOUND

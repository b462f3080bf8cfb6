"""Fault-injecting templates for the measurement tests: "test.fault" (B = 2 * A) with a knob
"mode" choosing how the candidate misbehaves.

  none       a correct candidate
  raise      the template body raises (compile_error)
  bad_split  an invalid schedule primitive (compile_error from te)
  abort      os.abort() while building: the builder worker dies (compile_error)
  hang       sleeps 60 s while building (timeout)
  wrong      computes 2 * A + 1 (wrong_answer under check_correctness)
  segfault   reads A far out of bounds, so the kernel crashes at run time (runtime_error)

The destructive modes act only inside a measurement worker (workers.WORKER_ENV is set), so
that instantiating them in the test process raises instead of killing pytest. Spawned workers
import this module through the parent's sys.path (tests/ and this folder are on it).
"""
from __future__ import annotations

import os
import time

from kiln import te
from kiln.autotvm.task import get_config, template
from kiln.autotvm.workers import WORKER_ENV
from kiln.tir.op import cast

MODES = ["none", "raise", "bad_split", "abort", "hang", "wrong", "segfault"]


def _destructive(mode: str) -> None:
    if not os.environ.get(WORKER_ENV):
        raise RuntimeError(f"test.fault: mode {mode!r} only runs inside a measurement worker")
    if mode == "abort":
        os.abort()
    time.sleep(60)


@template("test.fault")
def fault(n):
    """B[i] = 2 * A[i] (with the fault of cfg["mode"]); returns (schedule, [A, B])."""
    cfg = get_config()
    cfg.define_knob("mode", MODES)
    mode = cfg["mode"].val
    if mode == "raise":
        raise ValueError("test.fault: this candidate's template raises")
    if mode in ("abort", "hang"):
        _destructive(mode)
    A = te.placeholder((n,), "float32", name="A")
    if mode == "segfault":
        if not os.environ.get(WORKER_ENV):
            raise RuntimeError("test.fault: mode 'segfault' only runs inside a measurement worker")
        # 2**34 floats past the start: 64 GiB away, outside any mapping of the runner.
        # (int64: an int32 index would wrap the offset away.)
        B = te.compute((n,), lambda i: A[cast(i, "int64") + (1 << 34)] * 2.0, name="B")
    elif mode == "wrong":
        B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    else:
        B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    if mode == "bad_split":
        s[B].split(B.op.axis[0], factor=0)
    return s, [A, B]


# -------------------------------------------------------------- jobs for tests of the pool
def worker_facts(payload):
    """A pool job: the worker's pid and kiln's thread count there."""
    from kiln.runtime import num_threads
    return {"pid": os.getpid(), "threads": num_threads(), "payload": payload}


def raise_error(payload):
    """A pool job that raises."""
    raise KeyError(f"no such thing: {payload}")

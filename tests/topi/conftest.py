"""Fixtures for the topi tests: build a schedule for target "llvm" and run it on numpy arrays;
make a fused epilogue (per-channel bias add + relu) after an anchor op."""
import numpy as np
import pytest

import kiln
from kiln import te
from kiln.topi import tags


def _build_run(schedule_fn, outs, ins, arrays, target="llvm"):
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = schedule_fn(outs)
    f = kiln.build(s, list(ins) + outs, target=target)
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=o.dtype) for o in outs]
    f(*arrays, *results)
    return results if len(results) > 1 else results[0]


@pytest.fixture
def build_run():
    """build_run(schedule_fn, outs, ins, arrays) -> the output array(s)."""
    return _build_run


def _bias_relu(y, bias, axis):
    """relu(y + bias broadcast along `axis`): a broadcast stage (inlined) and an elementwise
    output, as the graph layer fuses them after an anchor."""
    def add(*idx):
        return y[idx] + bias[idx[axis]]
    added = te.compute(y.shape, add, name="bias_add", tag=tags.BROADCAST)
    return te.compute(y.shape, lambda *idx: te.max(added[idx], te.const(0, y.dtype)),
                      name="relu", tag=tags.ELEMWISE)


@pytest.fixture
def bias_relu():
    """bias_relu(y, bias, axis) -> relu(y + bias[idx[axis]]) as two fused stages."""
    return _bias_relu


@pytest.fixture
def rand():
    """rand(shape, dtype="float32") -> uniform [-1, 1) values from a fixed seed."""
    rng = np.random.default_rng(42)

    def make(shape, dtype="float32"):
        return rng.uniform(-1, 1, size=shape).astype(dtype)
    return make

"""GraphExecutor.set_input_zero_copy / set_output_zero_copy (TVM's names) and kernel_calls():
kernels read inputs from and write outputs into the caller's arrays, nothing copied.

The model, h = relu(x) + y returning (h, h.reshape(8), y), has one kernel, one output that is a
view of another's bytes and one that is an input as it is. Its float32 results are compared
with numpy exactly: a max and an add are correctly rounded in both.
"""
import numpy as np
import pytest

import kiln
from kiln.graph import Function, IRModule, Tuple, call, var
from kiln.runtime import ArgumentError, GraphExecutor


@pytest.fixture(scope="module")
def lib():
    x, y = var("x", (2, 4)), var("y", (2, 4))
    h = call("add", call("nn.relu", x), y)
    body = Tuple([h, call("reshape", h, newshape=(8,)), y])
    return kiln.compile(IRModule.from_expr(Function([x, y], body)))


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((2, 4)).astype("float32") for _ in range(2)]


def _expected(x, y):
    h = np.maximum(x, 0) + y
    return [h, h.reshape(8), y]


def _addresses(m, entry):
    """The addresses m's kernel calls pass for execution-graph entry `entry`."""
    calls, found = m.kernel_calls(), set()
    for k, kern in enumerate(m.lib.graph["kernels"]):
        for slot, e in enumerate(kern["inputs"] + kern["outputs"]):
            if e == entry:
                found.add(calls.values(k)[slot])
    return found


def test_kernels_read_and_write_the_callers_arrays(lib):
    m = GraphExecutor(lib)
    x, y = _inputs(0)
    outs = [np.full((2, 4), np.nan, "float32"), np.full(8, np.nan, "float32"),
            np.full((2, 4), np.nan, "float32")]
    m.set_input_zero_copy("x", x)
    m.set_input_zero_copy(1, y)                      # by index, too
    for k, out in enumerate(outs):
        m.set_output_zero_copy(k, out)
    m.run()
    for got, want in zip(outs, _expected(x, y)):
        np.testing.assert_array_equal(got, want)
    g = lib.graph
    assert _addresses(m, g["inputs"][0]["entry"]) == {x.ctypes.data}
    assert _addresses(m, g["outputs"][0]) == {outs[0].ctypes.data}
    # Rebinding is per run: new arrays, new results, the old ones untouched.
    x2, y2 = _inputs(1)
    kept = outs[0].copy()
    out2 = np.empty((2, 4), "float32")
    m.set_input_zero_copy("x", x2)
    m.set_input_zero_copy("y", y2)
    m.set_output_zero_copy(0, out2)
    m.run()
    np.testing.assert_array_equal(out2, _expected(x2, y2)[0])
    np.testing.assert_array_equal(outs[0], kept)
    np.testing.assert_array_equal(outs[1], _expected(x2, y2)[1])   # still bound: a copy


def test_set_input_after_a_zero_copy_binding_copies_into_the_executor(lib):
    m = GraphExecutor(lib)
    x, y = _inputs(2)
    m.set_input_zero_copy("x", x)
    m.set_input("y", y)
    m.run()
    x_before = x.copy()
    x2, _ = _inputs(3)
    m.set_input("x", x2)                 # a copy, into the executor's buffer, not into x
    m.run()
    np.testing.assert_array_equal(x, x_before)
    assert x.ctypes.data not in _addresses(m, lib.graph["inputs"][0]["entry"])
    for k, want in enumerate(_expected(x2, y)):
        np.testing.assert_array_equal(m.get_output(k).numpy(), want)


def test_kernel_calls_are_what_run_calls(lib):
    m = GraphExecutor(lib)
    x, y = _inputs(4)
    m.set_input(x=x, y=y)
    calls = m.kernel_calls()
    assert len(calls) == len(lib.graph["kernels"])
    assert [f.name for f in calls.functions] == [k["func"] for k in lib.graph["kernels"]]
    for k in range(len(calls)):                     # the calls alone do one run's work
        assert calls.call(k) == 0
    np.testing.assert_array_equal(m.get_output(0).numpy(), _expected(x, y)[0])


def test_bad_bindings_name_the_problem(lib):
    m = GraphExecutor(lib)
    with pytest.raises(ArgumentError, match=r"input 'x': expected float32\[2x4\], got "
                                            r"float32\[4x2\]"):
        m.set_input_zero_copy("x", np.zeros((4, 2), "float32"))
    with pytest.raises(ArgumentError, match=r"input 'y': expected float32\[2x4\], got "
                                            r"float64\[2x4\]"):
        m.set_input_zero_copy("y", np.zeros((2, 4)))
    with pytest.raises(ArgumentError, match="the model has no input named 'z'"):
        m.set_input_zero_copy("z", np.zeros((2, 4), "float32"))
    with pytest.raises(ArgumentError, match="output 0: the array is not C-contiguous"):
        m.set_output_zero_copy(0, np.zeros((4, 2), "float32").T)
    frozen = np.zeros((2, 4), "float32")
    frozen.flags.writeable = False
    with pytest.raises(ArgumentError, match="output 0: the array is read-only"):
        m.set_output_zero_copy(0, frozen)
    with pytest.raises(ArgumentError, match="output index 3 is out of range: the model has 3 "
                                            "outputs"):
        m.set_output_zero_copy(3, np.zeros((2, 4), "float32"))
    misaligned = np.zeros(9, "float32").view("uint8")[1:33].view("float32").reshape(2, 4)
    with pytest.raises(ArgumentError, match="input 'x': address .* is not aligned"):
        m.set_input_zero_copy("x", misaligned)


def test_release_zero_copy_lets_go_of_the_callers_arrays(lib):
    import weakref
    m = GraphExecutor(lib)
    x, y = _inputs(2)
    out = np.empty((2, 4), "float32")
    m.set_input_zero_copy("x", x)
    m.set_input("y", y)
    m.set_output_zero_copy(0, out)
    m.run()
    np.testing.assert_array_equal(out, _expected(x, y)[0])
    m.release_zero_copy()
    g = lib.graph
    assert x.ctypes.data not in _addresses(m, g["inputs"][0]["entry"])
    assert out.ctypes.data not in _addresses(m, g["outputs"][0])
    watched = weakref.ref(x)
    del x
    assert watched() is None                     # the executor holds no reference any more
    with pytest.raises(kiln.runtime.ArgumentError, match="'x'"):
        m.run()                                  # a released input must be set again
    x2, _ = _inputs(3)
    m.set_input("x", x2)
    m.run()                                      # y stays set: it was copied, not bound
    np.testing.assert_array_equal(m.get_output(0).numpy(), _expected(x2, y)[0])

"""kiln.compile over symbolic dimensions: one library runs at every size within the declared
ranges (checked against numpy), with errors that name the input, the dimension and the range."""
import threading

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.driver.stages import CompileError
from kiln.graph import Function, IRModule, call, var
from kiln.runtime import ArgumentError, GraphExecutor, load_module

RNG = np.random.default_rng(0)
PARAMS = {"w": RNG.standard_normal((32, 16)).astype("float32"),
          "b": RNG.standard_normal(32).astype("float32")}


def _mlp(ranges=None):
    """softmax(relu(x @ w.T + b) + y) over rows n; y's rows are n too, a mask of 4 columns
    pairs with x in blocks of 4."""
    n = te.size_var("n")
    x, y = var("x", (n, 16)), var("y", (n, 32))
    w, b = var("w", (32, 16)), var("b", (32,))
    h = call("add", call("nn.relu", call("add", call("nn.dense", x, w), b)), y)
    out = call("nn.softmax", h, axis=-1)
    flat = call("reshape", h, newshape=(-1,))       # n * 32 elements, a size expression
    body = kiln.graph.Tuple([out, call("sum", flat, axis=(0,), keepdims=True)])
    attrs = {"dim_ranges": ranges} if ranges is not None else None
    return IRModule.from_expr(Function([x, y, w, b], body, attrs))


def _reference(x, y):
    h = np.maximum(x @ PARAMS["w"].T + PARAMS["b"], 0) + y
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True), h.reshape(-1).sum(keepdims=True)


@pytest.fixture(scope="module")
def lib():
    return kiln.compile(_mlp({"n": (1, 40)}), params=PARAMS)


def _inputs(n, seed=0):
    g = np.random.default_rng(seed)
    return (g.standard_normal((n, 16)).astype("float32"),
            g.standard_normal((n, 32)).astype("float32"))


def test_one_library_runs_every_size_in_the_range(lib):
    assert lib.graph["version"] == 4 and lib.graph["dims"] == {"n": [1, 40]}
    inputs = lib.graph["inputs"]
    assert [lib.graph["entries"][i["entry"]]["shape"] for i in inputs] == [["n", 16], ["n", 32]]
    assert [str(s) for s in lib.input_specs()] == ["x: float32[nx16]", "y: float32[nx32]"]
    m = GraphExecutor(lib)
    for n in (1, 3, 16, 17, 40, 5):          # back to a smaller size after the largest
        x, y = _inputs(n, seed=n)
        m.run(x=x, y=y)
        soft, total = _reference(x, y)
        assert m.get_output(0).shape == (n, 32)
        np.testing.assert_allclose(m.get_output(0).numpy(), soft, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(m.get_output(1).numpy(), total, rtol=1e-4)
        assert m.bound_sizes() == {"n": n}


def test_the_plan_is_made_at_the_high_end_and_each_run_sized_by_its_own(lib):
    m = GraphExecutor(lib)
    x, y = _inputs(40)
    m.run(x=x, y=y)
    assert m.memory_plan_bytes == sum(lib.graph["storages"]) >= 40 * 32 * 4
    small = m.bound_executor()
    m.run(x=x[:2], y=y[:2])
    assert m.bound_executor() is not small
    assert m.bound_executor().memory_plan_bytes < small.memory_plan_bytes


@pytest.mark.parametrize("shapes, message", [
    (((41, 16), (41, 32)), r"input 'x': dimension 0 \(n\) is 41, outside its range \[1, 40\]"),
    (((0, 16), (0, 32)), r"input 'x': dimension 0 \(n\) is 0, outside its range"),
    (((3, 15), (3, 32)), r"input 'x': dimension 1 must be 16, got 15"),
    (((3, 16), (4, 32)), r"inputs 'x' and 'y' disagree on n: 3 and 4"),
    (((3, 16, 1), (3, 32)), r"input 'x': expected 2 dimensions \(n, 16\)"),
])
def test_inputs_outside_the_declared_shapes_are_named(lib, shapes, message):
    m = GraphExecutor(lib)
    with pytest.raises(ArgumentError, match=message):
        m.run(x=np.zeros(shapes[0], "float32"), y=np.zeros(shapes[1], "float32"))


def test_dtype_unset_inputs_and_output_binding_errors(lib):
    m = GraphExecutor(lib)
    with pytest.raises(ArgumentError, match="input 'x': expected dtype float32, got float64"):
        m.set_input("x", np.zeros((2, 16)))
    m.set_input("x", np.zeros((2, 16), "float32"))
    with pytest.raises(ArgumentError, match=r"input\(s\) \['y'\] were never set"):
        m.run()
    with pytest.raises(ArgumentError, match="run\\(\\) was never called"):
        m.get_output(0)
    with pytest.raises(ArgumentError, match="sized by each run; read them with get_output"):
        m.set_output_zero_copy(0, np.zeros((2, 32), "float32"))


def test_set_input_copies_and_zero_copy_reads_in_place(lib):
    m = GraphExecutor(lib)
    x, y = _inputs(6)
    m.set_input("x", x)
    m.set_input_zero_copy("y", y)
    x_before = x.copy()
    x[:] = 0                         # a copy was taken
    y[0] += 1.0                      # read in place
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), _reference(x_before, y)[0],
                               rtol=1e-5, atol=1e-6)


def test_threads_run_their_own_sizes(lib):
    m = GraphExecutor(lib)
    errors = []

    def work(n):
        try:
            for k in range(5):
                x, y = _inputs(n, seed=100 * n + k)
                m.run(x=x, y=y)
                np.testing.assert_allclose(m.get_output(0).numpy(), _reference(x, y)[0],
                                           rtol=1e-5, atol=1e-6)
        except Exception as err:         # noqa: BLE001 (reported below)
            errors.append(err)
    threads = [threading.Thread(target=work, args=(n,)) for n in (2, 7, 33)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_exported_library_keeps_the_dimensions(lib, tmp_path):
    path = tmp_path / "mlp.so"
    lib.export_library(str(path))
    loaded = load_module(str(path))
    m = GraphExecutor(loaded)
    x, y = _inputs(9)
    m.run(x=x, y=y)
    np.testing.assert_allclose(m.get_output(0).numpy(), _reference(x, y)[0], rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(ArgumentError, match="outside its range"):
        m.run(x=np.zeros((50, 16), "float32"), y=np.zeros((50, 32), "float32"))


def test_an_unbounded_dimension_starts_at_one():
    lib = kiln.compile(_mlp(), params=PARAMS)
    assert lib.graph["dims"] == {"n": [1, None]}
    m = GraphExecutor(lib)
    x, y = _inputs(300)
    m.run(x=x, y=y)
    np.testing.assert_allclose(m.get_output(0).numpy(), _reference(x, y)[0], rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("ranges, message", [
    ({"m": (1, 4)}, r"dim_ranges names \['m'\], which no input or result of main has"),
    ({"n": (5, 2)}, r"dim_ranges\['n'\] = \(5, 2\) is not a range of sizes"),
    ({"n": (-1, 2)}, r"dim_ranges\['n'\] = \(-1, 2\) is not a range of sizes"),
])
def test_bad_ranges_are_compile_errors(ranges, message):
    with pytest.raises(CompileError, match=message):
        kiln.compile(_mlp(ranges), params=PARAMS)


def test_two_dimensions_of_one_name_are_refused():
    a, b = te.size_var("n"), te.size_var("n")
    x, y = var("x", (a, 4)), var("y", (b, 4))
    mod = IRModule.from_expr(Function([x, y], kiln.graph.Tuple([call("exp", x),
                                                                 call("exp", y)])))
    with pytest.raises(CompileError, match="two different symbolic dimensions are both named "
                                           "'n'"):
        kiln.compile(mod)


def test_arange_of_a_symbolic_length():
    n = te.size_var("n")
    x = var("x", (n,), "int64")
    body = call("add", x, call("arange", length=n, start=3, step=2, dtype="int64"))
    lib = kiln.compile(IRModule.from_expr(Function([x], body)))
    m = GraphExecutor(lib)
    for size in (1, 10):
        m.run(x=np.arange(size, dtype="int64"))
        np.testing.assert_array_equal(m.get_output(0).numpy(),
                                      np.arange(size) + 3 + 2 * np.arange(size))


def test_a_concatenation_of_two_symbolic_lengths():
    # a KV cache's past and new tokens: the kernel's result is (past + n) long, checked by the
    # runtime once past and n are bound
    past, n = te.size_var("past"), te.size_var("n")
    a, b = var("a", (past, 4)), var("b", (n, 4))
    body = call("exp", call("concatenate", kiln.graph.Tuple([a, b]), axis=0))
    lib = kiln.compile(IRModule.from_expr(Function(
        [a, b], body, {"dim_ranges": {"past": (1, 64), "n": (1, 8)}})))
    (kernel,) = lib.graph["kernels"]
    info = lib.graph["functions"][kernel["func"]]
    assert [p["shape"] for p in info["params"]] == [["past", 4], ["n", 4], ["(past + n)", 4]]
    m = GraphExecutor(lib)
    g = np.random.default_rng(3)
    for p, q in ((1, 1), (30, 5), (64, 8)):
        x, y = g.standard_normal((p, 4), "float32"), g.standard_normal((q, 4), "float32")
        m.run(a=x, b=y)
        np.testing.assert_allclose(m.get_output(0).numpy(), np.exp(np.concatenate([x, y])),
                                   rtol=1e-6)
    f = lib.get_function(kernel["func"])
    x, y = np.zeros((3, 4), "float32"), np.zeros((2, 4), "float32")
    with pytest.raises(ArgumentError, match=r"dimension 0: expected \(past \+ n\) = 5, got 6"):
        f(x, y, np.zeros((6, 4), "float32"))

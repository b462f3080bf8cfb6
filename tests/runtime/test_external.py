"""External functions in compiled models ("bring your own codegen"): partitioned regions are
compiled by their registered codegen, called by the graph executor beside kiln's kernels,
exported in the one library and reloaded in a fresh process; every failure is an error that
names the region, the compiler or the runtime. The target is tests/external_toy.py (float32
relu / add / multiply regions computed in numpy); references are torch's, rtol=atol=1e-5
(float32 convolutions of 72 terms).
"""
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import external_toy
import kiln
from kiln.codegen.external import ExternalCodegenError, register_external_codegen
from kiln.graph import Function, IRModule, call, const, var
from kiln.graph.transform.annotate_target import annotate_target
from kiln.graph.transform.merge_compiler_regions import merge_compiler_regions
from kiln.graph.transform.partition_graph import PartitionError, partition_graph
from kiln.runtime import GraphExecutor, ModelError, NativeCallError, load_module
from kiln.runtime.external import external_modules
from kiln.viz import graph_to_dot

TOL = 1e-5
r = np.random.default_rng(3)
W1 = r.uniform(-1, 1, (8, 8, 3, 3)).astype(np.float32)
W2 = r.uniform(-1, 1, (8, 8, 3, 3)).astype(np.float32)
SCALE = r.uniform(0.5, 1.5, (1, 8, 1, 1)).astype(np.float32)
X = r.uniform(-1, 1, (1, 8, 6, 6)).astype(np.float32)


def net():
    """conv (kiln) -> relu -> * scale (external) -> conv (kiln) -> + the relu (external)."""
    x = var("x", (1, 8, 6, 6))
    a = call("nn.relu", call("nn.conv2d", x, const(W1), padding=[1, 1, 1, 1]))
    b = call("multiply", a, const(SCALE))
    c = call("nn.conv2d", b, const(W2), padding=[1, 1, 1, 1])
    return IRModule.from_expr(Function([x], call("add", c, a)))


def reference(x):
    t = torch.from_numpy
    a = F.relu(F.conv2d(t(x), t(W1), padding=1))
    return (F.conv2d(a * t(SCALE), t(W2), padding=1) + a).numpy()


def partitioned(bind_constants=True):
    return partitioned_from(net(), bind_constants)


def partitioned_from(mod, bind_constants=True):
    mod = annotate_target(mod, [external_toy.NAME])
    return partition_graph(merge_compiler_regions(mod), bind_constants=bind_constants)


def run(lib, x=X):
    m = GraphExecutor(lib)
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def test_regions_run_beside_kiln_kernels():
    mod = partitioned()
    text = str(mod)
    assert "@test_ext_main_0(" in text and "@test_ext_main_1(" in text
    assert text.count('Compiler="test_ext"') == 2
    assert 'label="@test_ext_main_0' in graph_to_dot(mod)      # drawn as one node each
    lib = kiln.compile(mod)
    assert lib.graph["version"] == 3          # a runtime without external modules refuses it
    np.testing.assert_allclose(run(lib), reference(X), rtol=TOL, atol=TOL)
    toys = external_modules(lib)           # one module per region, as TVM's codegens make
    assert [t.function_names() for t in toys] == [["test_ext_main_0"], ["test_ext_main_1"]]
    assert [t.calls for t in toys] == [1, 1]
    # region 0 (relu, multiply) has two outputs: the product, and the relu for the residual
    assert len(toys[0].function_info("test_ext_main_0").params) == 1 + 2
    kernels = [k["func"] for k in lib.graph["kernels"]]
    assert kernels.count("test_ext_main_0") == 1 and any("conv2d" in k for k in kernels)


def test_constants_passed_instead_of_bound():
    lib = kiln.compile(partitioned(bind_constants=False))
    np.testing.assert_allclose(run(lib), reference(X), rtol=TOL, atol=TOL)
    info = external_modules(lib)[0].function_info("test_ext_main_0")
    assert len(info.params) == 2 + 2      # relu's input and the scale; two outputs


def test_exceptions_in_external_code_name_the_function():
    lib = kiln.compile(partitioned())
    x = X.copy()
    x[0, 0, 0, 0] = np.nan
    with pytest.raises(NativeCallError, match=r"test_ext_main_0.*raised ValueError: NaN input"):
        run(lib, x)
    np.testing.assert_allclose(run(lib), reference(X), rtol=TOL, atol=TOL)   # still usable


def test_exported_library_reloads_in_a_fresh_process(tmp_path):
    lib = kiln.compile(partitioned())
    path = tmp_path / "model.so"
    lib.export_library(path)
    np.save(tmp_path / "x.npy", X)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        from kiln.runtime import GraphExecutor, ModelError, load_module
        try:
            load_module({str(path)!r})
        except ModelError as err:
            print("without the runtime:", err)
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        import external_toy
        m = GraphExecutor(load_module({str(path)!r}))
        m.set_input("x", np.load({str(tmp_path / 'x.npy')!r}))
        m.run()
        np.save({str(tmp_path / 'y.npy')!r}, m.get_output(0).numpy())
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "without the runtime:" in done.stdout and "'test_ext'" in done.stdout
    assert "not registered" in done.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), run(lib))
    # ... and in this process, where the runtime is registered
    np.testing.assert_array_equal(run(load_module(path)), run(lib))


def test_bad_codegens_and_unpartitioned_modules_are_errors():
    with pytest.raises(PartitionError, match="partition_graph"):
        kiln.compile(annotate_target(net(), [external_toy.NAME]))
    mod = partitioned()
    mod["test_ext_main_0"] = Function(mod["test_ext_main_0"].params,
                                      mod["test_ext_main_0"].body,
                                      {**mod["test_ext_main_0"].attrs, "Compiler": "nobody"})
    with pytest.raises(ExternalCodegenError, match="no external codegen is registered for "
                                                   "compiler 'nobody'"):
        kiln.compile(mod)

    def wrong_shape(func, symbol, target):
        module = external_toy.toy_codegen(func, symbol, target)
        f = module.functions[symbol]
        p = f["info"].params
        f["info"] = type(f["info"])(symbol, p[:-1] + (type(p[-1])("bad", "buffer", "float32",
                                                                   (1, 8)),))
        return module

    register_external_codegen("test_wrong", wrong_shape, override=True)
    mod = partitioned()
    mod["test_ext_main_0"] = Function(mod["test_ext_main_0"].params,
                                      mod["test_ext_main_0"].body,
                                      {**mod["test_ext_main_0"].attrs, "Compiler": "test_wrong"})
    with pytest.raises(ExternalCodegenError, match=r"test_ext_main_0 takes .*float32\[1, 8\]"):
        kiln.compile(mod)


def test_corrupt_external_module_in_a_library_is_a_model_error():
    from kiln.runtime.external import load_external
    with pytest.raises(ModelError, match="malformed external module"):
        load_external({"type_key": "test_ext"}, "model.so")
    with pytest.raises(ModelError, match="external module of 'test_ext' does not load"):
        load_external({"type_key": "test_ext", "provider": "external_toy", "data": "e30x"},
                      "model.so")


def test_inputs_are_read_only_in_external_code():
    def in_place(func, symbol, target):
        module = external_toy.toy_codegen(func, symbol, target)
        run = module.get_function

        def writes_its_input(name):
            f = run(name)

            def call(*arrays):
                arrays[0][...] = 0           # an input: the executor's buffer, maybe a weight
                f(*arrays)
            return call
        module.get_function = writes_its_input
        return module

    register_external_codegen("test_in_place", in_place, override=True)
    mod = partitioned()
    mod["test_ext_main_0"] = Function(mod["test_ext_main_0"].params,
                                      mod["test_ext_main_0"].body,
                                      {**mod["test_ext_main_0"].attrs,
                                       "Compiler": "test_in_place"})
    with pytest.raises(NativeCallError, match="test_ext_main_0.*read-only"):
        run(kiln.compile(mod))


def test_composites_no_region_took_are_compiled_by_kiln():
    from kiln.graph.pattern import is_op, wildcard
    from kiln.graph.transform.merge_composite import merge_composite
    table = [("nobody.scale_conv", is_op("nn.conv2d")(is_op("multiply")(wildcard(), wildcard()),
                                                      wildcard()))]
    mod = merge_composite(net(), table)
    assert "Composite" in str(mod)
    mod = partitioned_from(mod)
    assert "Composite" not in str(mod["main"])     # put back as the ops they group
    np.testing.assert_allclose(run(kiln.compile(mod)), reference(X), rtol=TOL, atol=TOL)


def test_threads_and_the_profiler_run_external_functions():
    """Each thread runs the model on its own buffers, external functions included; the
    profiler times an external call as one of the model's kernels."""
    from concurrent.futures import ThreadPoolExecutor

    lib = kiln.compile(partitioned())
    m = GraphExecutor(lib)
    inputs = [r.uniform(-1, 1, X.shape).astype(np.float32) for _ in range(4)]

    def one(x):
        m.set_input("x", x)
        m.run()
        return m.get_output(0).numpy()

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(one, inputs * 3))
    for x, got in zip(inputs * 3, outs):
        np.testing.assert_allclose(got, reference(x), rtol=TOL, atol=TOL)
    report = kiln.runtime.profile(lib, inputs={"x": X}, number=2, repeat=2)
    names = {k.name for k in report.kernels}
    assert {"test_ext_main_0", "test_ext_main_1"} <= names
    assert all(k.seconds > 0 for k in report.kernels if k.name.startswith("test_ext"))

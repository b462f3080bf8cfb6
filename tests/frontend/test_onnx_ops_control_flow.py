"""The control-flow ONNX converters (If, Loop, Scan) beyond the ONNX node suite: branches and
bodies that read outer-scope values, run-time conditions, early exits, nested subgraphs,
Scan's axes and directions, and the errors and rejections.

Oracle: onnx.reference.ReferenceEvaluator. Tolerance: float32 rtol 1e-5 / atol 1e-6 (a few
adds and multiplies per element); float64 rtol 1e-12; integers exactly.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend import FrontendError, UnsupportedOpsError, from_onnx  # noqa: E402
from kiln.graph import Call, post_order  # noqa: E402

R = np.random.default_rng(3)
F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def info(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def graph(nodes, inputs, outputs, name="g", inits=()):
    return helper.make_graph(nodes, name, inputs, outputs, list(inits))


def model(nodes, feeds, outputs, inits=(), opset=17):
    """A model of `nodes` whose graph inputs are `feeds` (name -> array)."""
    inputs = [info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in feeds.items()]
    outs = [helper.make_value_info(o, onnx.TypeProto()) for o in outputs]
    tensors = [onnx.numpy_helper.from_array(a, n) for n, a in dict(inits).items()]
    return helper.make_model(graph(nodes, inputs, outs, "test", tensors),
                             opset_imports=[helper.make_opsetid("", opset)])


def run(m, feeds):
    mod, params = from_onnx(m)
    ex = kiln.runtime.GraphExecutor(kiln.compile(mod, target="llvm", params=params))
    ex.run(**feeds)
    return mod, [ex.get_output(k).numpy() for k in range(ex.get_num_outputs())]


def check(m, feeds, rtol=1e-5, atol=1e-6, refs=None):
    """Run m with kiln; compare with `refs`, by default the reference interpreter's results
    (which lacks opset 8's Scan, Scan's reversed directions and If inside Loop)."""
    mod, outs = run(m, feeds)
    if refs is None:
        refs = ReferenceEvaluator(m).run(None, feeds)
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        assert out.dtype == ref.dtype and out.shape == ref.shape
        tol = (1e-12, 0) if ref.dtype == np.float64 else (rtol, atol)
        np.testing.assert_allclose(out, ref, rtol=tol[0], atol=tol[1])
    return mod


def op_names(mod):
    return [n.op.name for n in post_order(mod["main"]) if isinstance(n, Call)]


def branch(op, inputs, out, name, **attrs):
    """A subgraph of one node that reads outer-scope values only."""
    return graph([helper.make_node(op, inputs, [out], name=f"{name}_node", **attrs)], [],
                 [info(out, F32, None)], name)


# -- If --------------------------------------------------------------------------------------

def test_if_on_run_time_condition_selects_between_branches_reading_the_outer_scope():
    x = R.standard_normal((3, 4)).astype("float32")
    node = helper.make_node("If", ["c"], ["y"], name="choose",
                            then_branch=branch("Add", ["x", "x"], "t", "then"),
                            else_branch=branch("Mul", ["x", "x"], "e", "else"))
    m = model([node], {"c": np.array(True), "x": x}, ["y"])
    mod, params = from_onnx(m)
    assert "where" in op_names(mod)          # both branches run; where picks
    lib = kiln.compile(mod, target="llvm", params=params)
    for cond in (True, False):
        ex = kiln.runtime.GraphExecutor(lib)
        ex.run(c=np.array(cond), x=x)
        want = ReferenceEvaluator(m).run(None, {"c": np.array(cond), "x": x})[0]
        np.testing.assert_allclose(ex.get_output(0).numpy(), want, rtol=1e-6)


def test_if_on_known_condition_imports_the_taken_branch_only():
    x = R.standard_normal((2, 5)).astype("float64")
    node = helper.make_node("If", ["c"], ["y"], name="choose",
                            then_branch=branch("Neg", ["x"], "t", "then"),
                            else_branch=branch("Abs", ["x"], "e", "else"))
    m = model([node], {"x": x}, ["y"], inits={"c": np.array([False])})
    mod = check(m, {"x": x})
    assert op_names(mod) == ["abs"]


def test_if_with_branches_of_different_shapes_needs_a_known_condition():
    x = R.standard_normal((4,)).astype("float32")
    node = helper.make_node("If", ["c"], ["y"], name="ragged",
                            then_branch=branch("Identity", ["x"], "t", "then"),
                            else_branch=branch("ReduceSum", ["x"], "e", "else", keepdims=0))
    m = model([node], {"c": np.array(True), "x": x}, ["y"])
    with pytest.raises(UnsupportedOpsError) as err:
        from_onnx(m)
    assert "If(output 0 is ((4,), 'float32') in then_branch and ((), 'float32')" in str(err.value)
    assert "ragged" in str(err.value)


def test_if_error_inside_a_branch_names_the_inner_node():
    x = R.standard_normal((2, 3)).astype("float32")
    bad = graph([helper.make_node("Softmax", ["x"], ["t"], name="inner_softmax", axis=5)], [],
                [info("t", F32, None)], "then")
    node = helper.make_node("If", ["c"], ["y"], name="outer_if", then_branch=bad,
                            else_branch=branch("Identity", ["x"], "e", "else"))
    m = model([node], {"x": x}, ["y"], inits={"c": np.array(True)})
    with pytest.raises(FrontendError, match=r"ONNX node 'outer_if' \(If\), subgraph "
                                            r"'then_branch': ONNX node 'inner_softmax' "
                                            r"\(Softmax\): .*axis 5"):
        from_onnx(m)


def test_unknown_op_inside_a_branch_is_reported_with_the_if():
    x = R.standard_normal((3,)).astype("float32")
    odd = graph([helper.make_node("NoSuchOp", ["x"], ["t"], name="weird")], [],
                [info("t", F32, None)], "then")
    node = helper.make_node("If", ["c"], ["y"], name="outer_if", then_branch=odd,
                            else_branch=branch("Identity", ["x"], "e", "else"))
    m = model([node], {"x": x}, ["y"], inits={"c": np.array(True)})
    with pytest.raises(UnsupportedOpsError) as err:
        from_onnx(m)
    assert err.value.op_types == ["If(NoSuchOp)"]


# -- Loop ------------------------------------------------------------------------------------

def _loop_body(cond_node):
    """body(i, cond, acc) -> (cond', acc + x * i, acc as a scan output), x from outside."""
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F32),
             helper.make_node("Mul", ["x", "fi"], ["step"]),
             helper.make_node("Add", ["acc", "step"], ["acc_out"]),
             helper.make_node("Identity", ["acc"], ["scan"]), cond_node]
    return graph(nodes, [info("i", I64, []), info("cond", BOOL, []), info("acc", F32, [3])],
                 [info("cond_out", BOOL, []), info("acc_out", F32, [3]),
                  info("scan", F32, [3])], "body")


def test_loop_with_a_trip_count_unrolls_and_stacks_the_scan_outputs():
    x = R.standard_normal((3,)).astype("float32")
    body = _loop_body(helper.make_node("Identity", ["cond"], ["cond_out"]))
    node = helper.make_node("Loop", ["m", "c", "a0"], ["acc", "scans"], name="loop", body=body)
    m = model([node], {"x": x, "a0": np.ones(3, "float32")}, ["acc", "scans"],
              inits={"m": np.array(4, "int64"), "c": np.array(True)})
    check(m, {"x": x, "a0": np.ones(3, "float32")})


def test_loop_stops_when_the_body_condition_folds_to_false():
    # cond_out = i < 2: three iterations run although the trip count allows 50.
    x = R.standard_normal((3,)).astype("float32")
    stop = [helper.make_node("Constant", [], ["two"], value=helper.make_tensor("v", I64, [],
                                                                               [2])),
            helper.make_node("Less", ["i", "two"], ["cond_out"])]
    body = _loop_body(stop[1])
    body.node.insert(0, stop[0])
    node = helper.make_node("Loop", ["m", "c", "a0"], ["acc", "scans"], name="loop", body=body)
    m = model([node], {"x": x, "a0": np.zeros(3, "float32")}, ["acc", "scans"],
              inits={"m": np.array(50, "int64"), "c": np.array(True)})
    mod, outs = run(m, {"x": x, "a0": np.zeros(3, "float32")})
    assert outs[1].shape == (3, 3)
    refs = ReferenceEvaluator(m).run(None, {"x": x, "a0": np.zeros(3, "float32")})
    for out, ref in zip(outs, refs):
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_loop_that_stops_on_run_time_data_is_unsupported():
    x = R.standard_normal((3,)).astype("float32")
    data_stop = [helper.make_node("ReduceSum", ["acc"], ["total"], keepdims=0),
                 helper.make_node("Constant", [], ["lim"],
                                  value=helper.make_tensor("v", F32, [], [5.0])),
                 helper.make_node("Less", ["total", "lim"], ["cond_out"])]
    body = _loop_body(data_stop[2])
    body.node.insert(0, data_stop[1])
    body.node.insert(0, data_stop[0])
    node = helper.make_node("Loop", ["m", "c", "a0"], ["acc", "scans"], name="data_loop",
                            body=body)
    m = model([node], {"x": x, "a0": np.zeros(3, "float32")}, ["acc", "scans"],
              inits={"m": np.array(9, "int64"), "c": np.array(True)})
    with pytest.raises(UnsupportedOpsError) as err:
        from_onnx(m)
    assert err.value.op_types == ["Loop(the loop condition depends on run-time data)"]


def test_loop_trip_count_from_run_time_data_is_an_error_naming_it():
    x = R.standard_normal((3,)).astype("float32")
    body = _loop_body(helper.make_node("Identity", ["cond"], ["cond_out"]))
    node = helper.make_node("Loop", ["m", "", "a0"], ["acc", "scans"], name="loop", body=body)
    m = model([node], {"m": np.array(3, "int64"), "x": x, "a0": x}, ["acc", "scans"])
    with pytest.raises(FrontendError, match=r"'loop' \(Loop\): input 0 \(trip count M"):
        from_onnx(m)


def test_loop_body_with_a_nested_if_on_the_iteration_number():
    # The body picks acc + x on even iterations and acc * 2 on odd ones: the If's condition
    # folds in each unrolled copy.
    x = R.standard_normal((3,)).astype("float32")
    parity = [helper.make_node("Constant", [], ["two"],
                               value=helper.make_tensor("v", I64, [], [2])),
              helper.make_node("Mod", ["i", "two"], ["r"]),
              helper.make_node("Constant", [], ["zero"],
                               value=helper.make_tensor("z", I64, [], [0])),
              helper.make_node("Equal", ["r", "zero"], ["even"]),
              helper.make_node("If", ["even"], ["acc_out"], name="inner_if",
                               then_branch=branch("Add", ["acc", "x"], "t", "then"),
                               else_branch=branch("Add", ["acc", "acc"], "e", "else")),
              helper.make_node("Identity", ["cond"], ["cond_out"])]
    body = graph(parity, [info("i", I64, []), info("cond", BOOL, []), info("acc", F32, [3])],
                 [info("cond_out", BOOL, []), info("acc_out", F32, [3])], "body")
    node = helper.make_node("Loop", ["m", "", "a0"], ["acc"], name="loop", body=body)
    m = model([node], {"x": x, "a0": np.ones(3, "float32")}, ["acc"],
              inits={"m": np.array(5, "int64")})
    acc = np.ones(3, "float32")
    for i in range(5):
        acc = acc + x if i % 2 == 0 else acc + acc
    mod = check(m, {"x": x, "a0": np.ones(3, "float32")}, refs=[acc])
    assert "where" not in op_names(mod)


# -- Scan ------------------------------------------------------------------------------------

def test_scan9_reversed_input_on_axis_1_and_output_on_axis_1():
    body = graph([helper.make_node("Add", ["s", "v"], ["s_out"]),
                  helper.make_node("Mul", ["s_out", "v"], ["y"])],
                 [info("s", F32, [2]), info("v", F32, [2])],
                 [info("s_out", F32, [2]), info("y", F32, [2])], "body")
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], name="scan", body=body,
                            num_scan_inputs=1, scan_input_axes=[1], scan_input_directions=[1],
                            scan_output_axes=[1], scan_output_directions=[1])
    feeds = {"s0": R.standard_normal(2).astype("float32"),
             "xs": R.standard_normal((2, 4)).astype("float32")}
    s, ys = feeds["s0"], np.zeros((2, 4), "float32")
    for t in range(4):                   # input read from the end, output written from it
        v = feeds["xs"][:, 3 - t]
        s = s + v
        ys[:, 3 - t] = s * v
    check(model([node], feeds, ["s", "ys"]), feeds, refs=[s, ys])


def test_scan8_runs_each_batch_entry():
    body = graph([helper.make_node("Add", ["s", "v"], ["s_out"]),
                  helper.make_node("Identity", ["s_out"], ["y"])],
                 [info("s", TensorProto.DOUBLE, [3]), info("v", TensorProto.DOUBLE, [3])],
                 [info("s_out", TensorProto.DOUBLE, [3]), info("y", TensorProto.DOUBLE, [3])],
                 "body")
    node = helper.make_node("Scan", ["", "s0", "xs"], ["s", "ys"], name="scan", body=body,
                            num_scan_inputs=1, directions=[1])
    feeds = {"s0": R.standard_normal((2, 3)), "xs": R.standard_normal((2, 4, 3))}
    # directions=[1]: each batch entry's sequence is read from its end.
    ys = np.cumsum(feeds["xs"][:, ::-1], axis=1) + feeds["s0"][:, None]
    check(model([node], feeds, ["s", "ys"], opset=8), feeds, refs=[ys[:, -1], ys])


def test_scan8_with_ragged_sequence_lengths_is_unsupported():
    body = graph([helper.make_node("Add", ["s", "v"], ["s_out"])],
                 [info("s", F32, [3]), info("v", F32, [3])], [info("s_out", F32, [3])], "body")
    node = helper.make_node("Scan", ["lens", "s0", "xs"], ["s"], name="scan", body=body,
                            num_scan_inputs=1)
    feeds = {"s0": np.zeros((2, 3), "float32"), "xs": np.zeros((2, 4, 3), "float32")}
    m = model([node], feeds, ["s"], inits={"lens": np.array([4, 2], "int32")}, opset=8)
    with pytest.raises(UnsupportedOpsError, match=r"sequence_lens \[4, 2\] shorter"):
        from_onnx(m)

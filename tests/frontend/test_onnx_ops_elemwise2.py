"""ONNX trigonometric, IsInf, bitwise, BitShift, Mod, Trilu, EyeLike, CumSum / CumProd and Size
converters: what the ONNX node suite leaves out (other dtypes, attribute combinations, operands
known at import, long scan axes, a 0-d constant output) and the errors, which name the node.

Oracle: onnx.reference.ReferenceEvaluator, or numpy where stated. Tolerances: float32
rtol 1e-6 / atol 1e-6 for single libm calls and running sums of a few hundred terms of
magnitude 1 (1e-5); float16 rtol 1e-3 (half an ulp is 4.9e-4); float64 1e-12; integers, bools
and remainders (exact operations) exactly.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend import FrontendError, from_onnx  # noqa: E402
from kiln.graph import Call, post_order  # noqa: E402

R = np.random.default_rng(7)


def model(nodes, feeds, inits=None, outputs=("y",), opset=22):
    inits = inits or {}
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            a.shape) for n, a in feeds.items()]
    outs = [helper.make_value_info(n, onnx.TypeProto()) for n in outputs]
    tensors = [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()]
    graph = helper.make_graph(nodes, "test", inputs, outs, tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def node(op, inputs, outputs=("y",), name=None, **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=name or f"{op.lower()}_node",
                            **attrs)


def run_kiln(m, feeds):
    mod, params = from_onnx(m)
    ex = kiln.runtime.GraphExecutor(kiln.compile(mod, target="llvm", params=params))
    ex.run(**feeds)
    return [ex.get_output(k).numpy() for k in range(ex.get_num_outputs())]


def check(m, feeds, rtol=1e-6, atol=1e-6, refs=None):
    outs = run_kiln(m, feeds)
    refs = ReferenceEvaluator(m).run(None, feeds) if refs is None else refs
    assert len(outs) == len(refs)
    for k, (out, ref) in enumerate(zip(outs, refs)):
        ref = np.asarray(ref)
        assert (out.dtype, out.shape) == (ref.dtype, ref.shape), f"output {k}"
        if ref.dtype.kind in "biu":
            np.testing.assert_array_equal(out, ref, err_msg=f"output {k}")
        else:
            tol = (1e-12, 1e-12) if ref.dtype == np.float64 else (rtol, atol)
            np.testing.assert_allclose(out, ref, rtol=tol[0], atol=tol[1], err_msg=f"output {k}")


def import_error(m, match):
    with pytest.raises(FrontendError, match=match):
        from_onnx(m)


# -- trigonometric and hyperbolic ----------------------------------------------------------

TRIG = ["Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Atanh"]


@pytest.mark.parametrize("dtype,rtol", [("float32", 1e-6), ("float64", 1e-12),
                                        ("float16", 1e-3)])
def test_trigonometric_all_in_one_model(dtype, rtol):
    """Every function on (-0.95, 0.95) (the domain of asin, acos, atanh), Acosh on [1, 4];
    with an exact zero, NaN and the domain's edges."""
    x = R.uniform(-0.95, 0.95, 29).astype(dtype)
    x[:4] = [0.0, np.nan, 1.0, -1.0]
    z = np.concatenate([[1.0, np.inf], R.uniform(1, 4, 11)]).astype(dtype)
    outs = [f"y_{op}" for op in TRIG]
    nodes = [node(op, ["x"], [o], name=o) for op, o in zip(TRIG, outs)]
    nodes.append(node("Acosh", ["z"], ["y_Acosh"]))
    m = model(nodes, {"x": x, "z": z}, outputs=outs + ["y_Acosh"])
    check(m, {"x": x, "z": z}, rtol=rtol, atol=0)


def test_trigonometric_of_an_integer_is_an_import_error():
    m = model([node("Sin", ["x"], name="sin_of_ints")], {"x": np.arange(3, dtype="int32")},
              opset=7)
    import_error(m, r"sin_of_ints.*floating-point")


# -- IsInf -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_isinf_attribute_combinations(dtype):
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -1.5, 65504.0], dtype)
    flags = [(1, 1), (1, 0), (0, 1), (0, 0)]
    outs = [f"y{n}{p}" for n, p in flags]
    nodes = [node("IsInf", ["x"], [o], name=o, detect_negative=n, detect_positive=p)
             for (n, p), o in zip(flags, outs)]
    check(model(nodes, {"x": x}, outputs=outs), {"x": x})


# -- bitwise and shifts -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64"])
def test_bitwise_ops_broadcast(dtype):
    info = np.iinfo(dtype)
    a = R.integers(info.min, info.max, (2, 3, 4), dtype=dtype, endpoint=True)
    b = R.integers(info.min, info.max, (4,), dtype=dtype, endpoint=True)
    ops = ["BitwiseAnd", "BitwiseOr", "BitwiseXor"]
    nodes = [node(op, ["a", "b"], [op], name=op) for op in ops] + [node("BitwiseNot", ["a"])]
    check(model(nodes, {"a": a, "b": b}, outputs=ops + ["y"]), {"a": a, "b": b})


@pytest.mark.parametrize("dtype", ["int16", "uint32", "int64", "uint8"])
def test_bitshift_amounts_out_of_range(dtype):
    """Amounts -70 .. 70 (negative and past the width give 0, or -1 for a negative value
    shifted right), values of both signs, an amount broadcast along a row."""
    info = np.iinfo(dtype)
    x = R.integers(info.min, info.max, (3, 141), dtype=dtype, endpoint=True)
    amounts = np.arange(-70, 71) if info.min < 0 else np.arange(0, 141)
    y = amounts.astype(dtype)
    nodes = [node("BitShift", ["x", "y"], ["left"], name="l", direction="LEFT"),
             node("BitShift", ["x", "y"], ["right"], name="r", direction="RIGHT")]
    check(model(nodes, {"x": x, "y": y}, outputs=["left", "right"]), {"x": x, "y": y})


def test_bitshift_by_a_constant():
    x = np.array([1, -8, 100, -128], "int8")
    m = model([node("BitShift", ["x", "s"], direction="RIGHT")], {"x": x},
              {"s": np.array([3], "int8")})
    check(m, {"x": x})


def test_bitwise_errors_name_the_node():
    f = np.zeros(3, "float32")
    import_error(model([node("BitwiseAnd", ["a", "b"], name="band")], {"a": f, "b": f}),
                 r"band.*input 0 has element type float32; BitwiseAnd takes integers")
    i = np.zeros(3, "uint8")
    import_error(model([node("BitShift", ["a", "b"], name="sh", direction="UP")],
                       {"a": i, "b": i}),
                 r"sh.*direction must be 'LEFT' or 'RIGHT', got 'UP'")


# -- Mod ---------------------------------------------------------------------------------

def test_mod_float_edge_cases_and_exactness():
    """Both modes on signed zeros, infinities, NaN and a large quotient (where a - b *
    floor(a / b) loses every digit); numpy's mod and fmod are exact, so the comparison is too."""
    a = np.array([0.0, -0.0, -3.0, 3.0, -1.0, 1.0, np.inf, 1.0, np.nan, 1e17 + 8, -7.5, 7.5])
    b = np.array([-2.0, 2.0, np.inf, np.inf, -np.inf, -np.inf, 2.0, 0.0, 2.0, 3.0, 2.0, -2.0])
    nodes = [node("Mod", ["a", "b"], ["floor"], name="m0", fmod=0),
             node("Mod", ["a", "b"], ["trunc"], name="m1", fmod=1)]
    m = model(nodes, {"a": a, "b": b}, outputs=["floor", "trunc"])
    floor, trunc = run_kiln(m, {"a": a, "b": b})
    np.testing.assert_array_equal(floor, np.mod(a, b))
    np.testing.assert_array_equal(np.signbit(floor), np.signbit(np.mod(a, b)))
    np.testing.assert_array_equal(trunc, np.fmod(a, b))
    np.testing.assert_array_equal(np.signbit(trunc), np.signbit(np.fmod(a, b)))


def test_mod_integer_fmod_and_folding():
    a = np.array([-7, 7, -7, 7, 0], "int32")
    b = np.array([2, -2, -2, 2, 3], "int32")
    m = model([node("Mod", ["a", "b"], ["y"], fmod=1),
               node("Mod", ["c", "d"], ["z"], name="known", fmod=1)], {"a": a, "b": b},
              {"c": np.array([-7, 9], "int64"), "d": np.array([3, -4], "int64")},
              outputs=["y", "z"])
    check(m, {"a": a, "b": b})
    mod, _ = from_onnx(m)       # the known operands' Mod folds while importing
    assert [n.op.name for n in post_order(mod["main"]) if isinstance(n, Call)] == ["fmod"]


# -- Trilu and EyeLike -------------------------------------------------------------------

@pytest.mark.parametrize("k", [-(2 ** 40), -2, 0, 3, 2 ** 62])
def test_trilu_k_and_batches(k):
    x = R.uniform(-1, 1, (2, 3, 5, 4)).astype("float32")
    kk = np.array(k, "int64")
    nodes = [node("Trilu", ["x", "k"], ["u"], name="u"),
             node("Trilu", ["x", "k"], ["l"], name="l", upper=0)]
    check(model(nodes, {"x": x}, {"k": kk}, outputs=["u", "l"]), {"x": x})


def test_trilu_bool_and_int_without_k():
    x = R.integers(0, 2, (4, 6)).astype(bool)
    n = R.integers(-9, 9, (6, 4)).astype("int16")
    nodes = [node("Trilu", ["x"], ["u"], name="u"), node("Trilu", ["n"], ["l"], name="l", upper=0)]
    check(model(nodes, {"x": x, "n": n}, outputs=["u", "l"]), {"x": x, "n": n})


def test_eyelike_dtype_and_k():
    x = np.zeros((3, 5), "int32")
    nodes = [node("EyeLike", ["x"], ["a"], name="a", k=2),
             node("EyeLike", ["x"], ["b"], name="b", k=-1, dtype=onnx.TensorProto.DOUBLE),
             node("EyeLike", ["x"], ["c"], name="c", dtype=onnx.TensorProto.BOOL)]
    check(model(nodes, {"x": x}, outputs=["a", "b", "c"]), {"x": x})


def test_trilu_and_eyelike_errors_name_the_node():
    v = np.zeros(4, "float32")
    import_error(model([node("Trilu", ["x"], name="tri")], {"x": v}),
                 r"tri.*input 0 of shape \(4,\) is not a \(batch of\) matrices")
    import_error(model([node("EyeLike", ["x"], name="eye")], {"x": np.zeros((2, 2, 2))}),
                 r"eye.*input 0 has shape \(2, 2, 2\); EyeLike takes a matrix")


# -- CumSum / CumProd ----------------------------------------------------------------------

@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_cumulative_long_axis_all_modes(op):
    """An axis of 300 (blocks of 18, the last one partial), every exclusive / reverse pair,
    the axis given negative."""
    lo, hi = (0.98, 1.02) if op == "CumProd" else (-1, 1)
    x = R.uniform(lo, hi, (2, 300)).astype("float32")
    modes = [(e, r) for e in (0, 1) for r in (0, 1)]
    outs = [f"y{e}{r}" for e, r in modes]
    nodes = [node(op, ["x", "axis"], [o], name=o, exclusive=e, reverse=r)
             for (e, r), o in zip(modes, outs)]
    m = model(nodes, {"x": x}, {"axis": np.array(-1, "int32")}, outputs=outs, opset=26)
    check(m, {"x": x}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["int64", "uint32", "float64"])
def test_cumsum_dtypes_middle_axis(dtype):
    x = R.integers(0, 50, (3, 40, 2)).astype(dtype)
    m = model([node("CumSum", ["x", "axis"], reverse=1)], {"x": x},
              {"axis": np.array(1, "int64")})
    check(m, {"x": x})


def test_cumsum_int32_wraps_like_a_loop():
    x = np.full(100, 2 ** 30, "int32")
    m = model([node("CumSum", ["x", "axis"])], {"x": x}, {"axis": np.array(0, "int64")})
    check(m, {"x": x}, refs=[np.cumsum(x, dtype="int32")])


def test_cumulative_errors_name_the_node():
    x = np.zeros((2, 3), "float32")
    import_error(model([node("CumSum", ["x", "a"], name="cs")], {"x": x},
                       {"a": np.array(2, "int64")}),
                 r"cs.*axis 2 is out of range for input 0 of rank 2")
    import_error(model([node("CumProd", ["x", "a"], name="cp")], {"x": x},
                       {"a": np.array([0, 1], "int64")}, opset=26),
                 r"cp.*input 1 \(axis\) must hold one integer, got 2")


# -- Size: a 0-d constant output ----------------------------------------------------------

def test_size_is_a_scalar_through_compile_and_export(tmp_path):
    x = np.zeros((3, 4, 5), "float32")
    m = model([node("Size", ["x"])], {"x": x})
    mod, params = from_onnx(m)
    lib = kiln.compile(mod, target="llvm", params=params)
    (out,) = run_kiln(m, {"x": x})
    assert out.shape == () and out.dtype == np.int64 and out == 60
    lib.export_library(str(tmp_path / "size.so"))
    ex = kiln.runtime.GraphExecutor(kiln.runtime.load_module(str(tmp_path / "size.so")))
    ex.run(x=x)
    assert ex.get_output(0).numpy().shape == ()

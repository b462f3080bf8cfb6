"""Quantized graph ops (qnn.*), LegalizeQnn and FakeQuantizationToInteger.

Every qnn op is compiled and compared with a numpy reference of its definition: integer results
exactly (products are exact in int32; the references compute in int64 / float64), quantized
outputs to the exact value too, since the references round half to even from the same float32 or
float64 value kiln computes. FakeQuantizationToInteger is checked for structure (which ops remain)
and numerically against the same graph computed in float ("fake" quantization, the pass
disabled): the two may differ by one step of the output's scale where the float sum and the
exact integer sum round to different neighbours, and must agree on almost every element.
"""
import numpy as np
import pytest
import torch

import kiln
from kiln.graph import Function, GraphTypeError, IRModule, call, const, post_order, var
from kiln.graph.transform import PassContext, fake_quantization_to_integer
from kiln.runtime import GraphExecutor


def _run(func, *inputs, disabled=()):
    with PassContext(opt_level=3, disabled_pass=disabled):
        lib = kiln.compile(IRModule.from_expr(func))
    ex = GraphExecutor(lib)
    ex.run(**{p.name_hint: x for p, x in zip(func.params, inputs)})
    return ex.get_output(0).numpy()


def _ops(expr) -> list:
    return [e.op.name for e in post_order(expr) if hasattr(e, "op") and hasattr(e.op, "name")]


def _c(value, dtype):
    return const(np.asarray(value, dtype))


RNG = np.random.default_rng(0)


# ------------------------------------------------------------------------------ single ops
def test_quantize_and_dequantize_per_tensor_and_per_channel():
    x = var("x", (2, 3, 4, 5))
    scale = np.array([0.05, 0.1, 0.2], "float32")
    zero = np.array([3, -2, 0], "int8")
    q = call("qnn.quantize", x, _c(scale, "float32"), _c(zero, "int8"), axis=1,
             out_dtype="int8")
    data = (RNG.standard_normal((2, 3, 4, 5)) * 8).astype("float32")
    data[0, 0, 0, :3] = [0.025, 0.075, -0.125]        # ties: half to even
    want = np.clip(np.round(data / scale[:, None, None].astype("float32"))
                   + zero[:, None, None], -128, 127).astype("int8")
    got = _run(Function([x], q), data)
    np.testing.assert_array_equal(got, want)

    qv = var("q", (2, 3, 4, 5), "int8")
    dq = call("qnn.dequantize", qv, _c(scale, "float32"), _c(zero, "int8"), axis=1)
    want = ((want.astype("float32") - zero[:, None, None]) * scale[:, None, None])
    np.testing.assert_array_equal(_run(Function([qv], dq), got), want)


def test_requantize_rounds_half_to_even_then_adds_the_zero_point_and_saturates():
    """As QuantizeLinear: round(x / scale) + zero_point (not round(x / scale + zero_point),
    which differs on ties when the zero point is odd)."""
    acc = var("acc", (1, 8), "int32")
    y = call("qnn.requantize", acc, _c(0.5, "float32"), _c(0, "int32"), _c(1.0, "float32"),
             _c(11, "uint8"), out_dtype="uint8")
    data = np.array([[1, 3, 5, -7, -30, 600, 2 ** 30, -2 ** 31]], "int32")
    want = np.clip(np.round(data.astype("float64") * 0.5) + 11, 0, 255).astype("uint8")
    np.testing.assert_array_equal(_run(Function([acc], y), data), want)
    assert list(want[0, :3]) == [11, 13, 13]            # 0.5 → 0, 1.5 → 2, 2.5 → 2


def _shifted(value, zero, axis=0, ndim=None):
    zero = np.asarray(zero, "int64")
    if zero.ndim:
        zero = zero.reshape([-1 if k == axis else 1 for k in range(value.ndim)])
    return value.astype("int64") - zero


@pytest.mark.parametrize("groups,stride,pad", [(1, 1, 1), (2, 2, 2), (1, 2, 0)])
def test_conv2d_subtracts_zero_points_and_pads_with_the_input_zero_point(groups, stride, pad):
    x = RNG.integers(0, 256, (1, 4, 9, 9)).astype("uint8")
    w = RNG.integers(-128, 128, (6, 4 // groups, 3, 3)).astype("int8")
    wz = np.array([0, 3, -5, 0, 1, 127], "int8")
    xv = var("x", x.shape, "uint8")
    y = call("qnn.conv2d", xv, const(w), _c(121, "uint8"), const(wz), strides=(stride, stride),
             padding=(pad,) * 4, groups=groups)
    got = _run(Function([xv], y), x)
    ref = torch.nn.functional.conv2d(torch.from_numpy(_shifted(x, 121).astype("float64")),
                                     torch.from_numpy(_shifted(w, wz).astype("float64")),
                                     stride=stride, padding=pad, groups=groups).numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ref.astype("int64"))


def test_dense_with_per_unit_weight_zero_points():
    x = RNG.integers(-128, 128, (5, 33)).astype("int8")
    w = RNG.integers(-128, 128, (7, 33)).astype("int8")
    wz = RNG.integers(-3, 4, 7).astype("int8")
    xv = var("x", x.shape, "int8")
    y = call("qnn.dense", xv, const(w), _c(-4, "int8"), const(wz))
    want = _shifted(x, -4) @ _shifted(w, wz).T
    np.testing.assert_array_equal(_run(Function([xv], y), x), want)


def test_add_of_two_quantized_tensors():
    a = RNG.integers(0, 256, (2, 16)).astype("uint8")
    b = RNG.integers(0, 256, (1, 16)).astype("uint8")
    av, bv = var("a", a.shape, "uint8"), var("b", b.shape, "uint8")
    y = call("qnn.add", av, bv, _c(0.02, "float32"), _c(128, "uint8"), _c(0.05, "float32"),
             _c(7, "uint8"), _c(0.1, "float32"), _c(30, "uint8"), out_dtype="uint8")
    f32 = np.float32
    real = ((a.astype(f32) - 128) * (f32(0.02) / f32(0.1))
            + (b.astype(f32) - 7) * (f32(0.05) / f32(0.1)))
    want = np.clip(np.round(real) + 30, 0, 255).astype("uint8")
    got = _run(Function([av, bv], y), a, b)
    assert np.abs(got.astype(int) - want).max() <= 1 and (got == want).mean() > 0.95


def test_relations_name_the_bad_parameter():
    x = var("x", (2, 3, 4, 4))
    with pytest.raises(GraphTypeError, match="scale has 2 values but axis 1"):
        call("qnn.quantize", x, _c([0.1, 0.2], "float32"), _c([0, 0], "int8"),
             axis=1).checked_type
    with pytest.raises(GraphTypeError, match="zero_point must have an integer dtype"):
        call("qnn.quantize", x, _c(0.1, "float32"), _c(0.0, "float32")).checked_type
    with pytest.raises(GraphTypeError, match="out_dtype float32 is not a quantized type"):
        call("qnn.quantize", x, _c(0.1, "float32"), _c(0, "int8"),
             out_dtype="float32").checked_type
    q = var("q", (2, 3, 4, 4), "int16")
    w = const(np.zeros((2, 3, 1, 1), "int8"))
    with pytest.raises(GraphTypeError, match="data must be int8 or uint8, got int16"):
        call("qnn.conv2d", q, w, _c(0, "int16"), _c(0, "int8")).checked_type


# ------------------------------------------------------------------------------ regions
def _dq(x, scale, zero, axis=0):
    return call("qnn.dequantize", x, const(np.asarray(scale, "float32")),
                const(np.asarray(zero, x.checked_type.dtype if hasattr(x, "checked_type")
                                 else "uint8")), axis=axis)


def _q(x, scale, zero, dtype="uint8"):
    return call("qnn.quantize", x, _c(scale, "float32"), _c(zero, dtype), out_dtype=dtype)


def _conv_block():
    """quantize(relu(bias_add(conv(dq(x), dq(w)), dq(b)))) as ONNX Runtime's QDQ writes it."""
    x = var("x", (1, 8, 10, 10), "uint8")
    w = RNG.integers(-127, 128, (16, 8, 3, 3)).astype("int8")
    w_scale = (RNG.random(16) * 0.01 + 0.002).astype("float32")
    b_scale = (np.float32(0.03) * w_scale).astype("float32")
    bias = RNG.integers(-3000, 3000, 16).astype("int32")
    conv = call("nn.conv2d", _dq(x, 0.03, 120), _dq(const(w), w_scale, np.zeros(16, "int8")),
                padding=(1, 1, 1, 1))
    y = call("nn.bias_add", conv, _dq(const(bias), b_scale, np.zeros(16, "int32")), axis=1)
    return x, call("nn.relu", y)


def test_a_qdq_convolution_becomes_an_integer_convolution():
    x, y = _conv_block()
    func = Function([x], _q(y, 0.05, 0))
    after = fake_quantization_to_integer(func)
    ops = _ops(after)
    assert {"qnn.conv2d", "qnn.requantize", "nn.bias_add", "clip"} <= set(ops), ops
    assert "nn.conv2d" not in ops and "qnn.dequantize" not in ops, ops

    data = RNG.integers(0, 256, x.checked_type.shape).astype("uint8")
    integer = _run(func, data)
    fake = _run(func, data, disabled=["FakeQuantizationToInteger"])
    assert integer.dtype == fake.dtype == np.uint8
    diff = np.abs(integer.astype(int) - fake.astype(int))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.99, (diff.max(), (diff == 0).mean())


def test_a_value_read_outside_the_region_keeps_it_in_float():
    x, y = _conv_block()
    func = Function([x], call("add", call("cast", _q(y, 0.05, 0), dtype="float32"), y))
    ops = _ops(fake_quantization_to_integer(func))
    assert "qnn.conv2d" not in ops and "nn.conv2d" in ops and "qnn.quantize" in ops


def test_add_then_relu_quantizes_once_into_the_output_type():
    a, b = var("a", (1, 4, 6, 6), "uint8"), var("b", (1, 4, 6, 6), "uint8")
    y = call("nn.relu", call("add", _dq(a, 0.02, 100), _dq(b, 0.04, 90)))
    func = Function([a, b], _q(y, 0.03, 0))
    ops = _ops(fake_quantization_to_integer(func))
    assert "qnn.add" in ops and "qnn.requantize" not in ops and "add" not in ops, ops
    da = RNG.integers(0, 256, (1, 4, 6, 6)).astype("uint8")
    db = RNG.integers(0, 256, (1, 4, 6, 6)).astype("uint8")
    integer, fake = _run(func, da, db), _run(func, da, db, disabled=["FakeQuantizationToInteger"])
    diff = np.abs(integer.astype(int) - fake.astype(int))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.95


def test_shape_ops_and_max_pool_keep_the_affine_type():
    x = var("x", (1, 4, 8, 8), "int8")
    y = call("nn.max_pool2d", _dq(x, 0.1, -3), pool_size=(2, 2), strides=(2, 2))
    y = call("transpose", call("reshape", y, newshape=(1, 4, 16)), axes=(0, 2, 1))
    func = Function([x], _q(y, 0.1, -3, "int8"))
    after = fake_quantization_to_integer(func)
    assert set(_ops(after)) == {"nn.max_pool2d", "reshape", "transpose"}, _ops(after)
    data = RNG.integers(-128, 128, (1, 4, 8, 8)).astype("int8")
    want = data.reshape(1, 4, 4, 2, 4, 2).max(axis=(3, 5)).reshape(1, 4, 16).transpose(0, 2, 1)
    np.testing.assert_array_equal(_run(func, data), want)


def test_requantizing_a_dequantized_value():
    x = var("x", (3, 5), "int8")
    func = Function([x], _q(_dq(x, 0.1, 2), 0.25, 128))
    after = fake_quantization_to_integer(func)
    assert _ops(after) == ["qnn.requantize"]
    data = RNG.integers(-128, 128, (3, 5)).astype("int8")
    ratio = np.float32(0.1) / np.float32(0.25)
    want = np.clip(np.round((data.astype("float32") - 2) * ratio) + 128, 0, 255).astype("uint8")
    np.testing.assert_array_equal(_run(func, data), want)


# ------------------------------------------------------------------------------ kernels
@pytest.mark.parametrize("channels,bound,zero", [(3, 64, 126), (16, 128, 0), (16, 64, 7),
                                                 (20, 64, 3)])
def test_symmetric_weights_reach_the_integer_kernel(channels, bound, zero):
    """uint8 data (zero point `zero`, padded with it) against constant int8 weights: the
    convolution runs on the 8-bit operands in the integer kernel where the channels allow
    (3 channels pad to 4; 20 are neither a block nor less than one) and is exact."""
    from kiln.driver.stages import module_at_stage
    from kiln.target import Target
    x = RNG.integers(0, 256, (1, channels, 11, 11)).astype("uint8")
    w = RNG.integers(-bound, bound, (16, channels, 3, 3)).astype("int8")
    xv = var("x", x.shape, "uint8")
    func = Function([xv], call("qnn.conv2d", xv, const(w), _c(zero, "uint8"),
                               _c(np.zeros(16), "int8"), strides=(2, 2), padding=(1, 2, 1, 0)))
    ops = _ops(module_at_stage(func, "optimized")["main"])
    integer_kernel = "nn.contrib_conv2d_nchwc_int8" in ops
    assert integer_kernel == (channels != 20 and Target("llvm").has_feature("avx2")), ops
    ref = torch.nn.functional.conv2d(
        torch.nn.functional.pad(torch.from_numpy(x.astype("float64")) - zero, (2, 0, 1, 1)),
        torch.from_numpy(w.astype("float64")), stride=2).numpy()
    np.testing.assert_array_equal(_run(func, x), ref.astype("int64"))


@pytest.mark.parametrize("data_dtype,bound", [("uint8", 64), ("uint8", 128), ("int8", 128)])
def test_dense_with_symmetric_weights_reaches_the_integer_kernel(data_dtype, bound):
    from kiln.driver.stages import module_at_stage
    from kiln.target import Target
    info = np.iinfo(data_dtype)
    x = RNG.integers(info.min, info.max + 1, (6, 50)).astype(data_dtype)
    w = RNG.integers(-bound, bound, (20, 50)).astype("int8")
    xv = var("x", x.shape, data_dtype)
    func = Function([xv], call("qnn.dense", xv, const(w), _c(-5 if data_dtype == "int8" else 131,
                                                             data_dtype), _c(np.zeros(20), "int8")))
    ops = _ops(module_at_stage(func, "optimized")["main"])
    assert ("nn.contrib_dense_int8" in ops) == Target("llvm").has_feature("avx2"), ops
    zero = -5 if data_dtype == "int8" else 131
    np.testing.assert_array_equal(_run(func, x), _shifted(x, zero) @ w.astype("int64").T)


def test_batch_matmul_of_two_quantized_activations():
    a = RNG.integers(0, 256, (3, 5, 16)).astype("uint8")
    b = RNG.integers(0, 256, (3, 7, 16)).astype("uint8")
    av, bv = var("a", a.shape, "uint8"), var("b", b.shape, "uint8")
    y = call("qnn.batch_matmul", av, bv, _c(100, "uint8"), _c(3, "uint8"), transpose_b=True)
    want = np.einsum("bik,bjk->bij", _shifted(a, 100), _shifted(b, 3))
    np.testing.assert_array_equal(_run(Function([av, bv], y), a, b), want)


def test_a_matmul_by_a_per_column_weight_becomes_a_dense():
    """MatMul(x, W) with W (K, N) quantized per column (axis 1), as ONNX Runtime writes a
    Linear layer: a dense on the transposed constant, per-channel along the last axis."""
    x = var("x", (4, 24), "uint8")
    w = RNG.integers(-127, 128, (24, 10)).astype("int8")
    w_scale = (RNG.random(10) * 0.01 + 0.001).astype("float32")
    y = call("nn.matmul", _dq(x, 0.02, 128), _dq(const(w), w_scale, np.zeros(10, "int8"), axis=1))
    y = call("reshape", y, newshape=(1, 4, 10))
    func = Function([x], _q(y, 0.05, 120))
    after = fake_quantization_to_integer(func)
    dense = [e for e in post_order(after) if getattr(getattr(e, "op", None), "name", "")
             == "qnn.dense"]
    assert len(dense) == 1 and dense[0].args[1].data.shape == (10, 24)
    assert "nn.matmul" not in _ops(after)
    data = RNG.integers(0, 256, (4, 24)).astype("uint8")
    integer, fake = _run(func, data), _run(func, data, disabled=["FakeQuantizationToInteger"])
    diff = np.abs(integer.astype(int) - fake.astype(int))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.95


def test_relu6_after_a_per_channel_convolution_is_integer():
    """clip(0, 6) of per-channel sums: requantized into the output type, then clipped there."""
    x = var("x", (1, 8, 6, 6), "uint8")
    w = RNG.integers(-127, 128, (16, 8, 3, 3)).astype("int8")
    scales = (RNG.random(16) * 0.01 + 0.002).astype("float32")
    y = call("clip", call("nn.conv2d", _dq(x, 0.03, 0), _dq(const(w), scales, np.zeros(16, "int8")),
                          padding=(1, 1, 1, 1)), a_min=0.0, a_max=6.0)
    func = Function([x], _q(y, 6.0 / 255, 0))
    ops = _ops(fake_quantization_to_integer(func))
    assert "qnn.conv2d" in ops and "nn.conv2d" not in ops, ops
    data = RNG.integers(0, 256, (1, 8, 6, 6)).astype("uint8")
    integer, fake = _run(func, data), _run(func, data, disabled=["FakeQuantizationToInteger"])
    diff = np.abs(integer.astype(int) - fake.astype(int))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.95


def test_a_negative_per_channel_axis_and_a_transposed_constant_weight():
    """dequantize(axis=-1) of a (K, N) weight, transposed as the ONNX importer writes Gemm:
    the weight stays a constant (the dense reaches the integer kernel's direct form)."""
    x = var("x", (3, 12), "uint8")
    w = RNG.integers(-127, 128, (12, 5)).astype("int8")
    scales = (RNG.random(5) * 0.01 + 0.001).astype("float32")
    wt = call("transpose", _dq(const(w), scales, np.zeros(5, "int8"), axis=-1), axes=(1, 0))
    func = Function([x], _q(call("nn.dense", _dq(x, 0.05, 0), wt), 0.1, 100))
    after = fake_quantization_to_integer(func)
    dense = [e for e in post_order(after) if getattr(getattr(e, "op", None), "name", "")
             == "qnn.dense"]
    assert len(dense) == 1 and isinstance(dense[0].args[1], type(const(w)))
    data = RNG.integers(0, 256, (3, 12)).astype("uint8")
    integer, fake = _run(func, data), _run(func, data, disabled=["FakeQuantizationToInteger"])
    assert np.abs(integer.astype(int) - fake.astype(int)).max() <= 1


def test_a_bias_added_to_a_mean_has_zero_point_zero():
    """The mean's sum carries zero point zp·count; an int32 addend must not carry it too."""
    x = var("x", (2, 4, 4), "uint8")
    bias = RNG.integers(-50, 50, 4).astype("int32")
    y = call("add", call("mean", _dq(x, 0.1, 128), axis=2),
             _dq(const(bias), np.float32(0.1 / 4), np.int32(0)))
    func = Function([x], _q(y, 0.05, 128))
    data = RNG.integers(0, 256, (2, 4, 4)).astype("uint8")
    integer, fake = _run(func, data), _run(func, data, disabled=["FakeQuantizationToInteger"])
    assert "add" in _ops(fake_quantization_to_integer(func))
    assert np.abs(integer.astype(int) - fake.astype(int)).max() <= 1


def test_parallel_int8_denses_combine_with_int32_biases():
    from kiln.driver.stages import module_at_stage
    x = var("x", (4, 16), "uint8")
    outs, refs = [], []
    data = RNG.integers(0, 256, (4, 16)).astype("uint8")
    for k in range(3):
        w = RNG.integers(-64, 64, (8, 16)).astype("int8")
        b = RNG.integers(-10 ** 6, 10 ** 6, 8).astype("int32")
        outs.append(call("add", call("nn.dense", x, const(w), out_dtype="int32"), const(b)))
        refs.append(data.astype("int64") @ w.astype("int64").T + b)
    from kiln.graph import Tuple
    func = Function([x], Tuple(outs))
    module_at_stage(func, "optimized")                       # combining must type-check
    with PassContext(opt_level=3):
        ex = GraphExecutor(kiln.compile(IRModule.from_expr(func)))
    ex.run(x=data)
    for k, ref in enumerate(refs):
        np.testing.assert_array_equal(ex.get_output(k).numpy(), ref)


# ------------------------------------------------------------------ PT2E's forms of the region
def _pt2e_block(residual_scale, rng):
    """quantize(relu(conv(dq(x), dq(w)) + float bias + dq(r))): PT2E keeps the bias in float
    and adds a quantized residual to the convolution's sums."""
    x, r = var("x", (1, 8, 10, 10), "uint8"), var("r", (1, 16, 10, 10), "uint8")
    w = rng.integers(-127, 128, (16, 8, 3, 3)).astype("int8")
    w_scale = (rng.random(16) * 0.01 + 0.002).astype("float32")
    zero_w = call("cast", _c(np.zeros(16), "int64"), dtype="int32")     # an int64 buffer's
    conv = call("nn.conv2d", _dq(x, 0.03, 120),
                call("qnn.dequantize", const(w), const(w_scale), zero_w, axis=0),
                padding=(1, 1, 1, 1))
    y = call("nn.bias_add", conv, _c(rng.standard_normal(16), "float32"), axis=1)
    y = call("nn.relu", call("add", y, _dq(r, residual_scale, 7)))
    return Function([x, r], _q(y, 0.08, 0))


def test_pt2e_float_bias_and_residual_join_the_integer_sums():
    rng = np.random.default_rng(25)
    func = _pt2e_block(0.05, rng)
    ops = _ops(fake_quantization_to_integer(func))
    assert "qnn.conv2d" in ops and "nn.conv2d" not in ops and "qnn.dequantize" not in ops, ops
    data = rng.integers(0, 256, (1, 8, 10, 10)).astype("uint8")
    residual = rng.integers(0, 256, (1, 16, 10, 10)).astype("uint8")
    integer = _run(func, data, residual)
    fake = _run(func, data, residual, disabled=["FakeQuantizationToInteger"])
    diff = np.abs(integer.astype(int) - fake.astype(int))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.99, (diff.max(), (diff == 0).mean())


def test_a_residual_coarser_than_the_sums_is_not_rounded_into_them():
    """An int32 value whose scale is coarser than the other operand's would round it: that
    add stays in float."""
    a, b = var("a", (1, 4, 6, 6), "int32"), var("b", (1, 4, 6, 6), "uint8")
    y = call("add", _dq(a, 0.5, 0), _dq(b, 0.01, 3))
    ops = _ops(fake_quantization_to_integer(Function([a, b], _q(y, 0.02, 0))))
    assert "qnn.dequantize" in ops and "add" in ops, ops


def test_a_quantized_float_constant_is_left_to_constant_folding():
    func = Function([], _q(_c(np.linspace(-1, 1, 4), "float32"), 0.1, 128))
    assert _ops(fake_quantization_to_integer(func)) == ["qnn.quantize"]

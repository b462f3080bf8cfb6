"""Bit-serial conv2d and dense (kiln/topi/nn/bitserial.py) under their x86 schedules, exact
against int64 references on the unpacked values: ResNet-18 layer shapes of the TVM paper
(spatial sizes reduced where noted), 1- and 2-bit operands, unipolar and bipolar weights,
channel counts that leave a partial word, random small shapes; the packers; the graph ops
compiled through kiln.compile; and the errors bad inputs get."""
import re
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import te
from kiln.graph import Function, GraphTypeError, IRModule, call, const, var
from kiln.runtime import GraphExecutor
from kiln.target import Target
from kiln.topi.nn import bitserial as bs
from kiln.topi.utils import TopiError
from kiln.topi.x86.bitserial import (schedule_bitpack, schedule_bitserial_conv2d_nhwc,
                                     schedule_bitserial_dense)


def _operands(rng, shape_x, shape_w, abits, wbits):
    x = rng.integers(0, 1 << abits, shape_x).astype("uint8")
    w = rng.integers(0, 1 << wbits, shape_w).astype("uint8")
    return x, w


def _conv(x, w, stride, pad, abits, wbits, pack_dtype="uint32", unipolar=True, epilogue=None,
          source=None):
    kp = bs.pack_conv_kernel_numpy(w, wbits, pack_dtype)
    X = te.placeholder(x.shape, "uint8", name="X")
    K = te.placeholder(kp.shape, pack_dtype, name="K")
    Y = bs.bitserial_conv2d_nhwc(X, K, stride, pad, abits, wbits, pack_dtype=pack_dtype,
                                 unipolar=unipolar)
    out = epilogue(Y) if epilogue else Y
    f = kiln.build(schedule_bitserial_conv2d_nhwc([out]), [X, K, out], target="llvm")
    y = np.zeros(tuple(int(d) for d in out.shape), out.dtype)
    f(x, kp, y)
    if source is not None:
        source.append(f)
    return y


def _dense(x, w, abits, wbits, pack_dtype="uint32", unipolar=True):
    wp = bs.pack_dense_weight_numpy(w, wbits, pack_dtype)
    X = te.placeholder(x.shape, "uint8", name="X")
    W = te.placeholder(wp.shape, pack_dtype, name="W")
    Y = bs.bitserial_dense(X, W, abits, wbits, pack_dtype=pack_dtype, unipolar=unipolar)
    f = kiln.build(schedule_bitserial_dense([Y]), [X, W, Y], target="llvm")
    y = np.zeros(tuple(int(d) for d in Y.shape), "int32")
    f(x, wp, y)
    return y


# name: (H, C_in, C_out, kernel, stride, activation bits, weight bits); the paper's H is in
# the comment where the test uses a smaller one (the reference is a direct int64 conv).
RESNET_LAYERS = {
    "C2": (14, 64, 64, 3, 1, 1, 1),       # 56x56
    "C3": (14, 64, 64, 1, 1, 2, 1),       # 56x56
    "C4": (16, 64, 128, 3, 2, 2, 1),      # 56x56
    "C5": (16, 64, 128, 1, 2, 1, 1),      # 56x56
    "C6": (14, 128, 128, 3, 1, 2, 2),     # 28x28
    "C7": (14, 128, 256, 3, 2, 1, 1),     # 28x28
    "C9": (7, 256, 256, 3, 1, 2, 1),      # 14x14
    "C12": (7, 512, 512, 3, 1, 1, 1),     # full size
}


@pytest.mark.parametrize("layer", sorted(RESNET_LAYERS))
def test_resnet_layers_are_exact(layer):
    h, c, co, k, stride, abits, wbits = RESNET_LAYERS[layer]
    rng = np.random.default_rng(sum(map(ord, layer)))
    x, w = _operands(rng, (1, h, h, c), (k, k, c, co), abits, wbits)
    pad = k // 2
    got = _conv(x, w, stride, pad, abits, wbits)
    np.testing.assert_array_equal(got, bs.bitserial_conv2d_nhwc_numpy(x, w, stride, pad, abits,
                                                                      wbits))


@pytest.mark.parametrize("c,pack_dtype", [(40, "uint32"), (5, "uint8"), (70, "uint64"),
                                          (17, "uint16")])
@pytest.mark.parametrize("unipolar", [True, False])
def test_partial_words_and_bipolar_weights(c, pack_dtype, unipolar):
    """Channels past C are zero bits in both operands, so neither AND sees them (for bipolar
    weights ~w is 1 there, and the data's zeros keep them out)."""
    rng = np.random.default_rng(c)
    x, w = _operands(rng, (2, 6, 7, c), (3, 3, c, 12), 2, 1)
    got = _conv(x, w, 1, 1, 2, 1, pack_dtype, unipolar)
    np.testing.assert_array_equal(got, bs.bitserial_conv2d_nhwc_numpy(x, w, 1, 1, 2, 1,
                                                                      unipolar))


def test_bipolar_one_bit_weights_are_plus_minus_one():
    """All-ones data against all-zero (= -1) bipolar weights: -C per tap."""
    x = np.ones((1, 3, 3, 33), "uint8")
    w = np.zeros((1, 1, 33, 8), "uint8")
    got = _conv(x, w, 1, 0, 1, 1, unipolar=False)
    assert (got == -33).all()


def test_fused_epilogue(bias_relu):
    rng = np.random.default_rng(3)
    x, w = _operands(rng, (1, 8, 8, 64), (3, 3, 64, 16), 2, 1)
    bias = (np.arange(16) * 7 - 60).astype("int32")
    B = te.placeholder((16,), "int32", name="B")

    kp = bs.pack_conv_kernel_numpy(w, 1)
    X = te.placeholder(x.shape, "uint8", name="X")
    K = te.placeholder(kp.shape, "uint32", name="K")
    out = bias_relu(bs.bitserial_conv2d_nhwc(X, K, 1, 1, 2, 1), B, 3)
    f = kiln.build(schedule_bitserial_conv2d_nhwc([out]), [X, K, B, out], target="llvm")
    y = np.zeros((1, 8, 8, 16), "int32")
    f(x, kp, bias, y)
    ref = np.maximum(bs.bitserial_conv2d_nhwc_numpy(x, w, 1, 1, 2, 1) + bias, 0)
    np.testing.assert_array_equal(y, ref)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(n=st.integers(1, 2), size=st.integers(3, 10), c=st.integers(1, 80),
       co=st.integers(1, 20), k=st.sampled_from([1, 2, 3]), stride=st.integers(1, 2),
       pad=st.integers(0, 2), abits=st.integers(1, 3), wbits=st.integers(1, 2),
       pack_dtype=st.sampled_from(bs.PACK_DTYPES), unipolar=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_random_convolutions_are_exact(n, size, c, co, k, stride, pad, abits, wbits,
                                       pack_dtype, unipolar, seed):
    if size + 2 * pad < k:
        return
    rng = np.random.default_rng(seed)
    x, w = _operands(rng, (n, size, size + 1, c), (k, k, c, co), abits, wbits)
    got = _conv(x, w, stride, pad, abits, wbits, pack_dtype, unipolar)
    np.testing.assert_array_equal(got, bs.bitserial_conv2d_nhwc_numpy(
        x, w, stride, pad, abits, wbits, unipolar))


def test_high_bits_of_the_data_are_ignored():
    """Only the low activation_bits bits of each uint8 are planes; the reference masks the
    same way, so the test pins down that the packed stage does."""
    rng = np.random.default_rng(9)
    x = rng.integers(0, 256, (1, 5, 5, 32)).astype("uint8")
    w = rng.integers(0, 2, (3, 3, 32, 8)).astype("uint8")
    got = _conv(x, w, 1, 1, 2, 1)
    np.testing.assert_array_equal(got, bs.bitserial_conv2d_nhwc_numpy(x & 3, w, 1, 1, 2, 1))


@pytest.mark.parametrize("m,k,n,abits,wbits,pack_dtype,unipolar", [
    (1, 512, 1000, 1, 1, "uint32", True),      # a classifier row
    (16, 256, 64, 2, 1, "uint32", True),
    (5, 70, 13, 2, 2, "uint64", True),
    (7, 33, 9, 1, 1, "uint8", False),
    (4, 100, 24, 3, 1, "uint16", False),
])
def test_dense_is_exact(m, k, n, abits, wbits, pack_dtype, unipolar):
    rng = np.random.default_rng(m * k + n)
    x, w = _operands(rng, (m, k), (n, k), abits, wbits)
    got = _dense(x, w, abits, wbits, pack_dtype, unipolar)
    np.testing.assert_array_equal(got, bs.bitserial_dense_numpy(x, w, abits, wbits, unipolar))


@pytest.mark.parametrize("shape,bits,pack_axis,bit_axis,pack_dtype", [
    ((2, 5, 5, 40), 2, 3, 3, "uint32"),
    ((3, 3, 70, 6), 1, 2, 2, "uint64"),
    ((9, 12), 3, 1, 0, "uint8"),
    ((33, 4), 2, 0, 2, "uint16"),
])
def test_bitpack_matches_the_numpy_packer(shape, bits, pack_axis, bit_axis, pack_dtype):
    rng = np.random.default_rng(len(shape) + bits)
    a = rng.integers(0, 256, shape).astype("uint8")
    A = te.placeholder(shape, "uint8", name="A")
    P = bs.bitpack(A, bits, pack_axis, bit_axis, pack_dtype)
    f = kiln.build(schedule_bitpack([P]), [A, P], target="llvm")
    got = np.zeros(tuple(int(d) for d in P.shape), pack_dtype)
    f(a, got)
    np.testing.assert_array_equal(got, bs.bitpack_numpy(a, bits, pack_axis, bit_axis, pack_dtype))


def test_numpy_packer_bit_order():
    """Bit k of word j is element j*wb + k of the plane; past the end the bits are zero."""
    a = np.zeros((10,), "uint8")
    a[[0, 3, 9]] = 1
    a[9] = 3
    p = bs.bitpack_numpy(a, 2, 0, 0, "uint8")
    assert p.shape == (2, 2)
    assert p[0].tolist() == [0b1001, 0b10]
    assert p[1].tolist() == [0, 0b10]


def test_schedule_packs_once_and_vectorizes():
    """The data is packed by a root stage before the convolution's parallel loop (not once per
    output tile), and the plane sums are vector code whose popcounts LLVM sees as ctpop."""
    rng = np.random.default_rng(4)
    x, w = _operands(rng, (1, 14, 14, 64), (3, 3, 64, 64), 2, 1)
    kp = bs.pack_conv_kernel_numpy(w, 1)
    X = te.placeholder(x.shape, "uint8", name="X")
    K = te.placeholder(kp.shape, "uint32", name="K")
    Y = bs.bitserial_conv2d_nhwc(X, K, 1, 1, 2, 1)
    s = schedule_bitserial_conv2d_nhwc([Y])
    text = str(kiln.lower(s, [X, K, Y]))
    lines = text.splitlines()
    stores = [i for i, line in enumerate(lines) if line.lstrip().startswith("data_bitpack[")]
    first_sum = next(i for i, line in enumerate(lines) if "conv_plane_sums" in line)
    assert stores and max(stores) < first_sum, "the data is packed inside the conv's tiles"
    assert "conv_plane_sums[ramp(" in text, "the plane sums are not vectorized"
    if Target("llvm").has_feature("avx2"):
        f = kiln.build(s, [X, K, Y], target="llvm")
        # 8 lanes of 32 bits with AVX2, 16 with AVX-512
        assert re.search(r"llvm\.ctpop\.v(8|16)i32", f.get_source("ll"))


# ------------------------------------------------------------------------------ graph
def _run_graph(func, x):
    lib = kiln.compile(IRModule.from_expr(func))
    m = GraphExecutor(lib)
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def test_graph_conv_with_packed_constant_and_fused_relu():
    rng = np.random.default_rng(11)
    x, w = _operands(rng, (1, 9, 9, 40), (3, 3, 40, 24), 2, 1)
    bias = (np.arange(24) - 30).astype("int32")
    X = var("x", x.shape, "uint8")
    kernel = call("nn.bitpack", const(w), bits=1, pack_axis=2, bit_axis=2)
    y = call("nn.bitserial_conv2d", X, kernel, strides=(2, 2), padding=(1, 1),
             activation_bits=2, weight_bits=1)
    assert y.checked_type.shape == (1, 5, 5, 24) and y.checked_type.dtype == "int32"
    got = _run_graph(Function([X], call("nn.relu", call("add", y, const(bias)))), x)
    ref = np.maximum(bs.bitserial_conv2d_nhwc_numpy(x, w, 2, 1, 2, 1) + bias, 0)
    np.testing.assert_array_equal(got, ref)


def test_graph_dense_bipolar():
    rng = np.random.default_rng(12)
    x, w = _operands(rng, (5, 70), (12, 70), 1, 1)
    X = var("x", x.shape, "uint8")
    y = call("nn.bitserial_dense", X, const(bs.pack_dense_weight_numpy(w, 1, "uint16")),
             pack_dtype="uint16", unipolar=False)
    assert y.checked_type.shape == (5, 12)
    np.testing.assert_array_equal(_run_graph(Function([X], y), x),
                                  bs.bitserial_dense_numpy(x, w, 1, 1, unipolar=False))


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("bits", [0, 9, 1.5, True])
def test_bad_bits_are_named(bits):
    X = te.placeholder((1, 4, 4, 32), "uint8", name="X")
    K = te.placeholder((3, 3, 1, 1, 8), "uint32", name="K")
    with pytest.raises(TopiError, match="weight_bits must be an int in 1..8"):
        bs.bitserial_conv2d_nhwc(X, K, 1, 1, 1, bits)
    with pytest.raises(TopiError, match="activation_bits must be an int in 1..8"):
        bs.bitserial_dense(te.placeholder((2, 32), "uint8"),
                           te.placeholder((1, 1, 4), "uint32"), bits, 1)
    xv = var("x", (1, 4, 4, 32), "uint8")
    kv = var("k", (3, 3, 1, 1, 8), "uint32")
    with pytest.raises(GraphTypeError, match="weight_bits must be an int in 1..8"):
        call("nn.bitserial_conv2d", xv, kv, weight_bits=bits).checked_type


def test_mismatched_channels_are_named():
    X = te.placeholder((1, 4, 4, 65), "uint8", name="X")      # 3 words of 32 bits
    K = te.placeholder((3, 3, 1, 2, 8), "uint32", name="K")
    with pytest.raises(TopiError, match="data has 65 channels .* 2 words"):
        bs.bitserial_conv2d_nhwc(X, K, 1, 1)
    with pytest.raises(GraphTypeError, match="channel counts do not match"):
        call("nn.bitserial_conv2d", var("x", (1, 4, 4, 65), "uint8"),
             var("k", (3, 3, 1, 2, 8), "uint32")).checked_type
    with pytest.raises(GraphTypeError, match="data has 100 inputs"):
        call("nn.bitserial_dense", var("x", (2, 100), "uint8"),
             var("w", (1, 3, 8), "uint32")).checked_type


def test_other_bad_inputs_are_named():
    X = te.placeholder((1, 4, 4, 32), "int8", name="X")
    K = te.placeholder((3, 3, 1, 1, 8), "uint32", name="K")
    with pytest.raises(TopiError, match="data must be unsigned"):
        bs.bitserial_conv2d_nhwc(X, K, 1, 1)
    X = te.placeholder((1, 4, 4, 32), "uint8", name="X")
    with pytest.raises(TopiError, match="2 bit planes, weight_bits is 1"):
        bs.bitserial_conv2d_nhwc(X, te.placeholder((3, 3, 2, 1, 8), "uint32"), 1, 1)
    with pytest.raises(TopiError, match="pack_dtype must be one of"):
        bs.bitserial_conv2d_nhwc(X, K, 1, 1, pack_dtype="int32")
    with pytest.raises(TopiError, match="must be of pack_dtype uint64"):
        bs.bitserial_conv2d_nhwc(X, K, 1, 1, pack_dtype="uint64")
    with pytest.raises(GraphTypeError, match="packed in pack_dtype uint32, got uint8"):
        call("nn.bitserial_dense", var("x", (2, 32), "uint8"),
             var("w", (1, 4, 8), "uint8")).checked_type
    with pytest.raises(GraphTypeError, match="bit_axis must be in 0..2"):
        call("nn.bitpack", var("w", (4, 32), "uint8"), bits=1, pack_axis=1,
             bit_axis=3).checked_type

"""Bit-serial (1-8 bit) operators (kiln/topi/nn/bitserial.py; TVM paper §6.2):

    nn.bitpack(x; bits, pack_axis, bit_axis, pack_dtype)      unsigned x → bit planes packed
        into words of pack_dtype along pack_axis, a new axis of `bits` planes at bit_axis
    nn.bitserial_conv2d(x, k; strides, padding, activation_bits, weight_bits, pack_dtype,
        out_dtype, unipolar)                                  x NHWC unsigned, k packed
        [KH, KW, B, ceil(C / wb), CO] → [N, OH, OW, CO]
    nn.bitserial_dense(x, w; activation_bits, weight_bits, pack_dtype, out_dtype, unipolar)
                                                              x (M, K) unsigned, w packed
        [B, ceil(K / wb), N] → (M, N)

A constant weight packed with nn.bitpack in the graph is folded once by FoldConstant (or packed
in numpy: kiln.topi.nn.bitserial.pack_conv_kernel_numpy / pack_dense_weight_numpy).

Example:
    >>> k = call("nn.bitpack", w_hwio, bits=1, pack_axis=2, bit_axis=2)     # doctest: +SKIP
    >>> y = call("nn.bitserial_conv2d", x, k, padding=(1, 1), activation_bits=2)  # doctest: +SKIP
"""
from __future__ import annotations

from ...tir import dtype as dt
from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType
from .define import cpu, topi_compute
from .nn import conv_out
from .relations import is_known, one_of, padding4, pair, tensor

PACK_DTYPES = ("uint8", "uint16", "uint32", "uint64")
OUT_DTYPES = ("int16", "int32", "int64")


def _bits(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 8:
        raise GraphTypeError(f"{what} must be an int in 1..8, got {value!r}")
    return value


def _words(length, pack_dtype: str):
    return -(-length // dt.bits_of(pack_dtype)) if is_known(length) else length


def _unsigned(t: TensorType, what: str) -> TensorType:
    if not dt.is_uint(t.dtype):
        raise GraphTypeError(f"{what} must be unsigned (uint8 holding the low bits), got "
                             f"{t.dtype}")
    return t


def _packed(t: TensorType, what: str, pack_dtype: str, bits: int, bit_axis: int) -> TensorType:
    if t.dtype != pack_dtype:
        raise GraphTypeError(f"{what} must be packed in pack_dtype {pack_dtype}, got {t.dtype}")
    planes = t.shape[bit_axis]
    if is_known(planes) and planes != bits:
        raise GraphTypeError(f"{what} {t.shape} has {planes} bit planes (axis {bit_axis}), "
                             f"weight_bits is {bits}")
    return t


def _check_words(length, words, what: str, pack_dtype: str):
    if is_known(length) and is_known(words) and _words(length, pack_dtype) != words:
        raise GraphTypeError(f"data has {length} {what} ({_words(length, pack_dtype)} words of "
                             f"{pack_dtype}), the packed weight has {words} words: the channel "
                             f"counts do not match")


def _common(attrs):
    abits = _bits(attrs.activation_bits, "activation_bits")
    wbits = _bits(attrs.weight_bits, "weight_bits")
    pack_dtype = one_of(attrs.pack_dtype, PACK_DTYPES, "pack_dtype")
    out_dtype = one_of(attrs.out_dtype, OUT_DTYPES, "out_dtype")
    if not isinstance(attrs.unipolar, bool):
        raise GraphTypeError(f"unipolar must be a bool, got {attrs.unipolar!r}")
    return abits, wbits, pack_dtype, out_dtype


_COMMON_ATTRS = {"activation_bits": 1, "weight_bits": 1, "pack_dtype": "uint32",
                 "out_dtype": "int32", "unipolar": True}


def _common_kwargs(a) -> dict:
    return {"activation_bits": a.activation_bits, "weight_bits": a.weight_bits,
            "pack_dtype": a.pack_dtype, "out_dtype": a.out_dtype, "unipolar": a.unipolar}


# ------------------------------------------------------------------------------ bitpack
def _bitpack_rel(types, attrs):
    data = _unsigned(tensor(types[0], "data"), "data")
    bits = _bits(attrs.bits, "bits")
    pack_dtype = one_of(attrs.pack_dtype, PACK_DTYPES, "pack_dtype")
    rank = data.ndim
    pack_axis, bit_axis = attrs.pack_axis, attrs.bit_axis
    if not isinstance(pack_axis, int) or not 0 <= pack_axis < rank:
        raise GraphTypeError(f"pack_axis must be an axis of the {rank}-d data, got {pack_axis!r}")
    if not isinstance(bit_axis, int) or not 0 <= bit_axis <= rank:
        raise GraphTypeError(f"bit_axis must be in 0..{rank} (an axis of the result), got "
                             f"{bit_axis!r}")
    if not is_known(data.shape[pack_axis]):
        raise GraphTypeError(f"the packed axis {pack_axis} must have a known length")
    shape = list(data.shape)
    shape[pack_axis] = _words(shape[pack_axis], pack_dtype)
    shape.insert(bit_axis, bits)
    return TensorType(tuple(shape), pack_dtype)


register_op("nn.bitpack", type_rel=_bitpack_rel, pattern=OpPattern.OPAQUE, num_inputs=1,
            attrs={"bits": REQUIRED, "pack_axis": REQUIRED, "bit_axis": REQUIRED,
                   "pack_dtype": "uint32"},
            compute=topi_compute("nn.bitserial:bitpack",
                                 lambda a, t: {"bits": a.bits, "pack_axis": a.pack_axis,
                                               "bit_axis": a.bit_axis,
                                               "pack_dtype": a.pack_dtype}),
            schedules=cpu("x86.bitserial:schedule_bitpack"),
            doc="bit planes of an unsigned tensor packed into words along pack_axis")


# ------------------------------------------------------------------------------ conv2d
def _conv_rel(types, attrs):
    data = _unsigned(tensor(types[0], "data"), "data")
    kernel = tensor(types[1], "packed kernel")
    if data.ndim != 4 or kernel.ndim != 5:
        raise GraphTypeError(f"bitserial_conv2d takes NHWC data and a packed kernel "
                             f"[KH, KW, B, Cw, CO], got ranks {data.ndim} and {kernel.ndim}")
    _, wbits, pack_dtype, out_dtype = _common(attrs)
    _packed(kernel, "the packed kernel", pack_dtype, wbits, 2)
    n, h, w, c = data.shape
    kh, kw, _, words, co = kernel.shape
    _check_words(c, words, "channels", pack_dtype)
    sh, sw = pair(attrs.strides, "strides", minimum=1)
    top, left, bottom, right = padding4(attrs.padding)
    oh, ow = conv_out(h, kh, sh, top, bottom, 1), conv_out(w, kw, sw, left, right, 1)
    if (is_known(oh) and oh < 1) or (is_known(ow) and ow < 1):
        raise GraphTypeError(f"the output would be empty: {oh}x{ow} for input {h}x{w}, "
                             f"kernel {kh}x{kw}")
    return TensorType((n, oh, ow, co), out_dtype)


register_op("nn.bitserial_conv2d", type_rel=_conv_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=2,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), **_COMMON_ATTRS},
            compute=topi_compute("nn.bitserial:bitserial_conv2d_nhwc",
                                 lambda a, t: {"strides": a.strides,
                                               "padding": padding4(a.padding),
                                               **_common_kwargs(a)}),
            schedules=cpu("x86.bitserial:schedule_bitserial_conv2d_nhwc"),
            doc="bit-serial 2-d convolution: NHWC unsigned data, kernel packed "
                "[KH, KW, B, Cw, CO]; padding (top, left, bottom, right) with zeros")


# ------------------------------------------------------------------------------ dense
def _dense_rel(types, attrs):
    data = _unsigned(tensor(types[0], "data"), "data")
    weight = tensor(types[1], "packed weight")
    if data.ndim != 2 or weight.ndim != 3:
        raise GraphTypeError(f"bitserial_dense takes data (M, K) and a packed weight "
                             f"[B, Kw, N], got ranks {data.ndim} and {weight.ndim}")
    _, wbits, pack_dtype, out_dtype = _common(attrs)
    _packed(weight, "the packed weight", pack_dtype, wbits, 0)
    m, k = data.shape
    _, words, units = weight.shape
    _check_words(k, words, "inputs", pack_dtype)
    return TensorType((m, units), out_dtype)


register_op("nn.bitserial_dense", type_rel=_dense_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=2, attrs=dict(_COMMON_ATTRS),
            compute=topi_compute("nn.bitserial:bitserial_dense",
                                 lambda a, t: _common_kwargs(a)),
            schedules=cpu("x86.bitserial:schedule_bitserial_dense"),
            doc="bit-serial dense: data (M, K) unsigned, weight packed [B, Kw, N]")

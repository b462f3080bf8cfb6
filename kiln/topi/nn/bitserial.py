"""Bit-serial (ultra-low-precision) convolution and dense (TVM paper §6.2): operands of 1 to 8
bits are split into bit planes, each plane packed along the reduction axis into machine words,
and a product of an `A`-bit activation and a `B`-bit weight summed as

    sum_{a < A, b < B} popcount(x_plane[a] & w_plane[b]) << (a + b)

so one AND and one popcount stand for a word's width of multiply-adds.

Layouts (C the input channels, `wb` the bits of `pack_dtype`, Cw = ceil(C / wb) words, bit k of
word w holding channel w*wb + k; channels past C are zero bits):

    conv2d:  data [N, H, W, C] unsigned, packed inside the op to [N, H', W', A, Cw]
             kernel [KH, KW, B, Cw, CO], packed once (pack_conv_kernel_numpy, or bitpack)
             out [N, OH, OW, CO]
    dense:   data [M, K] unsigned, packed inside the op to [M, A, Kw]
             weight [B, Kw, N], packed once (pack_dense_weight_numpy)
             out [M, N]

The output channels (units) are innermost in the packed weights, so a schedule loads one
vector of words for several output lanes and broadcasts the data's word.

Stages: the data's bit planes ("bitpack", the spatial padding inlined into it), the sums of
popcounts per plane pair [..., A, B, CO] ("bitserial_plane_sums"), and the op itself, which
shifts each pair's sum by a + b and adds them (tagged with the op's name, the fused group's
anchor). Shifting whole sums rather than single counts costs one shift per pair per output.

Unipolar operands are unsigned values 0 .. 2**bits - 1. A bipolar weight (`unipolar=False`)
reads each bit plane as ±1 (bit 1 = +1, bit 0 = -1), so its value is 2*w - (2**B - 1) for the
stored bits w (±1 for one bit); its products are popcount(x & w) - popcount(x & ~w). Zero bits
of the data (padding, channels past C) contribute nothing either way.

Example:
    >>> from kiln import te
    >>> x = te.placeholder((1, 8, 8, 64), "uint8", name="x")
    >>> w = te.placeholder((3, 3, 1, 2, 64), "uint32", name="w")
    >>> bitserial_conv2d_nhwc(x, w, 1, 1, activation_bits=2, weight_bits=1).shape
    (1, 8, 8, 64)
"""
from __future__ import annotations

import numpy as np

from ... import te
from ...tir import dtype as dt
from ...tir.op import call_intrin
from ..utils import TopiError, get_const_tuple
from .conv2d import _conv_attrs, conv_out_size, pad_spatial

BITPACK = "bitpack"
BITSERIAL_CONV2D = "bitserial_conv2d_nhwc"
BITSERIAL_DENSE = "bitserial_dense"
PLANE_SUMS = "bitserial_plane_sums"
PACK_DTYPES = ("uint8", "uint16", "uint32", "uint64")
OUT_DTYPES = ("int16", "int32", "int64")
MAX_BITS = 8


def check_bits(bits, what: str, op: str) -> int:
    """`bits` as an int in 1..8, else a TopiError naming `op` and `what`.

    Example:
        >>> check_bits(2, "activation_bits", "bitserial_dense")
        2
    """
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or \
            not 1 <= bits <= MAX_BITS:
        raise TopiError(f"{op}: {what} must be an int in 1..{MAX_BITS}, got {bits!r}")
    return int(bits)


def check_pack_dtype(pack_dtype: str, op: str) -> int:
    """The bits of a word of `pack_dtype` (uint8/16/32/64), else a TopiError naming `op`.

    Example:
        >>> check_pack_dtype("uint32", "bitpack")
        32
    """
    if pack_dtype not in PACK_DTYPES:
        raise TopiError(f"{op}: pack_dtype must be one of {', '.join(PACK_DTYPES)}, "
                        f"got {pack_dtype!r}")
    return dt.bits_of(pack_dtype)


def packed_words(length: int, pack_dtype: str) -> int:
    """Words of `pack_dtype` that hold `length` bits (the last one zero-padded).

    Example:
        >>> packed_words(64, "uint32"), packed_words(65, "uint32"), packed_words(3, "uint8")
        (2, 3, 1)
    """
    width = dt.bits_of(pack_dtype)
    return -(-int(length) // width)


def _check_unsigned(t, what: str, op: str):
    if not dt.is_uint(t.dtype):
        raise TopiError(f"{op}: {what} must be unsigned (uint8 holding the low bits), got "
                        f"{t.name} of dtype {t.dtype}")


def _shr(x, amount):
    return call_intrin(x.dtype, "shift_right", x, te.cast(amount, x.dtype))


def _shl(x, amount):
    return call_intrin(x.dtype, "shift_left", x, te.cast(amount, x.dtype))


def _and(a, b):
    return call_intrin(a.dtype, "bitwise_and", a, b)


def bitpack(data, bits, pack_axis: int, bit_axis: int, pack_dtype: str = "uint32",
            name: str = BITPACK):
    """Bit planes of an unsigned tensor packed into words: axis `pack_axis` of `data` (length
    C) becomes ceil(C / wb) words of `pack_dtype` (bit k of word w = bit of element w*wb + k,
    zero past C), and a new axis of `bits` planes is inserted at position `bit_axis` of the
    result. Only the low `bits` bits of each element are read.

    The bits of one word are disjoint, so their sum is their OR: the pack is a sum over the
    word's bits (tag "bitpack", a reduction the schedules put at the root).

    Example:
        >>> x = te.placeholder((2, 40), "uint8", name="x")
        >>> bitpack(x, 2, pack_axis=1, bit_axis=1, pack_dtype="uint32").shape
        (2, 2, 2)
    """
    op = "bitpack"
    bits = check_bits(bits, "bits", op)
    width = check_pack_dtype(pack_dtype, op)
    _check_unsigned(data, "data", op)
    shape = get_const_tuple(data.shape)
    rank = len(shape)
    if not 0 <= pack_axis < rank:
        raise TopiError(f"{op}: pack_axis {pack_axis} is out of range for a {rank}-D tensor")
    if not 0 <= bit_axis <= rank:
        raise TopiError(f"{op}: bit_axis {bit_axis} is out of range for a {rank + 1}-D result")
    length = shape[pack_axis]
    if not isinstance(length, int):
        raise TopiError(f"{op}: the packed axis must have a known length, got {length}")
    words = packed_words(length, pack_dtype)
    out_shape = list(shape)
    out_shape[pack_axis] = words
    out_shape.insert(bit_axis, bits)
    k = te.reduce_axis((0, width), name="k")
    one = te.const(1, pack_dtype)

    def fcompute(*idx):
        plane = idx[bit_axis]
        src = list(idx[:bit_axis] + idx[bit_axis + 1:])
        pos = src[pack_axis] * width + k
        src[pack_axis] = pos
        bit = _and(_shr(te.cast(data[tuple(src)], pack_dtype), plane), one)
        if length % width:
            # Past the end of the axis: the load is out of bounds, so it is guarded, not masked.
            bit = te.if_then_else(pos < length, bit, te.const(0, pack_dtype))
        return te.sum(_shl(bit, k), axis=k)

    attrs = {"bits": bits, "pack_axis": pack_axis, "bit_axis": bit_axis, "length": length}
    return te.compute(tuple(out_shape), fcompute, name=name, tag=BITPACK, attrs=attrs)


def bitpack_numpy(a: np.ndarray, bits: int, pack_axis: int, bit_axis: int,
                  pack_dtype: str = "uint32") -> np.ndarray:
    """numpy twin of `bitpack`, for constant weights packed once at compile time.

    Example:
        >>> bitpack_numpy(np.array([[1, 2, 3]], "uint8"), 2, 1, 1, "uint8").tolist()
        [[[5], [6]]]
    """
    op = "bitpack_numpy"
    bits = check_bits(bits, "bits", op)
    width = check_pack_dtype(pack_dtype, op)
    a = np.asarray(a)
    if a.dtype.kind != "u":
        raise TopiError(f"{op}: the array must be unsigned, got {a.dtype}")
    length = a.shape[pack_axis]
    words = packed_words(length, pack_dtype)
    moved = np.moveaxis(a, pack_axis, -1).astype(np.uint64)
    pad = [(0, 0)] * (moved.ndim - 1) + [(0, words * width - length)]
    moved = np.pad(moved, pad).reshape(moved.shape[:-1] + (words, width))
    weights = np.left_shift(np.uint64(1), np.arange(width, dtype=np.uint64))
    planes = [((moved >> np.uint64(b)) & np.uint64(1)) @ weights for b in range(bits)]
    packed = np.stack([np.moveaxis(p, -1, pack_axis) for p in planes], axis=bit_axis)
    return np.ascontiguousarray(packed.astype(pack_dtype))


def pack_conv_kernel_numpy(w_hwio: np.ndarray, weight_bits: int,
                           pack_dtype: str = "uint32") -> np.ndarray:
    """A conv kernel [KH, KW, CI, CO] of unsigned values (bit patterns for a bipolar kernel)
    → [KH, KW, B, ceil(CI / wb), CO], the layout of bitserial_conv2d_nhwc.

    Example:
        >>> pack_conv_kernel_numpy(np.zeros((3, 3, 64, 32), "uint8"), 1).shape
        (3, 3, 1, 2, 32)
    """
    if np.ndim(w_hwio) != 4:
        raise TopiError(f"pack_conv_kernel_numpy: the kernel must be 4-D [KH, KW, CI, CO], got "
                        f"shape {np.shape(w_hwio)}")
    return bitpack_numpy(w_hwio, weight_bits, pack_axis=2, bit_axis=2, pack_dtype=pack_dtype)


def pack_dense_weight_numpy(w_nk: np.ndarray, weight_bits: int,
                            pack_dtype: str = "uint32") -> np.ndarray:
    """A dense weight (N, K) of unsigned values → [B, ceil(K / wb), N], the layout of
    bitserial_dense.

    Example:
        >>> pack_dense_weight_numpy(np.zeros((10, 70), "uint8"), 2).shape
        (2, 3, 10)
    """
    if np.ndim(w_nk) != 2:
        raise TopiError(f"pack_dense_weight_numpy: the weight must be 2-D (N, K), got shape "
                        f"{np.shape(w_nk)}")
    return bitpack_numpy(np.asarray(w_nk).T, weight_bits, pack_axis=0, bit_axis=0,
                         pack_dtype=pack_dtype)


def popcount(word):
    """The number of set bits of an unsigned word (same dtype): LLVM's ctpop, one vpopcnt where
    the target has it (AVX-512 VPOPCNTDQ), a nibble-table shuffle on AVX2.

    Example:
        >>> print(popcount(te.const(7, "uint8")).dtype)
        uint8
    """
    return call_intrin(word.dtype, "popcount", word)


def _plane_product(x_word, w_word, out_dtype: str, unipolar: bool):
    """popcount(x & w), minus popcount(x & ~w) when bipolar, in out_dtype."""
    plus = te.cast(popcount(_and(x_word, w_word)), out_dtype)
    if unipolar:
        return plus
    inverse = call_intrin(w_word.dtype, "bitwise_not", w_word)
    return plus - te.cast(popcount(_and(x_word, inverse)), out_dtype)


def _combine_planes(sums, shape, name: str, tag: str, attrs: dict):
    """out[..., o] = sum over (a, b) of sums[..., a, b, o] << (a + b): each plane pair's sum
    shifted once. The shift is done unsigned (C leaves a left shift of a negative value
    undefined), and on whole sums, not on each count (see popcount)."""
    *_, abits, wbits, _ = get_const_tuple(sums.shape)
    out_dtype = sums.dtype
    unsigned = "u" + out_dtype
    ra = te.reduce_axis((0, abits), name="ra")
    rb = te.reduce_axis((0, wbits), name="rb")

    def fcompute(*idx):
        part = sums[idx[:-1] + (ra, rb, idx[-1])]
        return te.sum(te.cast(_shl(te.cast(part, unsigned), ra + rb), out_dtype), axis=[ra, rb])

    return te.compute(shape, fcompute, name=name, tag=tag, attrs=attrs)


def _check_out_dtype(out_dtype: str, op: str):
    if out_dtype not in OUT_DTYPES:
        raise TopiError(f"{op}: out_dtype must be one of {', '.join(OUT_DTYPES)}, got "
                        f"{out_dtype!r}")


def _check_operands(op, data, packed, what, bit_axis, reduced, activation_bits, weight_bits,
                    pack_dtype, out_dtype):
    """(activation bits, weight bits) after checking what bitserial_conv2d_nhwc and
    bitserial_dense share: the bit counts and dtypes, unsigned data, and a packed operand of
    pack_dtype with weight_bits planes (along bit_axis) and the words the data's last axis
    (its `reduced`) packs into."""
    abits = check_bits(activation_bits, "activation_bits", op)
    wbits = check_bits(weight_bits, "weight_bits", op)
    check_pack_dtype(pack_dtype, op)
    _check_out_dtype(out_dtype, op)
    _check_unsigned(data, "data", op)
    if packed.dtype != pack_dtype:
        raise TopiError(f"{op}: the {what} must be of pack_dtype {pack_dtype}, got "
                        f"{packed.dtype}")
    shape = get_const_tuple(packed.shape)
    if shape[bit_axis] != wbits:
        raise TopiError(f"{op}: the {what} has {shape[bit_axis]} bit planes, weight_bits is "
                        f"{wbits}")
    size, words = get_const_tuple(data.shape)[-1], shape[bit_axis + 1]
    if words != packed_words(size, pack_dtype):
        raise TopiError(f"{op}: data has {size} {reduced} ({packed_words(size, pack_dtype)} "
                        f"words of {pack_dtype}), the {what} {shape} has {words} words")
    return abits, wbits


def bitserial_conv2d_nhwc(data, kernel_packed, strides=1, padding=0, activation_bits=1,
                          weight_bits=1, pack_dtype: str = "uint32", out_dtype: str = "int32",
                          unipolar: bool = True):
    """Bit-serial 2-D convolution (module docstring): data [N, H, W, C] unsigned, kernel
    [KH, KW, B, Cw, CO] packed; out[n, y, x, co] = sum over (ry, rx, a, b, cw) of
    popcount(x[n, y*sh + ry, x*sw + rx, a, cw] & k[ry, rx, b, cw, co]) << (a + b). The
    spatial padding holds zeros; the padded data is packed by a stage of its own ("bitpack")
    and the popcounts summed per plane pair by another ("bitserial_plane_sums").

    Example:
        >>> x = te.placeholder((1, 14, 14, 48), "uint8", name="x")
        >>> k = te.placeholder((3, 3, 1, 2, 16), "uint32", name="k")
        >>> bitserial_conv2d_nhwc(x, k, 2, 1, 1, 1).shape
        (1, 7, 7, 16)
    """
    op = BITSERIAL_CONV2D
    if data.ndim != 4 or kernel_packed.ndim != 5:
        raise TopiError(f"{op}: data must be 4-D NHWC and the packed kernel 5-D "
                        f"[KH, KW, B, Cw, CO], got {tuple(data.shape)} and "
                        f"{tuple(kernel_packed.shape)}")
    abits, wbits = _check_operands(op, data, kernel_packed, "packed kernel", 2, "channels",
                                   activation_bits, weight_bits, pack_dtype, out_dtype)
    n, h, w, c = get_const_tuple(data.shape)
    kh, kw, _, kwords, co = get_const_tuple(kernel_packed.shape)
    (sh, sw), _, pads = _conv_attrs((kh, kw), strides, padding, 1, op)
    oh = conv_out_size(h, kh, sh, 1, pads[0], pads[2])
    ow = conv_out_size(w, kw, sw, 1, pads[1], pads[3])
    if oh < 1 or ow < 1:
        raise TopiError(f"{op}: the output would be empty ({oh}x{ow}) for input {h}x{w}, "
                        f"kernel {kh}x{kw}, padding {pads}")
    padded = pad_spatial(data, pads, "NHWC", value=0, name="bitserial_pad")
    packed = bitpack(padded, abits, pack_axis=3, bit_axis=3, pack_dtype=pack_dtype,
                     name="data_bitpack")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rc = te.reduce_axis((0, kwords), name="rc")

    def fsums(b, y, x, a, p, o):
        word = packed[b, y * sh + ry, x * sw + rx, a, rc]
        return te.sum(_plane_product(word, kernel_packed[ry, rx, p, rc, o], out_dtype, unipolar),
                      axis=[ry, rx, rc])

    sums = te.compute((n, oh, ow, abits, wbits, co), fsums, name="conv_plane_sums",
                      tag=PLANE_SUMS)
    attrs = {"strides": (sh, sw), "padding": pads, "activation_bits": abits,
             "weight_bits": wbits, "unipolar": bool(unipolar)}
    return _combine_planes(sums, (n, oh, ow, co), op, op, attrs)


def bitserial_dense(data, weight_packed, activation_bits=1, weight_bits=1,
                    pack_dtype: str = "uint32", out_dtype: str = "int32", unipolar: bool = True):
    """Bit-serial dense (module docstring): data (M, K) unsigned, weight [B, Kw, N] packed;
    out[m, n] = sum over (a, b, kw) of popcount(x[m, a, kw] & w[b, kw, n]) << (a + b), with
    the stages of bitserial_conv2d_nhwc.

    Example:
        >>> x = te.placeholder((4, 100), "uint8", name="x")
        >>> w = te.placeholder((1, 4, 24), "uint32", name="w")
        >>> bitserial_dense(x, w, 2, 1).shape
        (4, 24)
    """
    op = BITSERIAL_DENSE
    if data.ndim != 2 or weight_packed.ndim != 3:
        raise TopiError(f"{op}: data must be 2-D (M, K) and the packed weight 3-D [B, Kw, N], "
                        f"got {tuple(data.shape)} and {tuple(weight_packed.shape)}")
    abits, wbits = _check_operands(op, data, weight_packed, "packed weight", 0, "inputs",
                                   activation_bits, weight_bits, pack_dtype, out_dtype)
    m, k = get_const_tuple(data.shape)
    _, kwords, units = get_const_tuple(weight_packed.shape)
    packed = bitpack(data, abits, pack_axis=1, bit_axis=1, pack_dtype=pack_dtype,
                     name="data_bitpack")
    rc = te.reduce_axis((0, kwords), name="rc")

    def fsums(i, a, p, j):
        return te.sum(_plane_product(packed[i, a, rc], weight_packed[p, rc, j], out_dtype,
                                     unipolar), axis=rc)

    sums = te.compute((m, abits, wbits, units), fsums, name="dense_plane_sums", tag=PLANE_SUMS)
    attrs = {"activation_bits": abits, "weight_bits": wbits, "unipolar": bool(unipolar)}
    return _combine_planes(sums, (m, units), op, op, attrs)


def weight_values(w: np.ndarray, weight_bits: int, unipolar: bool = True) -> np.ndarray:
    """The integers that stored weight bits stand for (int64): w itself when unipolar, and
    2*w - (2**B - 1) when bipolar (each bit plane ±1).

    Example:
        >>> weight_values(np.array([0, 1], "uint8"), 1, unipolar=False).tolist()
        [-1, 1]
    """
    w = np.asarray(w).astype(np.int64) & ((1 << weight_bits) - 1)
    return w if unipolar else 2 * w - ((1 << weight_bits) - 1)


def bitserial_conv2d_nhwc_numpy(x: np.ndarray, w_hwio: np.ndarray, strides, padding,
                                activation_bits: int, weight_bits: int,
                                unipolar: bool = True) -> np.ndarray:
    """Reference of bitserial_conv2d_nhwc on unpacked values: a direct convolution in int64
    of x (its low `activation_bits` bits) and the kernel [KH, KW, CI, CO] (weight_values).

    Example:
        >>> x = np.ones((1, 3, 3, 2), "uint8"); w = np.ones((3, 3, 2, 1), "uint8")
        >>> int(bitserial_conv2d_nhwc_numpy(x, w, 1, 1, 1, 1)[0, 1, 1, 0])
        18
    """
    xv = np.asarray(x).astype(np.int64) & ((1 << activation_bits) - 1)
    wv = weight_values(w_hwio, weight_bits, unipolar)
    kh, kw = wv.shape[:2]
    (sh, sw), _, (top, left, bottom, right) = _conv_attrs((kh, kw), strides, padding, 1,
                                                          "bitserial_conv2d_nhwc_numpy")
    xp = np.pad(xv, ((0, 0), (top, bottom), (left, right), (0, 0)))
    oh = (xp.shape[1] - kh) // sh + 1
    ow = (xp.shape[2] - kw) // sw + 1
    out = np.zeros((xv.shape[0], oh, ow, wv.shape[3]), np.int64)
    for ry in range(kh):
        for rx in range(kw):
            window = xp[:, ry:ry + sh * (oh - 1) + 1:sh, rx:rx + sw * (ow - 1) + 1:sw, :]
            out += np.einsum("nyxc,co->nyxo", window, wv[ry, rx])
    return out


def bitserial_dense_numpy(x: np.ndarray, w_nk: np.ndarray, activation_bits: int,
                          weight_bits: int, unipolar: bool = True) -> np.ndarray:
    """Reference of bitserial_dense on unpacked values: x (M, K) @ weight_values(w (N, K)).T
    in int64.

    Example:
        >>> bitserial_dense_numpy(np.full((1, 4), 3, "uint8"), np.ones((2, 4), "uint8"), 2, 1)
        array([[12, 12]])
    """
    xv = np.asarray(x).astype(np.int64) & ((1 << activation_bits) - 1)
    return xv @ weight_values(w_nk, weight_bits, unipolar).T

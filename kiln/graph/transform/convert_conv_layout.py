"""ConvertConvLayout: NCHW convolutions with constant weights move to the blocked layout
NCHW{b}c (kiln/topi/nn/conv2d_nchwc.py), their weights packed here, once, at compile time.

    nn.conv2d(x, W)  (NCHW; groups 1, grouped or depthwise)
        → nn.contrib_conv2d_nchwc(layout_transform(x, "NCHW", "NCHW{ic}c"), pack(W))
        (grouped: the blocks ic, oc divide the channels of a group, so a vector of output
         channels is one group's; `_blocks`)
        (3x3 stride 1 where topi.x86.winograd measured it faster:
         nn.contrib_conv2d_winograd_nchwc(..., the Winograd-transformed W); pass config
         "ConvertConvLayout.winograd" turns it off)

A 1x1 unpadded convolution whose input is in NCHW and whose result feeds no other convolution
(a lone 1x1 conv, a 1x1 head, ShuffleNet's grouped 1x1 convs before a channel shuffle), or
whose channel blocks would be narrow (fewer than 8 lanes; in a grouped conv with long pixel
rows, fewer than a vector register's), is a matrix product instead, W (O, C) @ x[n] (C, H*W)
(per group g of G: W_g @ x[n, g]), in the "flat" layout (N G, C/G, H*W) (see `wants_gemm`,
`gemm_1x1`); pass config "ConvertConvLayout.gemm_1x1" turns it off. A depthwise
convolution with a small output converts only when its input is blocked already (see
`worth_blocking`). The blocked layout then flows through the ops that do not care about it,
so consecutive convolutions exchange blocked tensors and transforms appear only where a
consumer needs NCHW (flatten, the function's outputs...) or two blocks disagree:
  - one-input elementwise ops (relu, clip, sigmoid...): same layout out;
  - pooling (max/avg, global, adaptive): the op's `layout` attribute set to the block, so the
    pool runs blocked (a global pool then hands on a tiny tensor to transform back);
  - nn.bias_add(x, b, axis=1) with a constant b: add(x, b packed as [1, O/b, 1, 1, b]);
  - broadcast binary ops (add, multiply...) of two tensors of the same shape, one of them
    blocked (the other is blocked too), or of a blocked tensor and a constant scalar /
    per-channel constant ((C,1,1) or (1,C,1,1));
  - concatenate along channels, one input blocked, every input a whole number of blocks
    (the others are blocked too): it joins channel blocks.
Every other consumer gets an NCHW tensor (one layout_transform per blocked value, shared).
The flat layout flows the same way through elementwise ops, bias_add and broadcast binary ops
(the other operand reshaped, which costs nothing); its consumers that need NCHW get a reshape,
a view of the same bytes.

Example:
    >>> f = convert_conv_layout(func)   # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from ..expr import Call, Constant, Function, Tuple, TupleGetItem, Var
from ..op import Op, OpPattern, call as make_call
from ..ops import conv_layout, winograd  # noqa: F401  (register the ops this pass introduces)
from ..ops.relations import padding4
from ..ty import TensorType
from ..visitor import post_order, users
from .pass_infra import FunctionPass, PassContext, register_pass_config

register_pass_config("ConvertConvLayout.winograd", True, bool,
                     "run 3x3 stride-1 convolutions as Winograd where it measured faster "
                     "(False: the direct convolution everywhere)")
register_pass_config("ConvertConvLayout.gemm_1x1", True, bool,
                     "run unpadded 1x1 convolutions of NCHW inputs that feed no other "
                     "convolution as a matrix product (False: the blocked convolution)")


MIN_INPUT_BLOCK = 4    # a conv reads a blocked input this wide as it is (see conv)
# A lone 3x3 depthwise conv (NCHW in and out, 2 threads, AVX2), NCHW schedule vs blocked with
# both transforms: 112x112 c96 s2 1104 vs 242 us, 56x56 c144 850 vs 186, 28x28 c58 75 vs 37,
# 14x14 c116 49 vs 17, but 7x7 c232 6 vs 12.
DEPTHWISE_BLOCKED_PIXELS = 14 * 14
NARROW_LANES = 8       # an output channel block with fewer lanes is "narrow" (wants_gemm)
WIDE_ROW_VECTORS = 8   # pixels (in vectors) from which a grouped conv's block narrower than
                       # a vector is narrow too (see narrow)


def _known(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def _blocks(c: int, o: int, groups: int, dtype: str):
    """Channel blocks (in, out): one vector register of the current target's width, inside a
    group (a grouped convolution's blocks divide its channels per group; depthwise: one
    block for both)."""
    from ...topi.nn.conv2d_nchwc import channel_block
    from ...topi.x86.utils import vector_lanes
    lanes = vector_lanes(dtype)
    if groups == c and groups != 1:
        b = channel_block(c, lanes)
        return b, b
    return channel_block(c // groups, lanes), channel_block(o // groups, lanes)


def _constant_weight(call) -> bool:
    return isinstance(call.args[1], Constant)


def _convertible_conv(call) -> bool:
    """An NCHW convolution the blocked layout takes: one with a constant weight (packed now),
    or a floating-point one whose weight is computed or an input (packed by ops in the graph,
    at each run: a training step's weights, a graph compiled without its parameters bound)."""
    a = call.attrs
    if a.data_layout != "NCHW":
        return False
    data_ty, w_ty = call.args[0].checked_type, call.args[1].checked_type
    if not _constant_weight(call) and not (
            isinstance(w_ty, TensorType) and _known(w_ty.shape)
            and str(w_ty.dtype).startswith("float") and w_ty.dtype == data_ty.dtype
            and call.checked_type.dtype == w_ty.dtype):
        return False
    # The batch may be a symbolic size: the blocked kernels take it as an argument.
    if not isinstance(data_ty, TensorType) or not _known(data_ty.shape[1:]) or data_ty.ndim != 4:
        return False
    c = data_ty.shape[1]
    o, i = w_ty.shape[0], w_ty.shape[1]
    if a.groups == c and a.groups != 1:
        return i == 1 and o == c
    return True             # groups 1 or grouped (the type relation checked the channels)


def _winograd_tile(call) -> int:
    """Winograd's output tile (2 or 4) for a float conv (not depthwise) where topi's rule says
    it is faster than the direct blocked convolution on this target, else 0. (Integer convs
    never: the transforms' fractions would be rounded away.)"""
    ctx = PassContext.entered()
    floats = all(arg.checked_type.dtype.startswith(("float", "bfloat")) for arg in call.args[:2])
    if not floats or _depthwise(call) or not _constant_weight(call) or (ctx is not None and
                            not ctx.get_config("ConvertConvLayout.winograd", True)):
        return 0
    from ...topi.x86.winograd import winograd_tile
    a = call.attrs
    return winograd_tile(call.args[0].checked_type.shape, call.args[1].data.shape, a.strides,
                         padding4(a.padding), a.dilation, a.groups)


def _int8_layout(call):
    """(lanes, group, kernel dtype) when conv `call` is an 8-bit product the target has a dot
    product instruction for (kiln/topi/nn/conv2d_nchwc_int8.py), its channels whole vectors
    of lanes; else None."""
    data, weight = call.args[0].checked_type, call.args[1].checked_type
    if (call.attrs.groups != 1 or weight.dtype != "int8" or data.dtype not in ("uint8", "int8")
            or call.checked_type.dtype != "int32" or not _constant_weight(call)):
        return None
    from ...target import current_target
    from ...topi.x86.tensor_intrin import conv_int8_layout, eight_lane_layout, for_data
    target = current_target()
    layout = for_data(conv_int8_layout(target, call.args[1].data), data.dtype)
    if layout is None:
        return None
    channels = data.shape[1]

    def fits(lanes):
        return not (weight.shape[0] % lanes or (channels % lanes and channels > lanes))
    # AVX-512 VNNI with channels that are not whole 16-lane vectors: 8 lanes
    if layout[0] == 16 and (weight.shape[0] % 16 or channels % 16):
        layout = eight_lane_layout(target, data.dtype)
    return layout if fits(layout[0]) else None


def _absorbed_pad(c):
    """(data, padding, pad value) of conv c with a constant spatial nn.pad in front of it taken
    into the integer convolution's own padding (LegalizeQnn pads with the input's zero point,
    which the integer kernel's padded stage writes as it goes: no padded copy of the input)."""
    x, padding = c.args[0], padding4(c.attrs.padding)
    if not (isinstance(x, Call) and isinstance(x.op, Op) and x.op.name == "nn.pad"
            and x.attrs.pad_mode == "constant" and float(x.attrs.pad_value).is_integer()):
        return x, padding, 0
    (n0, n1), (c0, c1), (top, bottom), (left, right) = x.attrs.pad_width
    if any((n0, n1, c0, c1)) or (any(padding) and x.attrs.pad_value != 0):
        return x, padding, 0
    t, l, b, r = padding
    return x.args[0], (t + top, l + left, b + bottom, r + right), int(x.attrs.pad_value)


FLOAT32_EXACT = 2 ** 24      # integers up to this magnitude are exact in float32


def _exact_in_float32(call) -> bool:
    """Whether integer conv `call` (8-bit data, constant weights, no integer kernel for it:
    depthwise, grouped, odd channel counts) can run in the float kernels and be exact: every
    partial sum of its reduction is an integer below 2^24 (a 3x3 depthwise conv of uint8 data:
    9 · 255 · 128), so float32 FMAs compute it without rounding. Its data then converts to
    float32 inside the kernel, lane by lane."""
    data, weight = call.args[0].checked_type, call.args[1]
    if (call.checked_type.dtype != "int32" or data.dtype not in ("uint8", "int8")
            or not isinstance(weight, Constant) or weight.checked_type.dtype not in ("int8",
                                                                                   "uint8")):
        return False
    largest_input = 255 if data.dtype == "uint8" else 128
    per_output = np.abs(weight.data.astype("int64")).reshape(weight.data.shape[0], -1).sum(axis=1)
    return int(per_output.max(initial=0)) * largest_input < FLOAT32_EXACT


def _packed_weight(call, ic, oc):
    """The weight in conv2d_nchwc's packed layout: a constant packed now, else the same
    packing as graph ops (reshape, transpose) run with the model."""
    from ...topi.nn.conv2d_nchwc import pack_conv_kernel_numpy, pack_depthwise_kernel_numpy
    if not _constant_weight(call):
        o, i, kh, kw = call.args[1].checked_type.shape
        ic = 1 if _depthwise(call) else ic          # [O/oc, 1, KH, KW, 1, oc]: ic is 1
        blocks = make_call("reshape", call.args[1], newshape=(o // oc, oc, i // ic, ic, kh, kw))
        return make_call("transpose", blocks, axes=(0, 2, 4, 5, 3, 1))
    w = call.args[1].data
    if _depthwise(call):
        return Constant(pack_depthwise_kernel_numpy(w, oc))
    return Constant(pack_conv_kernel_numpy(w, ic, oc))


def _depthwise(call) -> bool:
    return call.attrs.groups != 1 and call.attrs.groups == call.args[0].checked_type.shape[1]


def _per_channel_constant(const: Constant, channels: int, shape: tuple, batch: int = 1):
    """A constant that broadcasts per channel against NCHW ((C,1,1), (1,C,1,1)) or a
    scalar, as the matching constant of another layout (per-channel `shape`: (1, C/b, 1, 1, b)
    blocked, (G, C/G, 1) flat, repeated `batch` times along the first axis); None if it is
    neither."""
    data = const.data
    if data.ndim == 0 or data.size == 1:
        return Constant(data.reshape(()))
    squeezed = data.reshape(-1) if data.size == channels else None
    if squeezed is None:
        return None
    ok = (data.ndim == 3 and data.shape == (channels, 1, 1)) or \
         (data.ndim == 4 and data.shape == (1, channels, 1, 1))
    if not ok:
        return None
    packed = squeezed.reshape(shape)
    return Constant(np.tile(packed, (batch,) + (1,) * (packed.ndim - 1)) if batch > 1
                    else packed)


def _flat_constant(const: Constant, channels: int, n: int, g: int):
    """_per_channel_constant for the flat layout (n G, C/G, H*W): (1, C, 1) with one group,
    else (G, C/G, 1) repeated for each of the n images."""
    return _per_channel_constant(const, channels, (g, channels // g, 1), n if g > 1 else 1)


def _blocked_channels(channels: int, block: int) -> tuple:
    return (1, channels // block, 1, 1, block)


def _unpadded_1x1(call) -> bool:
    a = call.attrs
    return (not _depthwise(call) and tuple(call.args[1].checked_type.shape[2:]) == (1, 1)
            and not any(padding4(a.padding)))


def _is_1x1_gemm(call) -> bool:
    """An unpadded 1x1 float32 convolution (any stride, not depthwise): W (O, C) @ x[n]
    (C, H*W) per group, after a strided slice when the stride is not 1."""
    return (_unpadded_1x1(call) and call.args[0].checked_type.dtype == "float32"
            and call.attrs.out_dtype in (None, "", "float32") and _constant_weight(call))


def _passes_layout(e) -> bool:
    """Ops the layouts flow through (see the module docstring)."""
    return isinstance(e, Call) and isinstance(e.op, Op) and (
        getattr(e.op, "name", None) == "nn.bias_add"
        or e.op.pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST))


def _feeding_convs(body, nodes) -> set:
    """The nodes whose value reaches a convertible convolution through ops the layouts flow
    through (`nodes`: body's nodes in post order, so every user is decided before its
    operands)."""
    uses = users(body)
    feeding: set = set()
    for e in reversed(nodes):
        for u in uses.get(e, ()):
            if (getattr(getattr(u, "op", None), "name", None) == "nn.conv2d"
                    and _convertible_conv(u)) or (_passes_layout(u) and u in feeding):
                feeding.add(e)
                break
    return feeding


_POOLS = frozenset({"nn.max_pool2d", "nn.avg_pool2d", "nn.global_max_pool2d",
                    "nn.global_avg_pool2d", "nn.adaptive_max_pool2d", "nn.adaptive_avg_pool2d"})


class _Converter:
    """The post-order walk: `new[e]` is e's replacement, `block[e]` its channel block
    (0: NCHW as in the original)."""

    def __init__(self, feeding_convs: set = frozenset()):
        self.new: dict = {}
        self.block: dict = {}
        self.flat: dict = {}            # value -> G: its `new` is flat, (N G, C/G, H*W)
        self.feeding_convs = feeding_convs
        self._to_nchw: dict = {}
        self._to_block: dict = {}

    def nchw(self, e):
        """The rewritten e in its original layout (one layout_transform per blocked value, a
        reshape of a flat one)."""
        b = self.block.get(e, 0)
        if not b and e not in self.flat:
            return self.new[e]
        if e not in self._to_nchw:
            self._to_nchw[e] = (
                make_call("reshape", self.new[e], newshape=tuple(e.checked_type.shape))
                if e in self.flat else
                make_call("layout_transform", self.new[e], src_layout=f"NCHW{b}c",
                          dst_layout="NCHW"))
        return self._to_nchw[e]

    def blocked(self, e, b):
        """The rewritten e in layout NCHW{b}c."""
        have = self.block.get(e, 0)
        if have == b:
            return self.new[e]
        if (e, b) not in self._to_block:
            src = f"NCHW{have}c" if have else "NCHW"
            self._to_block[e, b] = make_call("layout_transform",
                                             self.new[e] if have else self.nchw(e),
                                             src_layout=src, dst_layout=f"NCHW{b}c")
        return self._to_block[e, b]

    def conv(self, c):
        n, ch, h, w = c.args[0].checked_type.shape
        o = c.args[1].checked_type.shape[0]
        # integer sums vectorize as their int32 accumulators, not as the 8-bit operands
        ic, oc = _blocks(ch, o, c.attrs.groups, c.checked_type.dtype)
        have = self.block.get(c.args[0], 0)
        if have >= MIN_INPUT_BLOCK and have != ic and not _depthwise(c) \
                and (ch // c.attrs.groups) % have == 0:
            # Read the producer's narrower blocks (ResNeXt's 4-channel groups) as they are:
            # the input block is only the innermost reduction loop (a 1x1 128 -> 256 at 56x56:
            # 1127 us with blocks of 4, 1119 with 8, and the transform between them 105 us).
            ic = have
        a = c.attrs
        int8 = _int8_layout(c)
        if int8 is not None and (ch % int8[0] == 0 or not self.block.get(c.args[0], 0)):
            return self.conv_int8(c, *int8)
        exact_float = _exact_in_float32(c)
        out_dtype = "float32" if exact_float else a.out_dtype
        tile = _winograd_tile(c)
        if tile:
            from ...topi.nn.winograd import winograd_weight_transform_numpy
            op = "nn.contrib_conv2d_winograd_nchwc"
            weight = Constant(winograd_weight_transform_numpy(c.args[1].data, tile, ic, oc))
        else:
            op, weight = "nn.contrib_conv2d_nchwc", _packed_weight(c, ic, oc)
            if exact_float:
                weight = Constant(weight.data.astype("float32"))
        strides = a.strides
        if tuple(strides) != (1, 1) and _unpadded_1x1(c) and not self.block.get(c.args[0], 0):
            # Slicing first makes the transform move only the pixels the conv reads.
            data = make_call("layout_transform", self.strided_input(c), src_layout="NCHW",
                             dst_layout=f"NCHW{ic}c")
            strides = (1, 1)
        else:
            data = self.blocked(c.args[0], ic)
        out = make_call(op, data, weight, strides=strides, padding=a.padding,
                        dilation=a.dilation, groups=a.groups, out_dtype=out_dtype,
                        span=c.span)
        if exact_float:
            out = make_call("cast", out, dtype=c.checked_type.dtype)
        return out, oc

    def conv_int8(self, c, lanes: int, group: int, dtype: str):
        """The 8-bit convolution c as nn.contrib_conv2d_nchwc_int8 with `lanes` output
        channels per block; fewer input channels than lanes (an image's 3) are padded with
        zeros to a whole group, their weights too, so a 3-channel stem runs as 4 channels
        (NCHW4c) rather than on the generic path."""
        from ...topi.nn.conv2d_nchwc_int8 import pack_conv_kernel_int8_numpy
        ch = c.args[0].checked_type.shape[1]
        w = c.args[1].data
        source, padding, pad_value = _absorbed_pad(c)
        if ch % lanes == 0:
            ic, data = lanes, self.blocked(source, lanes)
        else:
            ic = -(-ch // group) * group
            data = self.nchw(source)
            if ic != ch:
                data = make_call("nn.pad", data, pad_width=((0, 0), (0, ic - ch), (0, 0), (0, 0)),
                                 pad_value=0.0)
                w = np.pad(w, ((0, 0), (0, ic - ch), (0, 0), (0, 0)))
            data = make_call("layout_transform", data, src_layout="NCHW",
                             dst_layout=f"NCHW{ic}c")
        a = c.attrs
        weight = Constant(pack_conv_kernel_int8_numpy(w, ic, lanes, group, dtype))
        out = make_call("nn.contrib_conv2d_nchwc_int8", data, weight, strides=a.strides,
                        padding=padding, dilation=a.dilation, out_dtype=c.checked_type.dtype,
                        pad_value=pad_value, span=c.span)
        return out, lanes

    def strided_input(self, c):
        """The NCHW input of an unpadded 1x1 conv c with its stride taken by a slice: the
        pixels the conv reads, which it then reads at stride 1."""
        _, _, h, w = c.args[0].checked_type.shape
        sh, sw = c.attrs.strides
        x = self.nchw(c.args[0])
        if (sh, sw) == (1, 1):
            return x
        return make_call("strided_slice", x, begin=(0, 0), end=(h, w), strides=(sh, sw),
                         axes=(2, 3))

    def gemm_1x1(self, c):
        """The 1x1 convolution c as nn.batch_matmul(W (1, O, C), x (N, C, H*W)), or with G
        groups (W (N G, O/G, C/G), x (N G, C/G, H*W)): its result in the flat layout, which
        epilogues (bias, relu...) fuse into like a dense's. A matrix product needs no layout
        transform around it, which a blocked convolution of an NCHW input pays on both sides
        (a lone 56x56 64->64 1x1: 56 us against 80 us), and its vectors run along the pixels,
        whole whatever the channels per group (a blocked grouped 1x1 with 20 outputs per
        group has 4-lane vectors)."""
        n, ch = c.args[0].checked_type.shape[:2]
        _, o, oh, ow = c.checked_type.shape
        g = c.attrs.groups
        x = make_call("reshape", self.strided_input(c), newshape=(n * g, ch // g, oh * ow))
        weight = c.args[1].data.reshape(g, o // g, ch // g)
        if g > 1 and n > 1:
            weight = np.tile(weight, (n, 1, 1))
        return make_call("nn.batch_matmul", Constant(weight), x, span=c.span)

    def wants_gemm(self, c) -> bool:
        """`gemm_1x1` for an unpadded 1x1 conv whose channel blocks would be narrow (`narrow`:
        58 or 116 channels, ShuffleNet-v2's, block by 2 or 4; the pixels are the better
        vector axis: a 28x28 58->58 1x1 took 34 us so against 163 us blocked), and for
        one with an unblocked input whose result feeds no other convolution (those want
        blocked tensors, and blocking the 1x1's output would cost more than blocking its input
        when it widens the channels) and whose output rows fill whole vectors (a 7x7 464->1024
        1x1 took 848 us as a product of 49-pixel rows, 372 us blocked)."""
        ctx = PassContext.entered()
        if ctx is not None and not ctx.get_config("ConvertConvLayout.gemm_1x1", True):
            return False
        if not _is_1x1_gemm(c):
            return False
        if self.narrow(c):
            return True
        from ...topi.x86.utils import vector_lanes
        _, _, oh, ow = c.checked_type.shape
        return (not self.block.get(c.args[0], 0) and c not in self.feeding_convs
                and (oh * ow) % vector_lanes("float32") == 0)

    @staticmethod
    def narrow(c) -> bool:
        """Whether conv c's output channel block would be narrow: fewer than NARROW_LANES
        lanes, or, in a grouped conv, fewer than the target's vector when the output has at
        least WIDE_ROW_VECTORS vectors of pixels (AVX-512's 8-lane blocks: grouped 1x1 convs
        with 24 outputs per group ran at 0.46x ONNX Runtime's speed blocked and 1.06x as
        products of pixel rows at 14x14, at 1.48x vs 1.39x at 28x28, but 0.59x vs 0.87x at
        7x7, whose 49 pixels fill vectors no better; ungrouped ones were not measured)."""
        from ...topi.x86.utils import vector_lanes
        lanes = vector_lanes(c.args[0].checked_type.dtype)
        _, oc = _blocks(c.args[0].checked_type.shape[1], c.checked_type.shape[1],
                        c.attrs.groups, c.args[0].checked_type.dtype)
        _, _, oh, ow = c.checked_type.shape
        wide_rows = c.attrs.groups > 1 and oh * ow >= WIDE_ROW_VECTORS * lanes
        return oc < min(lanes, NARROW_LANES) or (oc < lanes and wide_rows)

    def flat_free(self, c):
        """(new call, groups of its flat layout) when c can run on its flat input(s) (and no
        blocked one) as is, else None."""
        flats = [a in self.flat for a in c.args]
        if not any(flats) or any(self.block.get(a, 0) for a in c.args) \
                or not isinstance(c.checked_type, TensorType) or c.checked_type.ndim != 4:
            return None
        groups = {self.flat[a] for a in c.args if a in self.flat}
        if len(groups) != 1:
            return None
        (g,) = groups
        op, name = c.op, getattr(c.op, "name", "")
        n, channels, h, w = c.checked_type.shape
        shape = (n * g, channels // g, h * w)
        if len(c.args) == 1 and op.pattern == OpPattern.ELEMWISE:
            return Call(op, [self.new[c.args[0]]], c.attrs, c.span), g
        if name == "nn.bias_add":
            if c.attrs.axis % 4 != 1 or not flats[0]:
                return None
            if g == 1:
                return Call(op, [self.new[c.args[0]], self.nchw(c.args[1])],
                            c.attrs.with_(axis=1), c.span), g
            if not isinstance(c.args[1], Constant):
                return None
            bias = _flat_constant(Constant(c.args[1].data.reshape(channels, 1, 1)), channels,
                                  n, g)
            return make_call("add", self.new[c.args[0]], bias, span=c.span), g
        if len(c.args) != 2 or op.pattern != OpPattern.BROADCAST:
            return None
        args = []
        for a, flat in zip(c.args, flats):
            if flat:
                if a.checked_type.shape != c.checked_type.shape:
                    return None
                args.append(self.new[a])
            elif a.checked_type.shape == c.checked_type.shape:
                args.append(make_call("reshape", self.nchw(a), newshape=shape))
            elif isinstance(a, Constant):
                k = _flat_constant(a, channels, n, g)
                if k is None:
                    return None
                args.append(k)
            else:
                return None
        return Call(op, args, c.attrs, c.span), g

    def layout_free(self, c):
        """(new call, block) when c can run on its blocked input(s) as is; else None."""
        op = c.op
        name = getattr(op, "name", "")
        if name == "concatenate":
            return self.blocked_concat(c)
        blocks = [self.block.get(a, 0) for a in c.args]
        if not any(blocks):
            return None
        if len(c.args) == 1 and op.pattern == OpPattern.ELEMWISE:
            return Call(op, [self.new[c.args[0]]], c.attrs, c.span), blocks[0]
        if name in _POOLS and c.attrs.layout == "NCHW":
            b = blocks[0]
            return Call(op, [self.new[c.args[0]]], c.attrs.with_(layout=f"NCHW{b}c"),
                        c.span), b
        if len(c.args) != 2 or not isinstance(c.checked_type, TensorType) \
                or c.checked_type.ndim != 4:
            return None
        channels = c.checked_type.shape[1]
        if name == "nn.bias_add":
            if c.attrs.axis % 4 != 1 or not blocks[0] or not isinstance(c.args[1], Constant):
                return None
            b = blocks[0]
            bias = Constant(c.args[1].data.reshape(1, channels // b, 1, 1, b))
            return make_call("add", self.new[c.args[0]], bias, span=c.span), b
        if op.pattern != OpPattern.BROADCAST:
            return None
        x, y = c.args
        if blocks[0] and blocks[0] == blocks[1]:
            if x.checked_type.shape == y.checked_type.shape == c.checked_type.shape:
                return Call(op, [self.new[x], self.new[y]], c.attrs, c.span), blocks[0]
            return None
        same = x.checked_type.shape == y.checked_type.shape == c.checked_type.shape
        if same and not isinstance(x, Constant) and not isinstance(y, Constant):
            # A residual add of a blocked and an NCHW tensor: block the other one too (the
            # sum feeds the next convolution, which wants it blocked anyway).
            b = max(blocks)
            return Call(op, [self.blocked(x, b), self.blocked(y, b)], c.attrs, c.span), b
        if blocks[0] and isinstance(y, Constant) and x.checked_type.shape == c.checked_type.shape:
            k = _per_channel_constant(y, channels, _blocked_channels(channels, blocks[0]))
            return None if k is None else (Call(op, [self.new[x], k], c.attrs, c.span),
                                           blocks[0])
        if blocks[1] and isinstance(x, Constant) and y.checked_type.shape == c.checked_type.shape:
            k = _per_channel_constant(x, channels, _blocked_channels(channels, blocks[1]))
            return None if k is None else (Call(op, [k, self.new[y]], c.attrs, c.span),
                                           blocks[1])
        return None

    def blocked_concat(self, c):
        """(concatenation of the blocked inputs, block) for a channel concatenation with a
        blocked input whose every input has whole blocks of channels; else None. Joined
        in NCHW and blocked after, each vector lane of the output chose its input on its own
        (a DenseNet's concat kernels were two thirds of its compile time)."""
        (tup,) = c.args
        if not isinstance(tup, Tuple) or not isinstance(c.checked_type, TensorType) \
                or c.checked_type.ndim != 4 or c.attrs.axis % 4 != 1:
            return None
        b = max((self.block.get(f, 0) for f in tup.fields), default=0)
        if not b or any(not isinstance(f.checked_type.shape[1], int)
                        or f.checked_type.shape[1] % b for f in tup.fields):
            return None
        fields = Tuple([self.blocked(f, b) for f in tup.fields], tup.span)
        return Call(c.op, [fields], c.attrs.with_(axis=1), c.span), b

    def worth_blocking(self, c) -> bool:
        """A depthwise convolution is memory bound: alone between NCHW tensors with a small
        output, the two transforms around it cost more than running it in NCHW. It moves to
        the blocked layout when its input is blocked already (as between the blocked 1x1
        convolutions of an inverted residual block) or its output has at least
        DEPTHWISE_BLOCKED_PIXELS pixels. Others always move."""
        if not _depthwise(c) or self.block.get(c.args[0], 0):
            return True
        _, _, oh, ow = c.checked_type.shape
        return oh * ow >= DEPTHWISE_BLOCKED_PIXELS

    def visit(self, e):
        if isinstance(e, Call) and getattr(e.op, "name", None) == "nn.conv2d" \
                and _convertible_conv(e):
            if self.wants_gemm(e):
                self.new[e] = self.gemm_1x1(e)
                self.flat[e] = e.attrs.groups
                return
            if self.worth_blocking(e):
                self.new[e], self.block[e] = self.conv(e)
                return
        if isinstance(e, Call) and not isinstance(e.op, Function):
            # A GlobalVar call (an external function) is an op that wants NCHW inputs.
            flat = self.flat_free(e) if isinstance(e.op, Op) else None
            if flat is not None:
                self.new[e], self.flat[e] = flat
                return
            done = self.layout_free(e) if isinstance(e.op, Op) else None
            if done is not None:
                self.new[e], self.block[e] = done
                return
            args = [self.nchw(a) for a in e.args]
            changed = any(a is not b for a, b in zip(args, e.args))
            self.new[e] = Call(e.op, args, e.attrs, e.span) if changed else e
            return
        if isinstance(e, Tuple):
            fields = [self.nchw(f) for f in e.fields]
            changed = any(a is not b for a, b in zip(fields, e.fields))
            self.new[e] = Tuple(fields, e.span) if changed else e
            return
        if isinstance(e, TupleGetItem):
            value = self.new[e.tuple_value]
            self.new[e] = e if value is e.tuple_value else TupleGetItem(value, e.index, e.span)
            return
        if isinstance(e, (Var, Constant)):
            self.new[e] = e
            return
        raise _Unsupported(type(e).__name__)


class _Unsupported(Exception):
    pass


def convert_conv_layout(func: Function) -> Function:
    """Move the NCHW convolutions of `func` (constant weights; any groups) to the
    blocked layout, with packed weights, and propagate the layout through elementwise ops,
    bias_add, residual adds and pooling. Functions with Let, If or calls of nested functions are
    returned unchanged; calls of global functions (external code after partition_graph) are
    opaque ops that get NCHW tensors.

    Example:
        >>> f2 = convert_conv_layout(f)  # conv2d -> contrib_conv2d_nchwc  # doctest: +SKIP
    """
    nodes = post_order(func.body, enter_functions=False)
    if not any(isinstance(e, Call) and getattr(e.op, "name", None) == "nn.conv2d"
               and _convertible_conv(e) for e in nodes):
        return func
    conv = _Converter(_feeding_convs(func.body, nodes))
    try:
        for e in nodes:
            conv.visit(e)
    except _Unsupported:
        return func
    body = conv.nchw(func.body)
    if body is func.body:
        return func
    return Function(func.params, body, func.attrs, func.span)


def ConvertConvLayout():
    """The ConvertConvLayout function pass (opt_level 3): see convert_conv_layout. It packs
    the weights itself (numpy), so no FoldConstant is needed after it.

    Example:
        >>> mod = ConvertConvLayout()(mod)  # doctest: +SKIP
    """
    return FunctionPass(lambda func: convert_conv_layout(func), opt_level=3,
                        name="ConvertConvLayout", target_keys=("cpu",))

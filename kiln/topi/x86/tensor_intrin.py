"""x86 tensor intrinsics for s[T].tensorize: int8 dot products (AVX-512 VNNI / AVX-VNNI
`vpdpbusd`, and an exact AVX2 form through `vpmaddwd` on int16 operands) and a float32
register-tile micro-kernel.

Each is declared by its computation, so a schedule that tensorizes a loop nest with one is
checked against it (kiln/te/tensorize.py). Their operands are the packed layouts the int8 and
GEMM schedules make (kiln/topi/x86/dense_int8.py): `kernel[i, k]` holds output lane i's k-th
element of a dot product, so one vector load feeds all lanes.
"""
from __future__ import annotations

from ... import te
from ...target import Target, current_target
from ...tir.expr import Broadcast, Call
from ...tir.op import bitcast, call_llvm_intrin, const
from ...tir.stmt import SeqStmt


def _dot_compute(lanes: int, group: int, data_dtype: str, kernel_dtype: str):
    data = te.placeholder((group,), data_dtype, name="data")
    kernel = te.placeholder((lanes, group), kernel_dtype, name="kernel")
    k = te.reduce_axis((0, group), name="k")
    out = te.compute((lanes,), lambda i: te.sum(data[k].astype("int32") * kernel[i, k].astype("int32"),
                                                 axis=k), name="out")
    return data, kernel, out


def _accumulating(out, lanes: int, product):
    """(body, reset, update) of an int32 accumulator of `lanes` lanes and a product of it."""
    zero = Broadcast(const(0, "int32"), lanes)
    return (out.vstore([0], product(zero)), out.vstore([0], zero),
            out.vstore([0], product(out.vload([0], lanes))))


def dot_u8s8_vnni(lanes: int = 16) -> te.TensorIntrin:
    """out[i] += sum over k < 4 of data[k] * kernel[i, k], uint8 × int8 into int32, as one
    `vpdpbusd` (AVX-512 VNNI with 16 lanes; 8 lanes: AVX-VNNI or AVX-512 VNNI + VL). Exact:
    the instruction adds the four products without saturating.

    Example:
        >>> dot_u8s8_vnni(16)
        TensorIntrin(dot_u8s8_vnni16: out[16] <- data[4], kernel[16, 4])
    """
    if lanes not in (8, 16):
        raise ValueError(f"vpdpbusd works on 8 or 16 int32 lanes, not {lanes}")
    data, kernel, out = _dot_compute(lanes, 4, "uint8", "int8")
    name = f"llvm.x86.avx512.vpdpbusd.{32 * lanes}"

    def lower(ins, outs):
        d, w = ins
        # The four data bytes as one int32, broadcast to every lane.
        quads = bitcast(Broadcast(bitcast(d.vload([0], 4), "int32"), lanes), f"uint8x{4 * lanes}")
        weights = w.vload([0, 0], 4 * lanes)
        return _accumulating(outs[0], lanes, lambda acc: call_llvm_intrin(
            f"int32x{lanes}", name, acc, quads, weights))

    return te.decl_tensor_intrin(out.op, lower, name=f"dot_u8s8_vnni{lanes}")


def dot_i16_avx2() -> te.TensorIntrin:
    """out[i] += data[0] * kernel[i, 0] + data[1] * kernel[i, 1] over 8 int32 lanes, int16
    operands, as `vpmaddwd` and an add (AVX2). Exact for int8 data widened to int16: this is
    the int8 product of machines without VNNI (`vpmaddubsw` would saturate its int16 sums).

    Example:
        >>> dot_i16_avx2()
        TensorIntrin(dot_i16_avx2: out[8] <- data[2], kernel[8, 2])
    """
    data, kernel, out = _dot_compute(8, 2, "int16", "int16")

    def lower(ins, outs):
        d, w = ins
        pairs = bitcast(Broadcast(bitcast(d.vload([0], 2), "int32"), 8), "int16x16")
        products = call_llvm_intrin("int32x8", "llvm.x86.avx2.pmadd.wd", pairs, w.vload([0, 0], 16))
        return _accumulating(outs[0], 8, lambda acc: acc + products)

    return te.decl_tensor_intrin(out.op, lower, name="dot_i16_avx2")


def dot_u8s8_avx2() -> te.TensorIntrin:
    """out[i] += sum over k < 4 of data[k] * kernel[i, k] over 8 int32 lanes, uint8 × int8,
    as `vpmaddubsw` (pairs of products summed in int16, saturating), `vpmaddwd` by ones and an
    add (AVX2): the VNNI layout without VNNI. Exact only when no pair of products leaves int16:
    |kernel[i, 2j]| + |kernel[i, 2j + 1]| ≤ 128 for every lane and pair (255 · 128 = 32640),
    which the caller checks on its constant weights (`pairs_fit_int16`); ONNX Runtime's
    kernels use the same instruction and saturate where it does not hold.

    Example:
        >>> dot_u8s8_avx2()
        TensorIntrin(dot_u8s8_avx2: out[8] <- data[4], kernel[8, 4])
    """
    data, kernel, out = _dot_compute(8, 4, "uint8", "int8")

    def lower(ins, outs):
        d, w = ins
        quads = bitcast(Broadcast(bitcast(d.vload([0], 4), "int32"), 8), "uint8x32")
        pairs = call_llvm_intrin("int16x16", "llvm.x86.avx2.pmadd.ub.sw", quads,
                                 w.vload([0, 0], 32))
        ones = Broadcast(const(1, "int16"), 16)
        products = call_llvm_intrin("int32x8", "llvm.x86.avx2.pmadd.wd", pairs, ones)
        return _accumulating(outs[0], 8, lambda acc: acc + products)

    return te.decl_tensor_intrin(out.op, lower, name="dot_u8s8_avx2")


def pairs_fit_int16(kernel) -> bool:
    """Whether `vpmaddubsw` sums every pair of a packed int8 kernel [..., lanes, 4] exactly
    against uint8 data (see dot_u8s8_avx2).

    Example:
        >>> import numpy as np
        >>> pairs_fit_int16(np.full((8, 4), 64, "int8")), pairs_fit_int16(np.full((8, 4), 65, "int8"))
        (True, False)
    """
    import numpy as np
    magnitude = np.abs(np.asarray(kernel, "int32"))
    return bool((magnitude[..., 0::2] + magnitude[..., 1::2]).max(initial=0) <= 128)


def packed_int8_dot(target: Target, kernel_dtype: str, lanes: int, group: int) -> te.TensorIntrin:
    """The dot product of a packed int8 kernel [..., lanes, group] (a convolution's or a
    dense's) of `kernel_dtype`: int8 × 4 is `vpdpbusd` with VNNI, else `vpmaddubsw` (whoever
    packed it checked pairs_fit_int16); int16 × 2 is `vpmaddwd`.

    Example:
        >>> packed_int8_dot(Target("llvm -mcpu=haswell"), "int16", 8, 2)
        TensorIntrin(dot_i16_avx2: out[8] <- data[2], kernel[8, 2])
    """
    if (kernel_dtype, group) == ("int16", 2) and lanes == 8 and target.has_feature("avx2"):
        return dot_i16_avx2()
    if (kernel_dtype, group) == ("int8", 4):
        if lanes == 16 and target.has_feature("avx512vnni"):
            return dot_u8s8_vnni(16)
        if lanes == 8 and _vnni8(target):
            return dot_u8s8_vnni(8)
        if target.has_feature("avx2") and lanes == 8:
            return dot_u8s8_avx2()
    raise ValueError(f"target {target} has no int8 dot product for a {kernel_dtype} kernel of "
                     f"{lanes} lanes x {group}")


def int8_weight_layout(target: Target, quads) -> tuple[int, int, str] | None:
    """(lanes, group, kernel dtype) for constant int8 weights on `target`, given as `quads`
    [..., 4]: each row four consecutive elements of one output's reduction (the reduction
    padded with zeros to whole fours). uint8 data against int8 weights in groups of 4 (VNNI;
    AVX2 when every pair fits int16), else int16 pairs (AVX2, exact for any weight); None
    where kiln has no integer dot product.

    Example:
        >>> import numpy as np
        >>> int8_weight_layout(Target("llvm -mcpu=haswell"), np.full((8, 4), 100, "int8"))
        (8, 2, 'int16')
    """
    if target.has_feature("avx512vnni") and target.vector_width_bits >= 512:
        return 16, 4, "int8"
    if _vnni8(target):
        return 8, 4, "int8"
    if not target.has_feature("avx2"):
        return None
    return (8, 4, "int8") if pairs_fit_int16(quads) else (8, 2, "int16")


def _vnni8(target: Target) -> bool:
    """vpdpbusd on 8 int32 lanes: AVX-VNNI, or AVX-512 VNNI with VL."""
    return target.has_feature("avxvnni") or (target.has_feature("avx512vnni")
                                             and target.has_feature("avx512vl"))


def for_data(layout, data_dtype: str):
    """A layout from int8_weight_layout adjusted to the data's type: `vpdpbusd` and
    `vpmaddubsw` take uint8 data, so int8 data uses int16 pairs (`vpmaddwd` on 8 lanes, which
    every target with an int8 layout has: AVX2, and the AVX-512 VNNI targets whose uint8
    layout has 16 lanes).

    Example:
        >>> for_data((8, 4, "int8"), "int8"), for_data((16, 4, "int8"), "int8")
        ((8, 2, 'int16'), (8, 2, 'int16'))
    """
    if layout is None or data_dtype == "uint8" or layout[2] == "int16":
        return layout
    return 8, 2, "int16"


def eight_lane_layout(target: Target, data_dtype: str) -> tuple[int, int, str]:
    """The 8-lane int8 layout for channels too few for 16 lanes on an AVX-512 VNNI target:
    `vpdpbusd` on 256-bit vectors for uint8 data, else int16 pairs (`vpmaddwd`, exact for any
    weight).

    Example:
        >>> eight_lane_layout(Target("llvm -mcpu=haswell"), "uint8")
        (8, 2, 'int16')
    """
    return (8, 4, "int8") if data_dtype == "uint8" and _vnni8(target) else (8, 2, "int16")


def conv_int8_layout(target: Target, weight) -> tuple[int, int, str] | None:
    """int8_weight_layout of a convolution's weight [O, I, KH, KW]: its fours are consecutive
    input channels of one tap (the packed kernel's groups), I padded to a multiple of 4.

    Example:
        >>> import numpy as np
        >>> conv_int8_layout(Target("llvm -mcpu=haswell"), np.full((8, 8, 1, 1), 100, "int8"))
        (8, 2, 'int16')
    """
    import numpy as np
    w = np.asarray(weight)
    o, i = w.shape[:2]
    w = np.pad(w, ((0, 0), (0, -i % 4), (0, 0), (0, 0)))
    return int8_weight_layout(target, w.transpose(0, 2, 3, 1).reshape(o, -1, 4))


def dense_int8_layout(target: Target, weight) -> tuple[int, int, str] | None:
    """int8_weight_layout of a dense weight [N, K]: fours of consecutive k.

    Example:
        >>> import numpy as np
        >>> dense_int8_layout(Target("llvm -mcpu=haswell"), np.full((8, 6), 64, "int8"))
        (8, 4, 'int8')
    """
    import numpy as np
    w = np.asarray(weight)
    w = np.pad(w, ((0, 0), (0, -w.shape[1] % 4)))
    return int8_weight_layout(target, w.reshape(w.shape[0], -1, 4))


def int8_dot(target: Target | None = None) -> tuple[te.TensorIntrin, int, int, str]:
    """The target's int8 dot-product intrinsic: (intrin, lanes, group, operand dtype), where a
    product sums `group` consecutive k per lane and the operands are stored as `operand dtype`
    (int16 on AVX2, so uint8 and int8 data both stay exact).

    Example:
        >>> int8_dot(Target("llvm -mcpu=cascadelake"))[1:]
        (16, 4, 'int8')
    """
    target = target or current_target()
    if target.has_feature("avx512vnni") and target.vector_width_bits >= 512:
        return dot_u8s8_vnni(16), 16, 4, "int8"
    if target.has_feature("avxvnni") or (target.has_feature("avx512vnni")
                                         and target.has_feature("avx512vl")):
        return dot_u8s8_vnni(8), 8, 4, "int8"
    if target.has_feature("avx2"):
        return dot_i16_avx2(), 8, 2, "int16"
    raise ValueError(f"target {target} has no int8 dot product kiln can use (it needs AVX2, "
                     "AVX-VNNI or AVX-512 VNNI)")


def gemm_f32_tile(rows: int, lanes: int, panels: int = 1) -> te.TensorIntrin:
    """A float32 register-tile micro-kernel: out[i, j] += sum over one k of a[i, 0] * b[0, j]
    for `rows` rows and `panels` vectors of `lanes` columns, as broadcasts and fused
    multiply-adds, the accumulators staying in registers across the k loop outside it.

    Example:
        >>> gemm_f32_tile(4, 8, 2)
        TensorIntrin(gemm_f32_tile4x16: out[4, 16] <- a[4, 1], b[1, 16])
    """
    cols = lanes * panels
    a = te.placeholder((rows, 1), "float32", name="a")
    b = te.placeholder((1, cols), "float32", name="b")
    k = te.reduce_axis((0, 1), name="k")
    out = te.compute((rows, cols), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="out")
    any_stride = [te.var("rows_stride"), 1]
    binds = {a: te.decl_buffer(a.shape, "float32", "a", strides=any_stride),
             b: te.decl_buffer(b.shape, "float32", "b", strides=any_stride),
             out: te.decl_buffer(out.shape, "float32", "out", strides=any_stride)}

    def lower(ins, outs):
        aa, bb = ins
        (cc,) = outs
        zero = Broadcast(const(0.0, "float32"), lanes)
        vectors = [bb.vload([0, p * lanes], lanes) for p in range(panels)]

        def tile(acc):
            stmts = []
            for i in range(rows):
                value = Broadcast(aa.vload([i, 0]), lanes)
                for p in range(panels):
                    stmts.append(cc.vstore([i, p * lanes], Call(
                        f"float32x{lanes}", "fma", (value, vectors[p], acc(i, p)))))
            return SeqStmt.flatten(stmts)

        reset = SeqStmt.flatten([cc.vstore([i, p * lanes], zero)
                                 for i in range(rows) for p in range(panels)])
        return (tile(lambda i, p: zero), reset,
                tile(lambda i, p: cc.vload([i, p * lanes], lanes)))

    return te.decl_tensor_intrin(out.op, lower, binds=binds, name=f"gemm_f32_tile{rows}x{cols}")

"""AlterOpLayout (dense part): products with a constant weight read it pre-packed.

The x86 dense kernel reads the weight as panels of NR consecutive output columns
(kiln/topi/nn/dense.py). Left as is, every run repacks the weight; here the packing becomes a
separate op on the constant, which FoldConstant (run right after) evaluates once:

    nn.dense(x, W)                          → nn.contrib_dense_pack(x, nn.dense_weight_pack(W))
    nn.matmul(a, B)  (B constant, a not transposed)
                                            → nn.contrib_dense_pack(a, nn.dense_weight_pack(B^T))

NR comes from topi's heuristic `pack_width(units, dtype)` unless the PassContext config
AlterOpLayout.dense_pack_width is set. An 8-bit dense summed in int32 gets its weight packed for
the target's integer dot product instead (nn.contrib_dense_int8). Products whose weight is not
a constant (attention's batch_matmul of two activations) are left alone: their packing is part
of the run's work.
"""
from __future__ import annotations

from ..expr import Constant
from ..op import call as make_call
from .pass_infra import FunctionPass, PassContext, register_pass_config
from .rewrite import rewrite

register_pass_config("AlterOpLayout.dense_pack_width", 0, int,
                     "columns per packed dense weight panel; 0 picks them from the shapes")


def _known_ints(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def _pack_width(units: int, dtype: str, forced: int) -> int:
    if forced:
        return forced
    from ...topi.nn.dense import pack_width
    return pack_width(units, dtype)


def _packed_dense(data, weight, transposed: bool, forced: int, span):
    """contrib_dense_pack(data, dense_weight_pack(weight)), or None if weight does not fit."""
    if not isinstance(weight, Constant) or weight.checked_type.ndim != 2:
        return None
    shape = weight.checked_type.shape
    if not _known_ints(shape):
        return None
    units = shape[0] if transposed else shape[1]
    nr = _pack_width(units, weight.checked_type.dtype, forced)
    packed = make_call("nn.dense_weight_pack", weight, pack_width=nr, transposed=transposed,
                       span=span)
    return make_call("nn.contrib_dense_pack", data, packed, units=units, span=span)


def _int8_dense(c):
    """nn.contrib_dense_int8 for a dense of 2-d 8-bit data and a constant int8 weight summed in
    int32, its weight packed for the target's dot product (kiln/topi/x86/dense_int8.py); None
    where the target has none."""
    data, weight = c.args
    if (not isinstance(weight, Constant) or weight.checked_type.dtype != "int8"
            or data.checked_type.dtype not in ("uint8", "int8") or data.checked_type.ndim != 2
            or not _known_ints(data.checked_type.shape)):
        return None
    from ...target import current_target
    from ...topi.x86.dense_int8 import pack_int8_weight
    from ...topi.x86.tensor_intrin import dense_int8_layout, for_data
    layout = for_data(dense_int8_layout(current_target(), weight.data), data.checked_type.dtype)
    if layout is None:
        return None
    lanes, group, dtype = layout
    packed = Constant(pack_int8_weight(weight.data, lanes, group, dtype))
    return make_call("nn.contrib_dense_int8", data, packed, units=weight.checked_type.shape[0],
                     span=c.span)


def alter_dense_layout(func, pack_width: int = 0):
    """Rewrite dense / matmul with a constant weight into a dense on pre-packed panels; the
    packing stays an op for FoldConstant to evaluate. pack_width 0: chosen from the shapes.

    Example:
        >>> f = Function([x], call("nn.dense", x, const(np.ones((64, 8), "float32"))))  # doctest: +SKIP
        >>> alter_dense_layout(f)   # contrib_dense_pack(%x, dense_weight_pack(meta, pack_width=32), units=64)
    """
    def dense(c):
        if c.checked_type.dtype == "int32":
            return _int8_dense(c)
        return _packed_dense(c.args[0], c.args[1], True, pack_width, c.span)

    def matmul(c):
        if c.attrs.transpose_a:
            return None
        return _packed_dense(c.args[0], c.args[1], bool(c.attrs.transpose_b), pack_width, c.span)

    return rewrite(func, {"nn.dense": [dense], "nn.matmul": [matmul]})


def AlterOpLayout(pack_width: int | None = None):
    """The AlterOpLayout function pass (opt_level 3): see alter_dense_layout. Run FoldConstant
    after it so that the packing of constant weights happens at compile time.

    Example:
        >>> mod = Sequential([AlterOpLayout(), FoldConstant()])(mod)  # doctest: +SKIP
    """
    def run(func, mod, ctx: PassContext):
        nr = pack_width if pack_width is not None else \
            ctx.get_config("AlterOpLayout.dense_pack_width")
        if nr < 0:
            raise ValueError(f"AlterOpLayout: dense pack width must be >= 0, got {nr}")
        return alter_dense_layout(func, nr)
    return FunctionPass(run, opt_level=3, name="AlterOpLayout", target_keys=("cpu",))

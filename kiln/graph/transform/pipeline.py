"""The default graph optimization pipeline kiln.compile runs before fusion."""
from __future__ import annotations

from ..module import IRModule
from .alter_op_layout import AlterOpLayout
from .combine_parallel import CombineParallelBatchMatmul, CombineParallelDense
from .convert_conv_layout import ConvertConvLayout
from .dead_code import DeadCodeElimination
from .eliminate_common_subexpr import EliminateCommonSubexpr
from .fake_quantization_to_integer import FakeQuantizationToInteger
from .fold_constant import _FOLDING, FoldConstant
from .infer_type import InferType
from .legalize_float16 import LegalizeFloat16
from .legalize_qnn import LegalizeQnn
from .pass_infra import PassContext, Sequential
from .simplify_expr import SimplifyExpr
from .simplify_inference import SimplifyInference


def default_pipeline() -> Sequential:
    """The passes kiln.compile applies (each runs when the context's opt_level reaches its own).

    InferType(0) FakeQuantizationToInteger(0) LegalizeQnn(0) SimplifyInference(0) FoldConstant(2) SimplifyExpr(0) EliminateCommonSubexpr(3)
    CombineParallelDense(3) CombineParallelBatchMatmul(3) LegalizeFloat16(0) ConvertConvLayout(3)
    AlterOpLayout(3) FoldConstant(2) DeadCodeElimination(1) InferType(0)

    Example:
        >>> with PassContext(opt_level=3):  # doctest: +SKIP
        ...     mod = default_pipeline()(mod)
    """
    return Sequential([
        InferType(),
        FakeQuantizationToInteger(),   # QDQ regions in integers; then qnn ops become catalog
        LegalizeQnn(),                 # ops, before any pass that would need their kernels
        SimplifyInference(),     # before folding: batch norms become constant weight arithmetic
        FoldConstant(),
        SimplifyExpr(),
        EliminateCommonSubexpr(),
        CombineParallelDense(),
        CombineParallelBatchMatmul(),
        LegalizeFloat16(),       # float16 sums in float32; before the layout passes pack weights
        ConvertConvLayout(),     # NCHW16c convolutions; batch norms are folded by now
        AlterOpLayout(),         # after combining (packs the combined weights); before folding:
        FoldConstant(),          # constant weights are packed here, once, not at every run
        DeadCodeElimination(),
        InferType(),
    ], name="GraphOptimize")


def default_passes(mod: IRModule, opt_level: int | None = None) -> IRModule:
    """Run default_pipeline() on mod. With opt_level, under a context that has that opt_level
    and otherwise the current context's settings (disabled passes, instruments, config).

    Example:
        >>> mod = default_passes(mod, opt_level=3)  # doctest: +SKIP
    """
    seq = default_pipeline()
    current = PassContext.current()
    if _FOLDING.get():
        # a compilation made by FoldConstant to evaluate constants: an implementation detail
        # of the outer pass, so the user's instruments do not see it
        with PassContext(opt_level=current.opt_level if opt_level is None else opt_level):
            return seq(mod)
    if opt_level is None or opt_level == current.opt_level:
        return seq(mod)
    with current.derive(opt_level=opt_level):
        return seq(mod)

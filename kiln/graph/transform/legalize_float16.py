"""LegalizeFloat16: float16 contractions, reductions and normalizations compute in float32.

kiln's kernels compute in their operands' dtype, so a float16 dense or sum would round every
partial sum to float16. numpy, PyTorch and ONNX Runtime accumulate float16 products and sums in
float32 and round once; this pass makes kiln do the same:

    nn.dense(x, W)             (float16) → cast(nn.dense(cast(x, "float32"), W32), "float16")
    sum(x, axis=1)             (float16) → cast(sum(cast(x, "float32"), axis=1), "float16")
    nn.conv2d(x, W, out_dtype="float16") → cast(nn.conv2d(x32, W32, out_dtype="float32"), ...)

A constant float16 operand (W above) is converted here, exactly, so that the layout passes
after this one still see a constant weight to pack. Each float16 value is cast once however
many ops read it. FuseOps puts the casts into the kernels around the op; on x86, LLVM computes
float16 arithmetic in float32 anyway, so the float32 op is not slower (a 128x512x512 dense with
its weight packed in float32 ran in 0.14 ms instead of 1.1 ms in float16).

A softmax or layer norm runs whole in float32 and rounds once, as PyTorch does (the ONNX
importer writes a float16 Softmax as its function body instead, whose exp and quotient round
to float16 as the ONNX reference's do). numpy itself sums float16 in float32 only along the
contiguous axis; kiln does along any axis.

Only the ops in ACCUMULATING are rewritten. Elementwise, broadcast and injective ops stay in
float16, one rounding each, as numpy computes them; the ops in EXACT_IN_FLOAT16 select or move
elements (max, argmax, max pools, top-k ...) or round every step in numpy too (cumsum), so
float32 would change nothing or move away from the reference.

The pass runs at every opt_level (it decides what a float16 model computes, not how fast), after
CombineParallelDense (which combines the float16 products) and before ConvertConvLayout and
AlterOpLayout (which then pack float32 weights, and pick their blocks for float32).
"""
from __future__ import annotations

from ..expr import Call, Constant
from ..op import call as make_call
from ..ty import TensorType
from .pass_infra import FunctionPass
from .rewrite import rewrite

NARROW, WIDE = "float16", "float32"


def _always(call) -> bool:
    return True


def _interpolating(call) -> bool:
    # nearest-neighbour resize copies elements; linear and cubic sum weighted neighbours
    return call.attrs.method != "nearest"


# op name → whether a given call of it accumulates (products or sums over several elements)
ACCUMULATING = {
    **dict.fromkeys(("sum", "mean", "prod"), _always),
    **dict.fromkeys(("nn.dense", "nn.matmul", "nn.batch_matmul", "nn.contrib_dense_pack",
                     "nn.conv2d", "nn.conv2d_transpose", "nn.contrib_conv2d_nchwc",
                     "nn.contrib_conv2d_winograd_nchwc", "vision.deform_conv2d"), _always),
    **dict.fromkeys(("nn.softmax", "nn.log_softmax", "nn.layer_norm"), _always),
    **dict.fromkeys(("nn.avg_pool2d", "nn.global_avg_pool2d", "nn.adaptive_avg_pool2d",
                     "vision.roi_align", "vision.col2im"), _always),
    "image.resize2d": _interpolating,
}

# Reductions and anchors left in float16: exact there, or rounding each step in numpy as well.
EXACT_IN_FLOAT16 = frozenset({
    "max", "min", "argmax", "argmin", "nn.max_pool2d", "nn.global_max_pool2d",
    "nn.adaptive_max_pool2d", "nn.max_unpool2d", "topk", "unique", "nonzero",
    "vision.non_max_suppression", "scatter_elements", "scatter_nd", "cumsum", "cumprod",
    # integer operands only
    "nn.contrib_conv2d_nchwc_int8", "nn.contrib_dense_int8", "nn.bitserial_conv2d",
    "nn.bitserial_dense"})


def _is_narrow(expr) -> bool:
    ty = expr.checked_type
    return isinstance(ty, TensorType) and ty.dtype == NARROW


class _Widener:
    """Float32 versions of float16 values, made once per value (a constant is converted)."""

    def __init__(self):
        self.wide: dict = {}

    def __call__(self, expr):
        if expr not in self.wide:
            if isinstance(expr, Constant):
                self.wide[expr] = Constant(expr.data.astype(WIDE), span=expr.span)
            else:
                self.wide[expr] = make_call("cast", expr, dtype=WIDE, span=expr.span)
        return self.wide[expr]


def _wide_attrs(attrs):
    # an explicit float16 out_dtype (convolutions) would round the float32 sum inside the op
    if attrs.get("out_dtype") == NARROW:
        return attrs.with_(out_dtype=WIDE)
    return attrs


def _rule(widen: _Widener):
    """The rewrite of one accumulating call: float16 operands widened, result narrowed."""
    def widen_call(c: Call):
        if not ACCUMULATING[c.op.name](c) or not any(_is_narrow(a) for a in c.args):
            return None
        args = [widen(a) if _is_narrow(a) else a for a in c.args]
        wide = Call(c.op, args, _wide_attrs(c.attrs), c.span)
        if wide.checked_type == c.checked_type:     # e.g. out_dtype="float32" already
            return wide
        if not _is_narrow(c):
            return None
        return make_call("cast", wide, dtype=NARROW, span=c.span)
    return widen_call


def legalize_float16(func):
    """Make the float16 calls of ACCUMULATING ops compute in float32 (see the module docstring).

    Example:
        >>> x = var("x", (2, 8), "float16")  # doctest: +SKIP
        >>> legalize_float16(Function([x], call("sum", x, axis=1)))  # doctest: +SKIP
        # fn (%x) { cast(sum(cast(%x, dtype="float32"), axis=1), dtype="float16") }
    """
    rule = _rule(_Widener())
    return rewrite(func, {name: [rule] for name in ACCUMULATING})


def LegalizeFloat16():
    """The LegalizeFloat16 function pass (opt_level 0).

    Example:
        >>> mod = LegalizeFloat16()(mod)  # doctest: +SKIP
    """
    return FunctionPass(legalize_float16, opt_level=0, name="LegalizeFloat16")


__all__ = ["ACCUMULATING", "EXACT_IN_FLOAT16", "LegalizeFloat16", "legalize_float16"]

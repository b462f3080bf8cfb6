"""Training-loss ONNX ops used at inference: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss.

Both pick, for every sample, the (log-)probability of its target class with `gather` along
the class axis (axis 1), zero the samples whose target is `ignore_index`, weight them by
`weight[target]` and reduce ("none", "sum", or "mean" = sum(loss) / sum(weights), the count of
kept samples when there are no weights), as the ops' ONNX function bodies do.
"""
from __future__ import annotations

from ..context import dtype_of, shape_of
from ..registry import converter

_REDUCTIONS = ("none", "sum", "mean")


def _check_operands(ctx, log_prob, target, weight):
    """Shapes: log_prob (N, C, d1..dk), target (N, d1..dk), weight (C,)."""
    shape = tuple(shape_of(log_prob))
    if len(shape) < 2:
        ctx.error(f"input 0 must have shape (N, C, d1, ...), got {shape}")
    want = shape[:1] + shape[2:]
    if tuple(shape_of(target)) != want:
        ctx.error(f"target (input 1) has shape {tuple(shape_of(target))}, expected {want} "
                  f"(input 0 {shape} without its class axis)")
    if dtype_of(target) not in ("int32", "int64"):
        ctx.error(f"target (input 1) must hold int32 or int64 class indices, got "
                  f"{dtype_of(target)}")
    if weight is not None and tuple(shape_of(weight)) != shape[1:2]:
        ctx.error(f"weight (input 2) has shape {tuple(shape_of(weight))}, expected "
                  f"{shape[1:2]} (one per class)")


def nll_loss(ctx, log_prob, target, weight=None):
    """The NegativeLogLikelihoodLoss of `log_prob` (N, C, d...) at class indices `target`
    (N, d...), with this node's ignore_index and reduction attributes.

    Example:
        >>> loss = nll_loss(ctx, ctx.op("nn.log_softmax", x, axis=1), t)   # doctest: +SKIP
    """
    reduction = ctx.attr("reduction", "mean")
    if reduction not in _REDUCTIONS:
        ctx.error(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    _check_operands(ctx, log_prob, target, weight)
    ignore_index = ctx.attr("ignore_index", None)
    ignored = None
    if ignore_index is not None:
        ignored = ctx.op("equal", target, ctx.scalar(ignore_index, target))
        # An ignored target may be any integer: read class 0 there and zero it below.
        target = ctx.op("where", ignored, ctx.scalar(0, target), target)
    picked = ctx.op("gather", log_prob, ctx.op("expand_dims", target, axis=1), axis=1)
    loss = ctx.op("negative", ctx.op("squeeze", picked, axis=(1,)))
    zero = ctx.scalar(0, log_prob)
    if ignored is not None:
        # where, not a product with a 0 weight: an ignored -inf log-probability must give 0.
        loss = ctx.op("where", ignored, zero, loss)
    sample_weight = None
    if weight is not None:
        sample_weight = ctx.op("take", weight, target, axis=0)
        if ignored is not None:
            sample_weight = ctx.op("where", ignored, zero, sample_weight)
        loss = ctx.op("multiply", loss, sample_weight)
    elif ignored is not None:
        sample_weight = ctx.op("where", ignored, zero, ctx.scalar(1, log_prob))
    if reduction == "none":
        return loss
    total = ctx.op("sum", loss)
    if reduction == "sum":
        return total
    if sample_weight is None:
        return ctx.op("mean", loss)
    return ctx.op("divide", total, ctx.op("sum", sample_weight))


def _weight(ctx):
    return ctx.input(2) if ctx.has_input(2) else None


@converter("NegativeLogLikelihoodLoss")
def _nll_loss(ctx):
    return nll_loss(ctx, ctx.input(0), ctx.input(1), _weight(ctx))


@converter("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(ctx):
    if len(ctx.shape(0)) < 2:
        ctx.error(f"scores (input 0) must have shape (N, C, d1, ...), got {ctx.shape(0)}")
    log_prob = ctx.op("nn.log_softmax", ctx.input(0), axis=1)
    loss = nll_loss(ctx, log_prob, ctx.input(1), _weight(ctx))
    return [loss, log_prob] if ctx.num_outputs > 1 else loss

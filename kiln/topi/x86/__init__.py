"""kiln.topi.x86: default x86 schedules (vectorized, parallel) for fused operator groups.

Each schedule takes the outputs of a fused group (a Tensor or a list: the anchor op and the
injective ops after it) and returns a te.Schedule for all of them. `SCHEDULES` maps an
anchor's tag to its schedule function, for the graph layer.

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((1, 3, 8, 8)); w = te.placeholder((4, 3, 3, 3))
    >>> s = topi.x86.SCHEDULES["conv2d_nchw"](topi.nn.conv2d_nchw(x, w, 1, 1))
"""
from .. import tags
from .conv2d import (schedule_conv2d_nchw, schedule_conv2d_nhwc, schedule_conv2d_transpose,
                     schedule_depthwise_conv2d, schedule_group_conv2d)
from .dense import schedule_batch_matmul, schedule_dense, schedule_matmul
from .injective import schedule_broadcast, schedule_elemwise, schedule_injective
from .norm import schedule_layer_norm
from .pooling import schedule_adaptive_pool, schedule_global_pool, schedule_pool
from .reduction import schedule_reduce
from .resize import schedule_resize
from .softmax import schedule_log_softmax, schedule_softmax

SCHEDULES = {
    tags.ELEMWISE: schedule_injective,
    tags.BROADCAST: schedule_injective,
    tags.INJECTIVE: schedule_injective,
    tags.COMM_REDUCE: schedule_reduce,
    tags.CONV2D_NCHW: schedule_conv2d_nchw,
    tags.CONV2D_NHWC: schedule_conv2d_nhwc,
    tags.DEPTHWISE_CONV2D_NCHW: schedule_depthwise_conv2d,
    tags.GROUP_CONV2D_NCHW: schedule_group_conv2d,
    tags.CONV2D_TRANSPOSE_NCHW: schedule_conv2d_transpose,
    tags.DENSE: schedule_dense,
    tags.MATMUL: schedule_matmul,
    tags.BATCH_MATMUL: schedule_batch_matmul,
    tags.POOL: schedule_pool,
    tags.ADAPTIVE_POOL: schedule_adaptive_pool,
    tags.SOFTMAX: schedule_softmax,
    tags.LOG_SOFTMAX: schedule_log_softmax,
    tags.LAYER_NORM: schedule_layer_norm,
    tags.RESIZE: schedule_resize,
}


def schedule_for(tag: str):
    """The schedule function for a fused group whose anchor has `tag`.

    Example:
        >>> schedule_for("dense") is schedule_dense
        True
    """
    try:
        return SCHEDULES[tag]
    except KeyError:
        raise KeyError(f"no x86 schedule for anchor tag {tag!r}; known: "
                       f"{', '.join(sorted(SCHEDULES))}") from None

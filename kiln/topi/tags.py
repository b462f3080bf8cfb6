"""Tags of topi computes: the one place that names them.

The graph layer reads `op.tag` to decide fusion; schedules read it to find the anchor of a
fused group and to inline the injective stages around it.

Example:
    >>> is_injective(BROADCAST), is_injective(CONV2D_NCHW)
    (True, False)
"""
ELEMWISE = "elemwise"
BROADCAST = "broadcast"
INJECTIVE = "injective"
COMM_REDUCE = "comm_reduce"

CONV2D_NCHW = "conv2d_nchw"
CONV2D_NHWC = "conv2d_nhwc"
DEPTHWISE_CONV2D_NCHW = "depthwise_conv2d_nchw"
GROUP_CONV2D_NCHW = "group_conv2d_nchw"
CONV2D_TRANSPOSE_NCHW = "conv2d_transpose_nchw"
DENSE = "dense"
MATMUL = "matmul"
BATCH_MATMUL = "batch_matmul"
POOL = "pool"
ADAPTIVE_POOL = "adaptive_pool"
SOFTMAX = "softmax"
LOG_SOFTMAX = "log_softmax"
LAYER_NORM = "layer_norm"
RESIZE = "resize"
INDEXING = "indexing"           # stages of sorts, searches and scatters (kiln/topi/indexing.py)
VISION = "vision"               # reductions and sample buffers of kiln/topi/vision.py

# Internal stages of an anchor (never fused on their own).
DENSE_PACK = "dense_pack"       # weight / operand packed into column panels for dense & matmul
RESIZE_TABLE = "resize_table"   # per-axis tap indices and weights of resize, its axis passes

_INJECTIVE = frozenset((ELEMWISE, BROADCAST, INJECTIVE))


def is_injective(tag: str) -> bool:
    """True for tags whose computes only remap indices (elemwise, broadcast, injective).

    Example:
        >>> is_injective("elemwise")
        True
    """
    return tag in _INJECTIVE


def is_broadcast(tag: str) -> bool:
    """True for elementwise and broadcast tags (each output reads one element per input).

    Example:
        >>> is_broadcast("broadcast")
        True
    """
    return tag in (ELEMWISE, BROADCAST)

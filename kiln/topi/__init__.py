"""kiln.topi: the operator library — a compute (tensor expression) per operator, tagged for
fusion, and default x86 schedules for fused groups in kiln.topi.x86.

    topi.relu, topi.add, topi.reshape, topi.sum, ...    elementwise, broadcast, transforms,
                                                        reductions
    topi.nn.conv2d_nchw, topi.nn.dense, topi.nn.pool2d, topi.nn.softmax, ...
    topi.x86.schedule_conv2d_nchw(outs), ...            schedules for fused groups
    topi.tags, topi.utils (traverse_inline, get_const_tuple, ...)

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((1, 3, 8, 8), name="x")
    >>> w = te.placeholder((4, 3, 3, 3), name="w")
    >>> y = topi.nn.conv2d_nchw(x, w, strides=1, padding=1, dilation=1)
    >>> s = topi.x86.schedule_conv2d_nchw(y)
"""
from . import tags, utils
from .utils import public_functions
from .utils import TopiError, get_const_int, get_const_tuple, traverse_inline

# Elementwise, broadcast, transform and reduction computes live in the top namespace
# (topi.relu, topi.add, topi.reshape, topi.sum), as in TVM.
from . import broadcast, elemwise, reduction, transform  # noqa: E402

for _module in (elemwise, broadcast, transform, reduction):
    globals().update(public_functions(_module))

from . import gpu, nn, x86  # noqa: E402

"""kiln.topi.nn: neural-network computes (convolution, dense, pooling, resize, softmax,
normalization, LSTM).

Example:
    >>> from kiln import te
    >>> from kiln.topi import nn
    >>> y = nn.dense(te.placeholder((2, 8)), te.placeholder((4, 8)))
"""
from .conv2d import conv2d_nchw, conv2d_nhwc, depthwise_conv2d_nchw, get_pad_tuple, pad_spatial
from .conv2d_transpose import conv2d_transpose_nchw
from .dense import batch_matmul, dense, matmul, pack_columns, pack_weight_numpy
from .pooling import adaptive_pool2d, avg_pool2d, global_pool2d, max_pool2d, pool2d
from .resize import resize2d

from ..utils import public_functions
from . import lstm, norm, softmax  # noqa: E402

for _module in (softmax, norm, lstm):
    globals().update(public_functions(_module))

"""Shape and layout operators."""
from __future__ import annotations

import math

from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType
from .relations import normalize_axis, tensor


def _reshape_rel(types, attrs):
    x = tensor(types[0])
    shape = list(attrs.newshape)
    if not x.is_static():
        raise GraphTypeError("reshape needs a static input shape")
    total = math.prod(x.shape)
    if shape.count(-1) > 1:
        raise GraphTypeError(f"newshape {tuple(shape)} has more than one -1")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or total % known:
            raise GraphTypeError(f"cannot reshape {x.shape} to {tuple(shape)}")
        shape[shape.index(-1)] = total // known
    if math.prod(shape) != total:
        raise GraphTypeError(f"cannot reshape {x.shape} ({total} elements) to {tuple(shape)}")
    return TensorType(shape, x.dtype)


register_op("reshape", type_rel=_reshape_rel, pattern=OpPattern.INJECTIVE, num_inputs=1,
            attrs={"newshape": REQUIRED})


def _transpose_rel(types, attrs):
    x = tensor(types[0])
    axes = attrs.axes if attrs.axes is not None else tuple(reversed(range(x.ndim)))
    axes = [normalize_axis(a, x.ndim) for a in axes]
    if sorted(axes) != list(range(x.ndim)):
        raise GraphTypeError(f"axes {tuple(attrs.axes)} are not a permutation of {x.ndim} axes")
    return TensorType([x.shape[a] for a in axes], x.dtype)


register_op("transpose", type_rel=_transpose_rel, pattern=OpPattern.INJECTIVE, num_inputs=1,
            attrs={"axes": None})

"""ONNX element types as kiln dtype strings.

Example:
    >>> from onnx import TensorProto
    >>> kiln_dtype(TensorProto.FLOAT, "input 'x'")
    'float32'
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from ...tir import dtype as dt
from ..common import FrontendError


def kiln_dtype(elem_type: int, what: str) -> str:
    """The kiln dtype of an ONNX TensorProto element type; FrontendError naming `what` if kiln
    has none (bfloat16, strings, complex, float8 ...).

    Example:
        >>> kiln_dtype(11, "initializer 'w'")    # TensorProto.DOUBLE
        'float64'
    """
    try:
        name = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
        return dt.normalize(name)
    except (KeyError, TypeError, ValueError, dt.DTypeError):
        type_name = helper.tensor_dtype_to_string(elem_type).removeprefix("TensorProto.") \
            if elem_type else "UNDEFINED"
        raise FrontendError(f"{what} has element type {type_name}, which kiln does not "
                            f"support (supported: {', '.join(dt.SCALAR_TYPES[:-1])})") from None


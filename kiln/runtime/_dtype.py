"""The element types the runtime stores, as canonical strings ("float32", "bool", ...).

The runtime keeps its own small table instead of importing kiln.tir: a compiled model must
load and run with kiln.runtime alone.
"""
from __future__ import annotations

import numpy as np

SUPPORTED = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
             "float16", "float32", "float64")

_NUMPY = {name: np.dtype(name) for name in SUPPORTED}


def canonical(dtype) -> str:
    """The canonical name of a dtype given as a string, numpy dtype or scalar type.

    Example:
        >>> canonical(np.float32)
        'float32'
    """
    if isinstance(dtype, str) and dtype in _NUMPY:
        return dtype
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        np_dtype = None
    if np_dtype is not None and np_dtype.isnative and np_dtype.name in _NUMPY \
            and not isinstance(dtype, str):
        return np_dtype.name
    raise TypeError(f"unsupported dtype {describe(dtype)}; kiln arrays hold one of "
                    f"{', '.join(SUPPORTED)}")


def to_numpy(dtype: str) -> np.dtype:
    """The numpy dtype of a canonical name.

    Example:
        >>> to_numpy("int8")
        dtype('int8')
    """
    return _NUMPY[canonical(dtype)]


def describe(dtype) -> str:
    """A dtype as a user would recognise it in an error (byte order shown when non-native).

    Example:
        >>> describe(np.dtype(">f4"))
        '>f4'
    """
    if isinstance(dtype, np.dtype):
        return dtype.name if dtype.isnative else dtype.str
    return repr(dtype) if isinstance(dtype, str) else str(dtype)

"""Data types as strings, as in TVM: "float32", "int8", "bool", "float32x16" (a 16-lane vector).

`handle` is an opaque pointer. Helpers here are cached: dtype strings are parsed constantly.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

SCALAR_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64", "handle")


class DTypeError(TypeError):
    """A data type that kiln does not know, or an operation on mismatched types."""


@lru_cache(maxsize=None)
def parse(dtype: str) -> tuple[str, int]:
    """Split "float32x16" into ("float32", 16).

    Example:
        >>> parse("float32x16")
        ('float32', 16)
    """
    if not isinstance(dtype, str):
        dtype = normalize(dtype)
    base, sep, lanes = dtype.partition("x")
    if base not in SCALAR_TYPES or (sep and not lanes.isdigit()):
        raise DTypeError(f"unknown dtype {dtype!r}; kiln knows {', '.join(SCALAR_TYPES)} "
                         f"and vectors of them such as 'float32x16'")
    return base, int(lanes) if sep else 1


@lru_cache(maxsize=None)
def normalize(dtype) -> str:
    """Accept numpy dtypes and type objects as well as strings."""
    if isinstance(dtype, str):
        if dtype == "float":
            return "float32"
        if dtype == "int":
            return "int32"
        parse(dtype)
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError as err:
        raise DTypeError(f"unknown dtype {dtype!r}") from err
    parse(name)
    return name


def element_of(dtype: str) -> str:
    return parse(dtype)[0]


def lanes_of(dtype: str) -> int:
    return parse(dtype)[1]


@lru_cache(maxsize=None)
def with_lanes(dtype: str, lanes: int) -> str:
    base = parse(dtype)[0]
    return base if lanes == 1 else f"{base}x{lanes}"


@lru_cache(maxsize=None)
def bits_of(dtype: str) -> int:
    base = parse(dtype)[0]
    if base == "bool":
        return 1
    if base == "handle":
        return 64
    return int(base.removeprefix("u").removeprefix("int").removeprefix("float"))


def bytes_of(dtype: str) -> int:
    """Storage size of one element (bool is stored as one byte)."""
    base = parse(dtype)[0]
    return 1 if base == "bool" else bits_of(base) // 8


def is_float(dtype: str) -> bool:
    return parse(dtype)[0].startswith("float")


def is_int(dtype: str) -> bool:
    return parse(dtype)[0].startswith("int")


def is_uint(dtype: str) -> bool:
    return parse(dtype)[0].startswith("uint")


def is_integral(dtype: str) -> bool:
    """Signed or unsigned integer (not bool)."""
    base = parse(dtype)[0]
    return base.startswith("int") or base.startswith("uint")


def is_bool(dtype: str) -> bool:
    return parse(dtype)[0] == "bool"


def is_handle(dtype: str) -> bool:
    return parse(dtype)[0] == "handle"


def to_numpy(dtype: str) -> np.dtype:
    base, lanes = parse(dtype)
    if lanes != 1 or base == "handle":
        raise DTypeError(f"{dtype} has no numpy equivalent")
    return np.dtype(base)

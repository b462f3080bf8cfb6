"""kiln dtypes as LLVM IR types and constants (textual IR).

bool is i1 in registers and i8 in memory; float16 is `half` (LLVM widens its arithmetic to
float and rounds after each operation, as numpy does).
"""
from __future__ import annotations

import math
import struct
from functools import lru_cache

import numpy as np

from ...tir import dtype as dt
from ..common import wrap_int

_SCALAR = {"bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
           "uint8": "i8", "uint16": "i16", "uint32": "i32", "uint64": "i64",
           "float16": "half", "float32": "float", "float64": "double", "handle": "ptr"}
_MANGLE = {"i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "half": "f16",
           "float": "f32", "double": "f64", "ptr": "p0"}


@lru_cache(maxsize=None)
def llvm_type(dtype: str) -> str:
    """Register type of a dtype.

    Example:
        >>> llvm_type("float32x16")
        '<16 x float>'
    """
    base, lanes = dt.parse(dtype)
    scalar = _SCALAR[base]
    return scalar if lanes == 1 else f"<{lanes} x {scalar}>"


@lru_cache(maxsize=None)
def memory_type(dtype: str) -> str:
    """In-memory type of a dtype: bool is stored as one byte.

    Example:
        >>> memory_type("bool")
        'i8'
    """
    base, lanes = dt.parse(dtype)
    scalar = "i8" if base == "bool" else _SCALAR[base]
    return scalar if lanes == 1 else f"<{lanes} x {scalar}>"


def with_lanes_type(scalar_type: str, lanes: int) -> str:
    """A scalar LLVM type widened to a vector of `lanes` (itself for one lane).

    Example:
        >>> with_lanes_type("i1", 8)
        '<8 x i1>'
    """
    return scalar_type if lanes == 1 else f"<{lanes} x {scalar_type}>"


@lru_cache(maxsize=None)
def mangle(ty: str) -> str:
    """Overload suffix of an intrinsic: float -> f32, <16 x float> -> v16f32.

    Example:
        >>> mangle("<8 x double>")
        'v8f64'
    """
    if ty.startswith("<"):
        lanes, _, elem = ty[1:-1].partition(" x ")
        return f"v{lanes}{_MANGLE[elem]}"
    return _MANGLE[ty]


def element_type(ty: str) -> str:
    """Element of an LLVM vector type (a scalar type is its own element).

    Example:
        >>> element_type("<4 x double>")
        'double'
    """
    return ty[1:-1].partition(" x ")[2] if ty.startswith("<") else ty


def lanes_of_type(ty: str) -> int:
    """Lane count of an LLVM type (1 for scalars).

    Example:
        >>> lanes_of_type("<4 x double>")
        4
    """
    return int(ty[1:].partition(" x ")[0]) if ty.startswith("<") else 1


def scalar_constant(value, dtype: str) -> str:
    """Text of a scalar constant of a dtype (floats exactly, as hexadecimal bit patterns).

    Example:
        >>> scalar_constant(1.0, "float32")
        '0x3FF0000000000000'
    """
    base = dt.element_of(dtype)
    if base == "bool":
        return "true" if value else "false"
    if dt.is_float(base):
        value = float(value)
        if base == "float16":
            return "0xH%04X" % np.array(value, dtype=np.float16).view(np.uint16)
        if base == "float32" and math.isfinite(value):
            value = float(np.float32(value))   # LLVM wants float constants exactly representable
        elif base == "float32" and math.isnan(value):
            value = float(np.float32(np.nan))
        return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]
    return str(wrap_int(value, dt.bits_of(base), signed=True))   # iN constants read signed


def constant(value, dtype: str) -> str:
    """Text of a constant, splatted for vector dtypes.

    Example:
        >>> constant(1, "int32x4")
        'splat (i32 1)'
    """
    text = scalar_constant(value, dtype)
    lanes = dt.lanes_of(dtype)
    if lanes == 1:
        return text
    return f"splat ({llvm_type(dt.element_of(dtype))} {text})"


def zero(ty: str) -> str:
    """The zero constant of an LLVM type.

    Example:
        >>> zero("<4 x float>")
        'zeroinitializer'
    """
    if ty.startswith("<"):
        return "zeroinitializer"
    if ty in ("half", "float", "double"):
        return "0.0"
    if ty == "ptr":
        return "null"
    return "false" if ty == "i1" else "0"

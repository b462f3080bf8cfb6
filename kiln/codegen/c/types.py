"""kiln dtypes as C types (C11 + GCC vector extensions) and the helpers generated code uses.

A vector of bool is a lane mask of int32 (0 or -1 per lane), the form GCC's vector comparisons
produce; it is converted to the width of the values it selects between when used.
"""
from __future__ import annotations

import math

import numpy as np

from ...tir import dtype as dt
from ..common import wrap_int

_SCALAR = {"bool": "_Bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
           "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
           "uint64": "uint64_t", "float16": "_Float16", "float32": "float", "float64": "double",
           "handle": "void*"}
_SHORT = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
          "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "f16", "float32": "f32",
          "float64": "f64"}
_INT_OF_WIDTH = {8: "int8", 16: "int16", 32: "int32", 64: "int64"}

PRELUDE = """\
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;
extern int32_t kiln_parallel_launch(int32_t (*task)(int32_t, int32_t, void*), void* closure,
                                    int32_t num_tasks);
extern void* kiln_workspace_alloc(uint64_t nbytes);
extern void kiln_workspace_free(void* data);
"""


def memory_dtype(dtype: str) -> str:
    """Element type in memory: bool is stored as uint8.

    Example:
        >>> memory_dtype("boolx8")
        'uint8'
    """
    return "uint8" if dt.element_of(dtype) == "bool" else dt.element_of(dtype)


def mask_dtype(lanes: int) -> str:
    """The dtype representing a vector of `lanes` bools in C (an int32 lane mask).

    Example:
        >>> mask_dtype(8)
        'int32x8'
    """
    return f"int32x{lanes}"


def int_of_width(dtype: str) -> str:
    """The signed integer dtype with the element width and lanes of dtype (for bit tricks).

    Example:
        >>> int_of_width("float64x4")
        'int64x4'
    """
    base, lanes = dt.parse(dtype)
    bits = 32 if base == "bool" else dt.bits_of(base)
    return dt.with_lanes(_INT_OF_WIDTH[bits], lanes)


def float_literal(value: float, dtype: str) -> str:
    """An exact C literal of a float of the given (scalar) dtype.

    Example:
        >>> float_literal(0.5, "float32")
        '0x1.0000000000000p-1f'
    """
    base = dt.element_of(dtype)
    if base == "float32":
        value = float(np.float32(value))
    elif base == "float16":
        value = float(np.float16(value))
    if math.isnan(value):
        text = "NAN"
    elif math.isinf(value):
        text = "INFINITY" if value > 0 else "(-INFINITY)"
    else:
        text = value.hex() + ("f" if base in ("float32", "float16") else "")
        if value < 0:
            text = f"({text})"
    if base == "float64" and not math.isfinite(value):
        return f"((double){text})"
    if base == "float16":
        return f"((_Float16){text})"
    return text


def int_literal(value: int, dtype: str) -> str:
    """An exact C literal of an integer (or bool) of the given scalar dtype, wrapped to its width.

    Example:
        >>> int_literal(255, "int8")
        '((int8_t)-1)'
    """
    base = dt.element_of(dtype)
    if base == "bool":
        return "1" if value else "0"
    value = wrap_int(value, dt.bits_of(base), signed=dt.is_int(base))
    if base == "int64":
        return f"INT64_C({value})" if value != -(1 << 63) else "(-INT64_C(9223372036854775807)-1)"
    if base == "uint64":
        return f"UINT64_C({value})"
    if base == "int32":
        return str(value) if value != -(1 << 31) else "(-2147483647-1)"
    if base == "uint32":
        return f"{value}u"
    return f"(({_SCALAR[base]}){value})"


class CTypes:
    """Typedefs and helper functions of one C file, each written once, in first-use order.

    Example:
        >>> t = CTypes()
        >>> t.ctype("float32x16")
        'kiln_f32x16'
    """

    def __init__(self):
        self.definitions: dict[str, str] = {}

    def define(self, name: str, text: str) -> str:
        if name not in self.definitions:
            self.definitions[name] = text
        return name

    def ctype(self, dtype: str) -> str:
        base, lanes = dt.parse(dtype)
        if lanes == 1:
            return _SCALAR[base]
        if base == "bool":
            return self.ctype(mask_dtype(lanes))
        if lanes & (lanes - 1):
            raise ValueError(f"the C back-end supports vectors of 2, 4, 8, ... lanes, not {dtype}")
        name = f"kiln_{_SHORT[base]}x{lanes}"
        size = lanes * dt.bytes_of(base)
        return self.define(name, f"typedef {_SCALAR[base]} {name} "
                                 f"__attribute__((vector_size({size})));")

    def memory_ctype(self, dtype: str) -> str:
        return _SCALAR[memory_dtype(dtype)]

    def text(self) -> str:
        return "\n".join(self.definitions.values())

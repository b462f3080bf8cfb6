"""How kiln writes a tensor's type and a size in bytes for people: one style everywhere (the
CLI, reprs, drawings, error messages), here so the runtime can use it without the compiler.

Example:
    >>> tensor_text("float32", (1, 3, 224, 224)), byte_text(1_234_567)
    ('float32[1x3x224x224]', '1.2 MB')
"""
from __future__ import annotations

# Decimal units, largest first; below the last one sizes are whole bytes.
_BYTE_UNITS = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def tensor_text(dtype, shape) -> str:
    """dtype and shape as "float32[1x3x224x224]" ("float32[scalar]" for no dimensions).
    `dtype` is anything whose str() is its name (a string, a numpy dtype).

    Example:
        >>> tensor_text("int64", (1, 16)), tensor_text("float32", ())
        ('int64[1x16]', 'float32[scalar]')
    """
    dims = "x".join(str(d) for d in shape) if len(shape) else "scalar"
    return f"{dtype}[{dims}]"


def byte_text(n: int) -> str:
    """A number of bytes for humans: "512 B", "3.4 kB", "1.2 MB", "2.0 GB".

    Example:
        >>> byte_text(999), byte_text(25_600)
        ('999 B', '25.6 kB')
    """
    for unit, size in _BYTE_UNITS:
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"

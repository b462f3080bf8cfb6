"""kiln.build: lower (if needed) and compile to a runtime Module for a target."""
from __future__ import annotations

from ..tir.function import PrimFunc
from .lower import lower


def build(sch_or_func, args=None, target="llvm", name: str = "default_function"):
    """Compile a schedule (with its arguments) or a PrimFunc into a callable module.

    Example:
        >>> f = kiln.build(s, [A, B, C], target="llvm")  # doctest: +SKIP
        >>> f(a, b, c)                                    # numpy arrays or kiln NDArrays
    """
    from ..codegen import build_module
    funcs = sch_or_func if isinstance(sch_or_func, (list, tuple)) else [sch_or_func]
    lowered = []
    for f in funcs:
        if isinstance(f, PrimFunc):
            lowered.append(f)
        else:
            if args is None:
                raise TypeError("kiln.build of a schedule needs its argument list: build(s, [A, B, C])")
            lowered.append(lower(f, args, name=name, target=target))
    return build_module(lowered, target, entry=lowered[0].name)

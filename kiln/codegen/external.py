"""External code generators (TVM's "bring your own codegen"): a registry from compiler name to
the function that turns a partitioned region into an external runtime module.

After partitioning (kiln.graph.transform.partition_graph), each region is a global function of
the graph module with attrs {"Compiler": NAME, "global_symbol": SYMBOL}. kiln.compile gives it
to NAME's codegen, which returns a kiln.runtime.external.ExternalModule holding a function
SYMBOL: its parameters the region's inputs, then its outputs, every one a buffer of the
region's shapes. `bind_constants` tells partitioning whether the target wants the region's
constants inside its function (True: the codegen sees them, e.g. to pack weights) or passed in.

Example:
    >>> register_external_codegen("vdla", vdla_codegen)                    # doctest: +SKIP
    >>> lib = kiln.compile(partition_for_vdla(mod, params))                # doctest: +SKIP
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from ..graph.ty import TensorType, TupleType

__all__ = ["ExternalCodegen", "ExternalCodegenError", "register_external_codegen",
           "external_codegen", "bind_constants_of", "build_external"]


class ExternalCodegenError(ValueError):
    """An external codegen that is missing, fails, or returns a module that does not fit the
    region it was given."""


@dataclass(frozen=True)
class ExternalCodegen:
    name: str
    codegen: Callable          # (function, symbol, target) -> ExternalModule
    bind_constants: bool = True


_CODEGENS: dict[str, ExternalCodegen] = {}
# kiln's own external targets, registered when their module is imported (on first use)
_BUILTIN = {"vdla": "kiln.accel.vdla.external", "onnxruntime": "kiln.fallback.onnxruntime"}


def register_external_codegen(name: str, codegen: Callable, bind_constants: bool = True,
                              override: bool = False) -> None:
    """Make `codegen(function, symbol, target) -> ExternalModule` the compiler of regions
    partitioned for `name`.

    Example:
        >>> register_external_codegen("my_npu", my_codegen, bind_constants=False)  # doctest: +SKIP
    """
    if name in _CODEGENS and _CODEGENS[name].codegen is not codegen and not override:
        raise ValueError(f"external codegen {name!r} is already registered")
    _CODEGENS[name] = ExternalCodegen(name, codegen, bool(bind_constants))


def external_codegen(name: str) -> ExternalCodegen:
    """The codegen registered for compiler `name` (an ExternalCodegenError naming the
    registered ones if none).

    Example:
        >>> external_codegen("vdla").bind_constants                          # doctest: +SKIP
        True
    """
    if name not in _CODEGENS and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    try:
        return _CODEGENS[name]
    except KeyError:
        raise ExternalCodegenError(
            f"no external codegen is registered for compiler {name!r}; registered: "
            f"{', '.join(sorted(_CODEGENS)) or 'none'} (register_external_codegen)") from None


def bind_constants_of(name: str) -> bool:
    """Whether compiler `name` wants its regions' constants bound inside (partition_graph's
    bind_constants callable).

    Example:
        >>> partition_graph(mod, bind_constants=bind_constants_of)         # doctest: +SKIP
    """
    return external_codegen(name).bind_constants


def tensor_types(ty) -> list:
    """The tensor types a region's value holds: a tuple's fields, or the one type.

    Example:
        >>> tensor_types(func.body.checked_type)   # doctest: +SKIP
        [Tensor[(1, 8), float32]]
    """
    return list(ty.fields) if isinstance(ty, TupleType) else [ty]


def build_external(functions: dict, target) -> list:
    """The external modules of partitioned functions ({symbol: graph Function with a
    "Compiler" attr}), each checked against its region: one function named by the symbol,
    taking the region's inputs then outputs, shapes and dtypes equal.

    Example:
        >>> [m.type_key for m in build_external({"vdla_main_0": f}, target)]  # doctest: +SKIP
        ['vdla']
    """
    modules = []
    for symbol, func in functions.items():
        compiler = func.attrs.get("Compiler")
        entry = external_codegen(compiler)
        try:
            module = entry.codegen(func, symbol, target)
        except ExternalCodegenError:
            raise
        except Exception as err:       # a codegen's own error: say which region and compiler
            raise ExternalCodegenError(f"external codegen {compiler!r} failed on {symbol}: "
                                       f"{type(err).__name__}: {err}") from err
        if symbol not in module.function_names():
            raise ExternalCodegenError(f"external codegen {compiler!r} returned a module without "
                                       f"function {symbol!r} (it has "
                                       f"{module.function_names()})")
        want = [t for p in func.params for t in tensor_types(p.checked_type)] + \
            tensor_types(func.ret_type)
        info = module.function_info(symbol)
        got = info.params
        if info.shape_vars or any(p.kind != "buffer" for p in got):
            raise ExternalCodegenError(f"external codegen {compiler!r}: function {symbol} must "
                                       f"take only buffers of fixed shapes, not "
                                       f"{info.signature()}")
        if [(tuple(t.shape), t.dtype) for t in want if isinstance(t, TensorType)] != \
                [(tuple(p.shape), p.dtype) for p in got] or len(want) != len(got):
            raise ExternalCodegenError(
                f"external codegen {compiler!r}: function {symbol} takes "
                f"{[f'{p.dtype}{list(p.shape)}' for p in got]}, but its region's inputs and "
                f"outputs are {[repr(t) for t in want]}")
        modules.append(module)
    return modules

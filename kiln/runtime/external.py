"""External runtime modules: functions that another compiler made for a partitioned region of
a model (TVM's "bring your own codegen"), run by the graph executor beside kiln's kernels.

An external module has the interface of TVM's runtime modules: functions by name, each with a
signature (every parameter a buffer: the region's inputs, read-only, then its outputs, which
never share memory with the inputs: the memory plan frees a call's inputs only after placing
its outputs), and
save_to_bytes / a loader registered per type key, so that an exported library carries it and
load_module rebuilds it in a fresh process. The graph executor calls an external function as
it calls a kernel, through the native calling convention (function_info.py): a trampoline
turns the argument array back into numpy arrays over the executor's own buffers (no copies)
and calls the Python function; an exception becomes a non-zero status whose message names it.

Example:
    >>> class Doubler(ExternalModule):                                    # doctest: +SKIP
    ...     type_key = "doubler"
    ...     def get_function(self, name): return lambda x, y: np.multiply(x, 2, out=y)
    >>> register_external_runtime("doubler", Doubler.load_from_bytes)     # doctest: +SKIP
"""
from __future__ import annotations

import base64
import ctypes
import importlib
import threading
from typing import Callable

import numpy as np

from .function_info import FunctionInfo
from .model import ModelError
from .module import Module

RAISED = 0x4b58           # the status an external function returns when its Python code raised
_NATIVE_SIGNATURE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)


class ExternalModule:
    """Base class of external runtime modules. A subclass sets `type_key` and implements
    function_names, function_info, get_function (a callable taking numpy arrays: the inputs,
    then the outputs to fill) and save_to_bytes; `load_from_bytes` (a static method) is what
    register_external_runtime registers for the type key.

    Example:
        >>> mod.get_function("vdla_main_0")(x, y)                         # doctest: +SKIP
    """

    type_key = "external"

    def function_names(self) -> list[str]:
        raise NotImplementedError

    def function_info(self, name: str) -> FunctionInfo:
        raise NotImplementedError

    def get_function(self, name: str) -> Callable:
        raise NotImplementedError

    def save_to_bytes(self) -> bytes:
        raise NotImplementedError

    @staticmethod
    def load_from_bytes(data: bytes) -> "ExternalModule":
        raise NotImplementedError


# type key -> loader(bytes) -> ExternalModule
_LOADERS: dict[str, Callable] = {}


def register_external_runtime(type_key: str, loader: Callable, override: bool = False) -> None:
    """Make `loader(bytes) -> ExternalModule` the way to rebuild saved external modules of
    `type_key` (load_module looks it up).

    Example:
        >>> register_external_runtime("vdla", VDLAExternalModule.load_from_bytes)  # doctest: +SKIP
    """
    if type_key in _LOADERS and _LOADERS[type_key] is not loader and not override:
        raise ValueError(f"external runtime {type_key!r} is already registered")
    _LOADERS[type_key] = loader


def save_external(module: ExternalModule) -> dict:
    """An external module as JSON-able data for an execution graph: its type key, the class
    that registers its loader, and its bytes.

    Example:
        >>> save_external(mod)["type_key"]                                # doctest: +SKIP
        'vdla'
    """
    data = module.save_to_bytes()
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"external module {module.type_key!r}: save_to_bytes returned "
                        f"{type(data).__name__}, not bytes")
    return {"type_key": module.type_key, "provider": type(module).__module__,
            "data": base64.b64encode(data).decode("ascii")}


def load_external(saved: dict, where: str = "the model") -> ExternalModule:
    """The external module save_external described. Its loader is the registered one; a
    module of kiln's own (provider under "kiln.") is imported to register it. A type key with
    no loader is a ModelError naming it.

    Example:
        >>> load_external(save_external(mod)).function_names()             # doctest: +SKIP
        ['vdla_main_0']
    """
    try:
        type_key, provider, data = saved["type_key"], saved["provider"], saved["data"]
    except (KeyError, TypeError):
        type_key = provider = data = None
    if not all(isinstance(v, str) for v in (type_key, provider, data)):
        raise ModelError(f"{where}: malformed external module entry {str(saved)[:80]!r}")
    if type_key not in _LOADERS and (provider == "kiln" or provider.startswith("kiln.")):
        try:
            importlib.import_module(provider)
        except ImportError as err:
            raise ModelError(f"{where} needs external runtime {type_key!r}, whose module "
                             f"{provider} cannot be imported: {err}") from None
    loader = _LOADERS.get(type_key)
    if loader is None:
        raise ModelError(f"{where} needs external runtime {type_key!r} (from {provider}), which "
                         f"is not registered: import the module that registers it "
                         f"(register_external_runtime) before loading")
    try:
        return loader(base64.b64decode(data, validate=True))
    except ModelError:
        raise
    except Exception as err:       # a loader's own error, whatever its type: name the module
        raise ModelError(f"{where}: external module of {type_key!r} does not load "
                         f"({type(err).__name__}: {err})") from err


class _Trampoline:
    """A native-callable function over a Python one: the argument array's buffer addresses
    become numpy arrays of the signature's shapes, the first `num_inputs` read-only (they may
    be a loaded library's constants, in read-only pages, or weights every thread shares)."""

    def __init__(self, info: FunctionInfo, fn: Callable, num_inputs: int):
        for p in info.params:
            if p.kind != "buffer" or any(isinstance(d, str) for d in p.shape):
                raise ValueError(f"external function {info.name!r}: parameter {p.name!r} must "
                                 f"be a buffer of fixed shape")
        self.info, self.fn, self.num_inputs = info, fn, num_inputs
        self.layouts = [(np.dtype(p.dtype), tuple(p.shape)) for p in info.params]
        self.errors = threading.local()
        self.native = _NATIVE_SIGNATURE(self._call)
        self.address = ctypes.cast(self.native, ctypes.c_void_p).value

    def _call(self, values, num_values) -> int:
        try:
            addresses = (ctypes.c_void_p * num_values).from_address(values)
            arrays = []
            for k, (address, (dtype, shape)) in enumerate(zip(addresses, self.layouts)):
                count = int(np.prod(shape, dtype=np.int64))
                raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(address)
                array = np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)
                array.flags.writeable = k >= self.num_inputs
                arrays.append(array)
            self.fn(*arrays)
            return 0
        except BaseException as err:    # noqa: BLE001 (nothing may unwind into native code)
            self.errors.last = err      # formatted later, outside the callback
            return RAISED

    def message(self, status: int):
        if status != RAISED:
            return None
        err = getattr(self.errors, "last", None)
        try:
            text = f"{type(err).__name__}: {err}"
        except Exception:               # noqa: BLE001 (an exception whose str() fails)
            text = type(err).__name__
        return f"the external function raised {text}"


class _WithExternal(Module):
    """kiln's kernels module (or none) and external functions, as one Module: an external
    function's address is its trampoline's. `num_inputs` gives each external function's count
    of inputs (the execution graph's), the rest of its parameters being outputs."""

    def __init__(self, kernels: Module | None, externals: list, num_inputs: dict):
        self.kernels, self.externals = kernels, list(externals)
        self.trampolines = {}
        infos = {}
        for mod in self.externals:
            for name in mod.function_names():
                if name in infos:
                    raise ModelError(f"two external modules define function {name!r}")
                info = mod.function_info(name)
                self.trampolines[name] = _Trampoline(info, mod.get_function(name),
                                                     num_inputs.get(name, len(info.params)))
                infos[name] = info
        if kernels is not None:
            clash = sorted(set(infos) & set(kernels.function_names()))
            if clash:
                raise ModelError(f"external functions {clash} have the names of kiln kernels")
            infos.update({n: kernels.function_info(n) for n in kernels.function_names()})
        super().__init__(infos, self._address, keepalive=(kernels, self.trampolines),
                         type_key="with_external")

    def _address(self, name: str) -> int:
        t = self.trampolines.get(name)
        return t.address if t is not None else self.kernels._get_address(name)

    def _status_messages_of(self, name: str):
        t = self.trampolines.get(name)
        return t.message if t is not None else self.kernels._status_messages_of(name)

    def get_source(self, fmt: str = "") -> str:
        if self.kernels is None:
            raise ValueError("this module has only external functions, no kiln source")
        return self.kernels.get_source(fmt)

    def source_formats(self) -> list[str]:
        return self.kernels.source_formats() if self.kernels is not None else []


def with_external(kernels: Module | None, externals: list, num_inputs: dict) -> Module:
    """One Module of kiln's kernels and the functions of external modules (`num_inputs`: how
    many of each one's parameters are inputs, from the execution graph), for the graph
    executor: the kernels module itself when there are no external modules.

    Example:
        >>> lib_module = with_external(kernels, [vdla_mod], {"vdla_main_0": 1})  # doctest: +SKIP
    """
    if not externals:
        return kernels
    return _WithExternal(kernels, externals, num_inputs)


def kernels_of(module):
    """kiln's own kernels module inside `module` (None when the model has only external
    functions): what export_library links.

    Example:
        >>> kernels_of(lib.module).object_codes                             # doctest: +SKIP
    """
    return module.kernels if isinstance(module, _WithExternal) else module


def external_modules(lib) -> list:
    """The external modules of a compiled or loaded model (empty when it has none).

    Example:
        >>> [m.type_key for m in external_modules(lib)]                     # doctest: +SKIP
        ['vdla']
    """
    module = lib.module
    return list(module.externals) if isinstance(module, _WithExternal) else []

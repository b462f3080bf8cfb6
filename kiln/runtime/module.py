"""Module: the result of compiling — native functions by name, their signatures and sources."""
from __future__ import annotations

from typing import Callable

from .device import as_device, require_cpu
from .function_info import FunctionInfo
from .packed_func import PackedFunction
from .timing import time_evaluator


class FunctionNotFoundError(KeyError):
    """The module has no function of the requested name."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class Module:
    """Compiled functions looked up by name; calling the module calls its entry function.

    `get_address(name)` returns a function's native address (the JIT or a loaded library
    answers it); `keepalive` holds whatever owns the code (JIT engine, CDLL) for as long as the
    module or any function taken from it lives. `sources` maps a format ("ll", "c", "asm", ...)
    to text, the main source first. `status_messages` (a dict or a function from status code
    to text) explains the non-zero statuses generated checks return.

    Example:
        >>> mod = Module({"vadd": info}, lib_address, {"c": source}, "vadd", lib)  # doctest: +SKIP
        >>> mod(a, b, c)                                                        # doctest: +SKIP
    """

    def __init__(self, functions: dict[str, FunctionInfo], get_address: Callable[[str], int],
                 sources: dict[str, str] | None = None, entry: str | None = None,
                 keepalive=None, type_key: str = "llvm", status_messages=None):
        for name, info in functions.items():
            if not isinstance(info, FunctionInfo):
                raise TypeError(f"Module: functions[{name!r}] must be a FunctionInfo, got "
                                f"{type(info).__name__}")
            if info.name != name:
                raise ValueError(f"Module: functions[{name!r}] describes a function named "
                                 f"{info.name!r}")
        if entry is not None and entry not in functions:
            raise ValueError(f"Module: entry function {entry!r} is not among "
                             f"{sorted(functions)}")
        self._infos = dict(functions)
        self._get_address = get_address
        self._sources = dict(sources or {})
        self.entry = entry
        self.keepalive = keepalive
        self.type_key = type_key
        self.status_messages = status_messages
        self._cache: dict[str, PackedFunction] = {}

    # ------------------------------------------------------------------ functions
    def function_names(self) -> list[str]:
        """Names of the functions, in the order the code generator gave them.

        Example:
            >>> mod.function_names()   # doctest: +SKIP
            ['vadd']
        """
        return list(self._infos)

    def function_info(self, name: str) -> FunctionInfo:
        """The signature of function `name`."""
        self._require(name)
        return self._infos[name]

    def get_function(self, name: str) -> PackedFunction:
        """The function `name`, ready to call with arrays and numbers.

        Example:
            >>> mod.get_function("vadd")(a, b, c)   # doctest: +SKIP
        """
        func = self._cache.get(name)
        if func is None:
            self._require(name)
            address = self._get_address(name)
            if not address:
                raise RuntimeError(f"module ({self.type_key}) has no native code for function "
                                   f"{name!r} (its address is {address!r})")
            func = PackedFunction(self._infos[name], int(address), owner=self,
                                  status_messages=self._status_messages_of(name))
            self._cache[name] = func
        return func

    __getitem__ = get_function

    def _status_messages_of(self, name: str):
        """What explains the statuses of function `name` (modules with a table per function
        override this)."""
        return self.status_messages

    def __contains__(self, name) -> bool:
        return name in self._infos

    def __call__(self, *args):
        if self.entry is None:
            raise RuntimeError(f"this module has no entry function; call one of "
                               f"{self.function_names()} by name (mod['name'](...))")
        return self.get_function(self.entry)(*args)

    def _require(self, name):
        if name not in self._infos:
            raise FunctionNotFoundError(f"module has no function {name!r}; it has "
                                 f"{', '.join(self._infos) or 'none'}")

    # ------------------------------------------------------------------ sources and timing
    def get_source(self, fmt: str = "") -> str:
        """The module's main source for fmt "" (LLVM IR or C), else the source of format `fmt`.

        Example:
            >>> mod.get_source("c")[:8]   # doctest: +SKIP
            '#include'
        """
        if fmt == "" and self._sources:
            return next(iter(self._sources.values()))
        if fmt not in self._sources:
            available = ", ".join(repr(k) for k in self._sources) or "none"
            raise ValueError(f"module ({self.type_key}) has no source in format {fmt!r}; "
                             f"available: {available}")
        return self._sources[fmt]

    def source_formats(self) -> list[str]:
        """Formats get_source accepts, the main one first."""
        return list(self._sources)

    def time_evaluator(self, name: str, device=None, number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0, cache_flush: bool = False):
        """A callable timing function `name`: f(*args) -> TimingResult (seconds per call);
        the options are kiln.runtime.time_evaluator's.

        Example:
            >>> timer = mod.time_evaluator("vadd", number=100, repeat=3)   # doctest: +SKIP
            >>> timer(a, b, c).mean                                         # doctest: +SKIP
        """
        require_cpu(as_device(device), "time_evaluator")
        return time_evaluator(self.get_function(name), number, repeat, min_repeat_ms,
                              cache_flush)

    def __repr__(self):
        names = self.function_names()
        # a model's kernels module holds dozens of functions: name a few, count the rest
        shown = ", ".join(names[:4]) + (f", ... {len(names) - 4} more" if len(names) > 4 else "")
        sources = ", ".join(self._sources) or "none"
        return (f"<kiln.runtime.Module {self.type_key}: {len(names)} functions ({shown}); "
                f"entry {self.entry!r}; sources: {sources}>")

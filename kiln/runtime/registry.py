"""The global function registry: Python callables looked up by name across kiln.

Compiler passes, code generators and the runtime find hooks here ("kiln.codegen.llvm.build",
callbacks for the tuner, ...) without importing each other.
"""
from __future__ import annotations

import difflib
import threading
from typing import Callable

_functions: dict[str, Callable] = {}
_lock = threading.Lock()


class GlobalFuncNotFound(KeyError):
    """No function is registered under the requested name."""

    def __str__(self):
        # KeyError quotes its message; print it as a sentence instead.
        return str(self.args[0]) if self.args else ""


def register_func(name, f=None, override: bool = False):
    """Register `f` under `name`; without `f`, return a decorator.

    A bare `@register_func` registers the function under its own `__name__`. Registering a
    name twice raises unless `override=True`.

    Example:
        >>> @register_func("demo.add_one", override=True)
        ... def add_one(x):
        ...     return x + 1
        >>> get_global_func("demo.add_one")(1)
        2
    """
    if callable(name) and f is None:
        return register_func(name.__name__, name, override)
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_func: the name must be a non-empty string, got {name!r}")

    def register(func):
        if not callable(func):
            raise TypeError(f"register_func({name!r}): {func!r} is not callable")
        with _lock:
            if name in _functions and not override:
                raise ValueError(f"global function {name!r} is already registered "
                                 f"(to {_functions[name]!r}); pass override=True to replace it")
            _functions[name] = func
        return func

    return register if f is None else register(f)


def get_global_func(name: str, allow_missing: bool = False):
    """The function registered under `name` (None when missing and `allow_missing`).

    Example:
        >>> get_global_func("no.such.function", allow_missing=True) is None
        True
    """
    func = _functions.get(name)
    if func is None and not allow_missing:
        close = difflib.get_close_matches(name, list(_functions), n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise GlobalFuncNotFound(f"no global function named {name!r} is registered{hint}")
    return func


def list_global_func_names() -> list[str]:
    """Names of all registered functions, sorted.

    Example:
        >>> isinstance(list_global_func_names(), list)
        True
    """
    with _lock:
        return sorted(_functions)


def remove_global_func(name: str) -> None:
    """Unregister `name` (a missing name raises GlobalFuncNotFound).

    Example:
        >>> _ = register_func("demo.tmp", print, override=True)
        >>> remove_global_func("demo.tmp")
    """
    with _lock:
        if _functions.pop(name, None) is None:
            raise GlobalFuncNotFound(f"no global function named {name!r} is registered")

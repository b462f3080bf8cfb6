"""IRModule: named graph functions, with `main` as the entry point."""
from __future__ import annotations

from .expr import Function


class IRModule:
    """A collection of functions by name.

    Example:
        >>> mod = IRModule({"main": Function([x], call("nn.relu", x))})  # doctest: +SKIP
        >>> mod["main"]
    """

    def __init__(self, functions=None):
        self._functions: dict = {}
        for name, f in dict(functions or {}).items():
            self[name] = f

    @staticmethod
    def from_expr(func: Function) -> "IRModule":
        return IRModule({"main": func})

    def __getitem__(self, name: str) -> Function:
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(f"module has no function {name!r}; it has {sorted(self._functions)}") from None

    def __setitem__(self, name: str, func: Function):
        if not isinstance(func, Function):
            raise TypeError(f"module entries are graph Functions, got {type(func).__name__}")
        self._functions[name] = func

    def __contains__(self, name):
        return name in self._functions

    def __iter__(self):
        return iter(self._functions)

    def items(self):
        return self._functions.items()

    def with_function(self, name: str, func: Function) -> "IRModule":
        """A copy of this module with one function replaced (passes return new modules)."""
        out = IRModule(self._functions)
        out[name] = func
        return out

    def __repr__(self):
        from .printer import to_text
        return "\n".join(f"def @{name}{to_text(f)[2:]}" for name, f in self._functions.items())

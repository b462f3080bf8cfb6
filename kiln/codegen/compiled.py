"""The runtime Module both back-ends return, with sources made on demand and the table of
assertion messages.

Assembly costs a second code generation pass, so it is produced only when asked for.
"""
from __future__ import annotations

from typing import Callable

from ..runtime import Module
from .common import ErrorTable


class CompiledModule(Module):
    """A kiln.runtime.Module whose costly source formats are computed on first request.

    Example:
        >>> mod = build_module([f], "llvm")     # doctest: +SKIP
        >>> "vfmadd" in mod.get_source("asm")   # doctest: +SKIP
        True
    """

    def __init__(self, functions, get_address, sources, entry, keepalive, type_key,
                 lazy_sources: dict[str, Callable[[], str]] | None = None,
                 errors: ErrorTable | None = None):
        super().__init__(functions, get_address, sources, entry, keepalive, type_key)
        self._lazy_sources = dict(lazy_sources or {})
        self._made: dict[str, str] = {}
        self.errors = errors or ErrorTable()

    def get_source(self, fmt: str = "") -> str:
        make = self._lazy_sources.get(fmt)
        if make is None:
            return super().get_source(fmt)
        text = self._made.get(fmt)
        if text is None:
            text = self._made[fmt] = make()
        return text

    def source_formats(self) -> list[str]:
        return super().source_formats() + list(self._lazy_sources)

    def error_message(self, status: int) -> str | None:
        """The failed check behind a non-zero status returned by a function of this module.

        Example:
            >>> mod.error_message(1)   # doctest: +SKIP
            "f: assertion `n > 0` failed: n must be positive"
        """
        return self.errors.message(status)

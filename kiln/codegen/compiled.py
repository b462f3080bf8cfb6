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
                 errors: "ErrorTable | dict | None" = None):
        super().__init__(functions, get_address, sources, entry, keepalive, type_key)
        self._lazy_sources = dict(lazy_sources or {})
        self._made: dict[str, str] = {}
        # One table per function: objects compiled apart number their checks apart.
        if not isinstance(errors, dict):
            errors = {name: errors or ErrorTable() for name in functions}
        self.errors_of = errors
        self.object_codes: list[bytes] = []
        self.symbol_aliases: dict[str, str] = {}

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

    def error_message(self, status: int, function: str | None = None) -> str | None:
        """The failed check behind a non-zero status returned by `function` (default: the
        entry function) of this module.

        Example:
            >>> mod.error_message(1)   # doctest: +SKIP
            "f: assertion `n > 0` failed: n must be positive"
        """
        table = self.errors_of.get(function or self.entry)
        return table.message(status) if table is not None else None

    def _status_messages_of(self, name: str):
        table = self.errors_of.get(name)
        return table.message if table is not None else None

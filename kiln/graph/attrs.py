"""Operator attributes: an immutable, hashable mapping with attribute access."""
from __future__ import annotations

from collections.abc import Mapping


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return Attrs(value)
    try:
        import numpy as np
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return _freeze(value.tolist())
    except ImportError:  # pragma: no cover
        pass
    return value


class Attrs(Mapping):
    """Immutable attributes of a call: attrs["strides"] or attrs.strides.

    Example:
        >>> a = Attrs({"strides": [2, 2]})
        >>> a.strides
        (2, 2)
    """

    __slots__ = ("_items", "_hash")

    def __init__(self, items=None):
        items = {k: _freeze(v) for k, v in dict(items or {}).items()}
        object.__setattr__(self, "_items", items)
        object.__setattr__(self, "_hash", None)

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __getattr__(self, key):
        try:
            return self._items[key]
        except KeyError:
            raise AttributeError(f"no attribute {key!r}; attributes: {sorted(self._items)}") from None

    def __setattr__(self, key, value):
        raise AttributeError("attributes are immutable; use .with_(...)")

    def __hash__(self):
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(tuple(sorted((k, _hashable(v)) for k, v in self._items.items()))))
        return self._hash

    def __eq__(self, other):
        return isinstance(other, Attrs) and self._items == other._items

    def with_(self, **changes) -> "Attrs":
        return Attrs({**self._items, **changes})

    def __repr__(self):
        return ", ".join(f"{k}={_text(v)}" for k, v in self._items.items())


def _hashable(v):
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


def _text(v):
    if isinstance(v, tuple):
        return "[" + ", ".join(_text(x) for x in v) + "]"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)

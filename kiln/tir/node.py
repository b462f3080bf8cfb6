"""Base class of every loop-level IR node: immutable and hash-consed.

Building the same node twice returns the same object, so structural equality is identity
(`a is b`), hashing is by identity, and memoizing a pass on nodes is a plain dict.
Variables and buffers are the exception: each construction makes a new, distinct object.
"""
from __future__ import annotations

import weakref

_interned: "weakref.WeakValueDictionary[tuple, Node]" = weakref.WeakValueDictionary()


class Node:
    """An immutable IR node; subclasses list their fields in `_fields`.

    Example:
        >>> from kiln.tir.expr import IntImm
        >>> IntImm("int32", 3) is IntImm("int32", 3)
        True
    """

    __slots__ = ("__weakref__",)
    _fields: tuple[str, ...] = ()

    def __new__(cls, *args):
        return cls._intern((cls, *args), args)

    @classmethod
    def _intern(cls, key, args):
        node = _interned.get(key)
        if node is None:
            node = object.__new__(cls)
            for name, value in zip(cls._fields, args):
                object.__setattr__(node, name, value)
            _interned[key] = node
        return node

    @classmethod
    def _fresh(cls, args):
        node = object.__new__(cls)
        for name, value in zip(cls._fields, args):
            object.__setattr__(node, name, value)
        return node

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable; build a new node instead")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is immutable")

    __hash__ = object.__hash__

    def same_as(self, other) -> bool:
        return self is other

    def fields(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields)

    def replace(self, **changes):
        """A copy of this node with some fields changed (a new interned node)."""
        values = [changes.pop(f, getattr(self, f)) for f in self._fields]
        if changes:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(changes)}")
        return type(self)(*values)

    def __reduce__(self):
        raise TypeError("kiln IR nodes are not pickled; print them or serialize through JSON")

    def __repr__(self):
        from .printer import to_text

        return to_text(self)

    __str__ = __repr__

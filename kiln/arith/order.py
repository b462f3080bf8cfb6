"""A total, process-stable order on expressions, so that canonical forms sort their terms.

Variables are distinct objects that may share a name; they sort by name, then by the order in
which arith first met them (a sequence number kept per live variable, never reused).
"""
from __future__ import annotations

import itertools
import weakref

from ..tir.buffer import Buffer
from ..tir.expr import Var
from ..tir.node import Node

_counter = itertools.count()
_seq: dict[int, tuple] = {}   # id(obj) -> (weakref, seq); the weakref's callback drops the entry
_keys: dict = {}              # node -> key (strong; cleared when it grows too large)
_KEYS_LIMIT = 50_000


def _seq_of(obj) -> int:
    entry = _seq.get(id(obj))
    if entry is not None and entry[0]() is obj:
        return entry[1]
    ident = id(obj)
    ref = weakref.ref(obj, lambda _r, ident=ident: _seq.pop(ident, None))
    number = next(_counter)
    _seq[ident] = (ref, number)
    return number


def order_key(x) -> tuple:
    """A sortable key of an expression (or any field value of one).

    Example:
        >>> from kiln.tir import Var
        >>> a, b = Var("a"), Var("b")
        >>> order_key(a) < order_key(b)
        True
    """
    if isinstance(x, Var):
        return (0, x.name, _seq_of(x))
    if isinstance(x, Buffer):
        return (2, x.name, _seq_of(x))
    if isinstance(x, Node):
        key = _keys.get(x)
        if key is None:
            key = (1, type(x).__name__, tuple(order_key(getattr(x, f)) for f in x._fields))
            if len(_keys) > _KEYS_LIMIT:
                _keys.clear()
            _keys[x] = key
        return key
    if isinstance(x, tuple):
        return (3, "tuple", tuple(order_key(v) for v in x))
    if isinstance(x, bool) or isinstance(x, int):
        return (4, "int", int(x))
    if isinstance(x, float):
        return (5, "float", x)
    return (9, type(x).__name__, str(x))

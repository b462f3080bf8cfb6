"""The operator registry: every graph operator is defined once, with all of its facts.

An operator records its name, its attributes and their defaults, its type relation (shape
inference), its fusion pattern, its compute (kiln.topi tensor expressions) and its schedule per
target. Frontends build calls with `call("nn.relu", x)`; passes and the compiler look the rest
up here. Adding an operator is one `register_op` call (see docs/add_operator.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Callable

from .attrs import Attrs
from .expr import Call, GraphTypeError


class OpPattern(IntEnum):
    """Fusion patterns, ordered as in TVM: a group's pattern is the max of its members'."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4     # e.g. conv2d, dense: elementwise ops after it fuse into it
    TUPLE = 7
    OPAQUE = 8


class AttrError(ValueError):
    """An unknown or ill-formed operator attribute."""


_REQUIRED = object()


@dataclass(eq=False)
class Op:
    """A registered operator. Call `infer_type` through Call construction, not directly."""

    name: str
    type_rel: Callable
    pattern: OpPattern
    num_inputs: int | None = None          # None: variadic
    attrs: dict = field(default_factory=dict)   # name -> default (REQUIRED for mandatory)
    compute: Callable | None = None        # (attrs, inputs: list[te.Tensor], out_type) -> list[te.Tensor]
    schedules: dict = field(default_factory=dict)   # target key -> fn(attrs, outs, target)
    doc: str = ""
    # Facts other parts of kiln attach later (register_op_attr), e.g. "target.dnnl" -> the
    # predicate saying which calls an external code generator supports.
    extra_attrs: dict = field(default_factory=dict)

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return self.name

    def normalize_attrs(self, given: dict, span=None) -> Attrs:
        unknown = sorted(set(given) - set(self.attrs))
        if unknown:
            raise AttrError(f"{self.name}{_where(span)}: unknown attribute(s) {unknown}; "
                            f"known: {sorted(self.attrs)}")
        out = {}
        for k, default in self.attrs.items():
            if k in given:
                out[k] = given[k]
            elif default is _REQUIRED:
                raise AttrError(f"{self.name}{_where(span)}: attribute {k!r} is required")
            else:
                out[k] = default
        return Attrs(out)

    def get_attr(self, key: str, default=None):
        """The value register_op_attr gave `key` for this op, else default.

        Example:
            >>> get_op("nn.relu").get_attr("target.dnnl") is None   # doctest: +SKIP
            True
        """
        return self.extra_attrs.get(key, default)

    def infer_type(self, args, attrs, span=None):
        if self.num_inputs is not None and len(args) != self.num_inputs:
            raise GraphTypeError(f"{self.name}{_where(span)} takes {self.num_inputs} inputs, "
                                 f"got {len(args)}")
        types = [a.checked_type for a in args]
        try:
            return self.type_rel(types, attrs)
        except GraphTypeError as err:
            raise GraphTypeError(f"{self.name}{_where(span)}: {err} (input types: "
                                 f"{', '.join(map(repr, types))})") from None


REQUIRED = _REQUIRED
_REGISTRY: dict[str, Op] = {}


def _where(span) -> str:
    return f" at {span}" if span else ""


def register_op(name: str, *, type_rel, pattern, num_inputs=None, attrs=None, compute=None,
                schedules=None, doc: str = "") -> Op:
    """Define an operator once.

    Example:
        >>> register_op("example.identity", type_rel=lambda ts, a: ts[0],
        ...             pattern=OpPattern.ELEMWISE, num_inputs=1)   # doctest: +SKIP
    """
    if name in _REGISTRY:
        raise ValueError(f"operator {name!r} is already registered")
    op = Op(name, type_rel, OpPattern(pattern), num_inputs, dict(attrs or {}), compute,
            dict(schedules or {}), doc)
    _REGISTRY[name] = op
    return op


_NO_VALUE = object()


def register_op_attr(op_name: str, key: str, value=_NO_VALUE, override: bool = False):
    """Attach a fact to a registered operator under `key` (read back with Op.get_attr). For
    "bring your own codegen" the key is "target.NAME" and the value a predicate
    fn(call) -> bool saying whether that code generator supports the call (it may look at the
    call's attrs, argument types and argument expressions). Registering a key twice for one op
    is an error unless override=True. Without a value it is a decorator.

    Example:
        >>> @register_op_attr("nn.conv2d", "target.dnnl")      # doctest: +SKIP
        ... def _conv2d(call):
        ...     return call.attrs.groups == 1
    """
    if value is _NO_VALUE:
        def decorate(fn):
            register_op_attr(op_name, key, fn, override)
            return fn
        return decorate
    if not isinstance(key, str) or not key:
        raise ValueError(f"operator attribute keys are non-empty strings, got {key!r}")
    op = get_op(op_name)
    if key in op.extra_attrs and not override:
        raise ValueError(f"operator {op_name!r} already has attribute {key!r} "
                         f"({op.extra_attrs[key]!r}); pass override=True to replace it")
    op.extra_attrs[key] = value
    return value


def reset_op_attr(op_name: str, key: str) -> None:
    """Remove `key` from an operator's registered attributes (nothing if it has none).

    Example:
        >>> reset_op_attr("nn.conv2d", "target.dnnl")   # doctest: +SKIP
    """
    get_op(op_name).extra_attrs.pop(key, None)


def get_op(name: str) -> Op:
    _load_definitions()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no graph operator named {name!r}") from None


def list_ops() -> list[str]:
    _load_definitions()
    return sorted(_REGISTRY)


def call(name: str, *args, span=None, **attrs) -> Call:
    """Build a call of a registered operator with its attributes checked and defaulted.

    Example:
        >>> y = call("nn.relu", x)   # doctest: +SKIP
    """
    op = get_op(name)
    return Call(op, args, op.normalize_attrs(attrs, span), span)


_loaded = False


def _load_definitions():
    global _loaded
    if not _loaded:
        _loaded = True
        from . import ops  # noqa: F401  (registers every operator)


# A target key's schedule for operators that register none of their own (DEFAULT_SCHEDULES[key]);
# "gpu" has one that is correct for any computation (kiln.topi.gpu.schedule_generic).
DEFAULT_SCHEDULES: dict = {}


def register_default_schedule(key: str, fn) -> None:
    """Make fn(attrs, outs) the schedule of every operator without one for target key `key`.

    Example:
        >>> register_default_schedule("gpu", topi_schedule("gpu:schedule_generic"))  # doctest: +SKIP
    """
    DEFAULT_SCHEDULES[key] = fn

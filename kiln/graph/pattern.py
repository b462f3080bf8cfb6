"""A small dataflow pattern language for graph expressions (merge_composite's patterns).

    wildcard()                       any expression (an input of the match)
    is_constant()                    a Constant
    is_op("nn.conv2d")(p1, p2)       a call of that operator whose arguments match p1, p2
    p.has_attr({"strides": [1, 1]})  what p matches, when its attributes hold these values
    is_tuple_get_item(p, 0)          field 0 of what p matches (index None: any field)
    p | q                            what p or q matches

A pattern object used twice in one pattern matches the same expression both times (diamonds).
`match(pattern, expr)` returns the bindings, pattern -> expression, or None.

Example:
    >>> conv = is_op("nn.conv2d")(wildcard(), is_constant())
    >>> p = is_op("clip")(is_op("right_shift")(conv, is_constant()))
    >>> y = call("right_shift", call("nn.conv2d", x, w), s)              # doctest: +SKIP
    >>> match(p, call("clip", y, a_min=0, a_max=127)) is not None        # doctest: +SKIP
    True
"""
from __future__ import annotations

from .attrs import Attrs
from .expr import Call, Constant, Function, TupleGetItem
from .op import Op, get_op


class Pattern:
    """Base of patterns: call it to build a call pattern, chain has_attr, combine with |."""

    __slots__ = ()

    def __call__(self, *args) -> "CallPattern":
        """A call of what this pattern matches (an operator) on arguments matching args.

        Example:
            >>> is_op("add")(wildcard(), is_constant())   # doctest: +SKIP
        """
        return CallPattern(self, args)

    def has_attr(self, attrs: dict) -> "AttrPattern":
        """What this pattern matches, when its attributes hold these values.

        Example:
            >>> is_op("nn.conv2d")(wildcard(), wildcard()).has_attr({"groups": 1})  # doctest: +SKIP
        """
        return AttrPattern(self, attrs)

    def __or__(self, other) -> "AltPattern":
        return AltPattern(self, other)

    def match(self, expr) -> bool:
        """Whether the pattern matches expr (rooted at expr).

        Example:
            >>> is_op("exp")(wildcard()).match(call("exp", x))   # doctest: +SKIP
            True
        """
        return match(self, expr) is not None

    def matches(self, expr, env: dict) -> bool:
        """Match expr, consistently with the bindings so far in env (extended on success, left
        as it was on failure).

        Example:
            >>> env = {}; is_op("exp")(wildcard()).matches(call("exp", x), env)   # doctest: +SKIP
            True
        """
        bound = env.get(self)
        if bound is not None:
            return bound is expr
        saved = dict(env)
        if not self._match(expr, env):
            env.clear()
            env.update(saved)
            return False
        env[self] = expr
        return True

    def _match(self, expr, env) -> bool:
        raise NotImplementedError


class WildcardPattern(Pattern):
    __slots__ = ()

    def _match(self, expr, env):
        return True

    def __repr__(self):
        return "*"


class ConstantPattern(Pattern):
    __slots__ = ()

    def _match(self, expr, env):
        return isinstance(expr, Constant)

    def __repr__(self):
        return "const"


class OpNamePattern(Pattern):
    """The registered operator `name` (the op of a CallPattern)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        get_op(name)              # an unknown name is an error now, not a pattern never matching
        self.name = name

    def _match(self, expr, env):
        return isinstance(expr, Op) and expr.name == self.name

    def __repr__(self):
        return self.name


class CallPattern(Pattern):
    __slots__ = ("op", "args")

    def __init__(self, op: Pattern, args):
        args = tuple(args)
        for k, a in enumerate(args):
            if not isinstance(a, Pattern):
                raise TypeError(f"argument {k} of the pattern {op!r}(...) is not a pattern: "
                                f"{a!r}")
        self.op, self.args = op, args

    def _match(self, expr, env):
        return (isinstance(expr, Call) and len(expr.args) == len(self.args)
                and self.op.matches(expr.op, env)
                and all(p.matches(a, env) for p, a in zip(self.args, expr.args)))

    def __repr__(self):
        return f"{self.op!r}({', '.join(map(repr, self.args))})"


class AttrPattern(Pattern):
    __slots__ = ("pattern", "attrs")

    def __init__(self, pattern: Pattern, attrs: dict):
        self.pattern, self.attrs = pattern, Attrs(attrs)

    def _match(self, expr, env):
        if not isinstance(expr, (Call, Function)):
            return False
        have = expr.attrs
        return (all(k in have and have[k] == v for k, v in self.attrs.items())
                and self.pattern.matches(expr, env))

    def __repr__(self):
        return f"{self.pattern!r}.has_attr({self.attrs!r})"


class TupleGetItemPattern(Pattern):
    __slots__ = ("tuple_value", "index")

    def __init__(self, tuple_value: Pattern, index: int | None = None):
        self.tuple_value, self.index = tuple_value, index

    def _match(self, expr, env):
        return (isinstance(expr, TupleGetItem)
                and (self.index is None or expr.index == self.index)
                and self.tuple_value.matches(expr.tuple_value, env))

    def __repr__(self):
        return f"{self.tuple_value!r}.{'*' if self.index is None else self.index}"


class AltPattern(Pattern):
    __slots__ = ("left", "right")

    def __init__(self, left: Pattern, right: Pattern):
        if not isinstance(right, Pattern):
            raise TypeError(f"{left!r} | {right!r}: both sides must be patterns")
        self.left, self.right = left, right

    def _match(self, expr, env):
        return self.left.matches(expr, env) or self.right.matches(expr, env)

    def __repr__(self):
        return f"({self.left!r} | {self.right!r})"


def wildcard() -> WildcardPattern:
    """A pattern matching any expression.

    Example:
        >>> is_op("nn.relu")(wildcard())   # doctest: +SKIP
    """
    return WildcardPattern()


def is_constant() -> ConstantPattern:
    """A pattern matching a Constant.

    Example:
        >>> is_op("nn.bias_add")(wildcard(), is_constant())   # doctest: +SKIP
    """
    return ConstantPattern()


def is_op(name: str) -> OpNamePattern:
    """The registered operator `name`; call it with argument patterns to match its calls.

    Example:
        >>> is_op("nn.conv2d")(wildcard(), is_constant())   # doctest: +SKIP
    """
    return OpNamePattern(name)


def is_tuple_get_item(tuple_value: Pattern, index: int | None = None) -> TupleGetItemPattern:
    """A pattern matching field `index` (any field when None) of what tuple_value matches.

    Example:
        >>> is_tuple_get_item(is_op("nn.batch_norm")(*[wildcard()] * 5), 0)   # doctest: +SKIP
    """
    return TupleGetItemPattern(tuple_value, index)


def match(pattern: Pattern, expr) -> dict | None:
    """The bindings (pattern -> expression) of a match of pattern rooted at expr, or None.

    Example:
        >>> env = match(is_op("exp")(wildcard()), call("exp", x))   # doctest: +SKIP
        >>> list(env.values())[0] is x                               # doctest: +SKIP
        True
    """
    if not isinstance(pattern, Pattern):
        raise TypeError(f"expected a pattern, got {pattern!r}")
    env: dict = {}
    return env if pattern.matches(expr, env) else None

"""Symbolic dimensions of an execution graph: the sizes a model takes at run time.

A graph compiled over symbolic dimensions (kiln.compile of a module whose input types name
them) records each one's declared range in graph["dims"] ({name: [low, high]}, high None when
unbounded), and writes a dimension of an entry's shape as an int, a name ("seq"), or an
expression over names in Python syntax ("(seq * 12)", "max(a, b)"). A run binds every name from
the shapes of the inputs (`bind`), and `evaluate` sizes each entry from that binding.
"""
from __future__ import annotations

import ast
import functools
import operator


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CALLS = {"min": min, "max": max}


class DimError(ValueError):
    """A dimension expression of an execution graph that is not one kiln writes."""


@functools.lru_cache(maxsize=4096)
def _parse(text: str):
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise DimError(f"dimension {text!r} is not an expression") from None
    _check(tree, text)
    return tree


def _check(node, text):
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check(node.left, text)
        _check(node.right, text)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in _CALLS and len(node.args) == 2 and not node.keywords:
        for a in node.args:
            _check(a, text)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check(node.operand, text)         # (-1 + seq): a size one less than seq
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        pass
    elif not isinstance(node, ast.Name) or node.id in _CALLS or node.id.startswith("__"):
        raise DimError(f"dimension {text!r}: {ast.dump(node)[:40]} is not a size, a name, "
                       f"+ - * // %, unary -, min or max")


def evaluate(dim, env: dict) -> int:
    """The size of dimension `dim` (an int, a name or an expression) under the binding `env`.

    Example:
        >>> evaluate("(seq * 12)", {"seq": 7}), evaluate(3, {})
        (84, 3)
    """
    if isinstance(dim, int):
        return dim
    try:
        return int(eval(_code(dim), _NAMESPACE, env))     # noqa: S307 (checked by _parse)
    except NameError as err:
        raise DimError(f"dimension {dim!r} names {err.name!r}, which no input binds") from None
    except ArithmeticError as err:
        raise DimError(f"dimension {dim!r}: {err}") from None


# What a checked size expression may call: nothing else is reachable from its code.
_NAMESPACE = {"__builtins__": {}, **_CALLS}


@functools.lru_cache(maxsize=4096)
def _code(text: str):
    """The compiled form of a checked size expression (evaluated per run: no tree walk)."""
    return compile(ast.Expression(_parse(text)), "<size>", "eval")


def names(dim) -> set:
    """The symbolic names a dimension mentions.

    Example:
        >>> sorted(names("max(a, (b * 2))"))
        ['a', 'b']
    """
    if isinstance(dim, int):
        return set()
    tree = _parse(dim)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}


def bind(ranges: dict, inputs: list, complete: bool = True) -> dict:
    """The binding {name: size} that the shapes of `inputs` — (input name, declared shape,
    actual shape) triples — give the symbolic dimensions, checked against each other and
    against `ranges` ({name: [low, high]}): an input of the wrong rank or static size, a size
    outside its range, or two inputs that give one name different sizes is an ArgumentError
    naming them. With complete=False, names no input binds are left unbound (checking one input
    alone).

    Example:
        >>> bind({"n": [1, 32]}, [("x", ["n", 16], (5, 16))])
        {'n': 5}
    """
    from .packed_func import ArgumentError     # (packed_func checks sizes with this module)
    env: dict = {}
    source: dict = {}
    for name, declared, shape in inputs:
        if len(shape) != len(declared):
            raise ArgumentError(f"input {name!r}: expected {len(declared)} dimensions "
                                f"{_text(declared)}, got shape {tuple(shape)}")
        for axis, (d, size) in enumerate(zip(declared, shape)):
            if isinstance(d, int):
                if size != d:
                    raise ArgumentError(f"input {name!r}: dimension {axis} must be {d}, got "
                                        f"{size} (shape {tuple(shape)}; expected "
                                        f"{_text(declared)})")
                continue
            if d not in ranges:         # an expression: checked once every name is bound
                continue
            low, high = ranges[d]
            if size < low or (high is not None and size > high):
                raise ArgumentError(f"input {name!r}: dimension {axis} ({d}) is {size}, "
                                    f"outside its range {_range_text(low, high)}")
            if d in env and env[d] != size:
                who = f"input {name!r}: two dimensions" if source[d] == name else \
                    f"inputs {source[d]!r} and {name!r}"
                raise ArgumentError(f"{who} disagree on {d}: {env[d]} and {size}")
            env[d], source[d] = size, name
    missing = sorted(set(ranges) - set(env))
    if not complete:
        return env
    if missing:
        raise ArgumentError(f"no input's shape gives symbolic dimension(s) {missing}")
    for name, declared, shape in inputs:
        for axis, (d, size) in enumerate(zip(declared, shape)):
            if not isinstance(d, int) and d not in ranges and evaluate(d, env) != size:
                raise ArgumentError(f"input {name!r}: dimension {axis} ({d}) must be "
                                    f"{evaluate(d, env)} here, got {size}")
    return env


def _range_text(low, high) -> str:
    return f"[{low}, {high}]" if high is not None else f"[{low}, ...)"


def _text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"

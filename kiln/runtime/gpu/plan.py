"""Running a GPU function's host plan: integer arithmetic on sizes, loops, workspace, and
kernel launches (the plan's grammar: kiln/codegen/gpu/split.py)."""
from __future__ import annotations

import operator

import numpy as np


def _floordiv(a, b):
    return a // b


def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": _floordiv,
        "floormod": operator.mod, "div": _trunc_div, "mod": lambda a, b: a - _trunc_div(a, b) * b,
        "min": min, "max": max, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
        "ge": operator.ge, "eq": operator.eq, "ne": operator.ne,
        "and": lambda a, b: bool(a) and bool(b), "or": lambda a, b: bool(a) or bool(b)}


class PlanError(RuntimeError):
    """A check of the host code failed (an assertion of the compiled function)."""


def evaluate(expr, env: dict):
    """The value of a plan expression.

    Example:
        >>> evaluate(["add", ["var", "n"], 3], {"n": 4})
        7
    """
    if isinstance(expr, (int, bool)):
        return expr
    head = expr[0]
    if head == "var":
        return env[expr[1]]
    if head == "not":
        return not evaluate(expr[1], env)
    if head == "select":
        return evaluate(expr[2] if evaluate(expr[1], env) else expr[3], env)
    return _OPS[head](*(evaluate(a, env) for a in expr[1:]))


def run_plan(ops, env: dict, launch, api) -> None:
    """Run plan ops; `launch(kernel_name, grid, block, args)` queues a kernel.

    Example:
        >>> run_plan([["let", "m", ["mul", ["var", "n"], 2], []]], {"n": 3}, None, None)
    """
    for op in ops:
        kind = op[0]
        if kind == "launch":
            _, name, grid, block, args = op
            grid = [evaluate(e, env) for e in grid]
            block = [evaluate(e, env) for e in block]
            if min(grid) <= 0:
                continue                     # an empty grid: nothing to compute
            values = [(a[0], env[a[1]], a[2] if len(a) > 2 else None) for a in args]
            launch(name, grid, block, values)
        elif kind == "let":
            run_plan(op[3], {**env, op[1]: evaluate(op[2], env)}, launch, api)
        elif kind == "for":
            lo, extent = evaluate(op[2], env), evaluate(op[3], env)
            for i in range(lo, lo + extent):
                run_plan(op[4], {**env, op[1]: i}, launch, api)
        elif kind == "alloc":
            count = evaluate(op[3], env)
            mem = api.alloc(count * np.dtype(op[2] if op[2] != "bool" else "uint8").itemsize)
            try:
                run_plan(op[4], {**env, op[1]: mem}, launch, api)
                api.sync()
            finally:
                api.free(mem)
        elif kind == "assert":
            if not evaluate(op[1], env):
                raise PlanError(op[2])
        elif kind == "if":
            run_plan(op[2] if evaluate(op[1], env) else op[3], env, launch, api)
        else:
            raise ValueError(f"unknown host plan operation {kind!r}")

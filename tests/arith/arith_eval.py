"""A tiny reference interpreter of kiln expressions and statements, for arith's tests.

Integers are Python ints (no wrap-around: index arithmetic in these tests stays small);
FloorDiv/FloorMod round down, Div/Mod truncate toward zero as in C. Select evaluates both
branches; if_then_else only the taken one. Buffers are flat numpy arrays.
"""
from __future__ import annotations

import numpy as np

from kiln.tir import dtype as dt
from kiln.tir.expr import (EQ, GE, GT, LE, LT, NE, Add, And, Broadcast, BufferLoad, Call, Cast,
                           Div, FloatImm, FloorDiv, FloorMod, IntImm, Let, Max, Min, Mod, Mul, Not,
                           Or, Ramp, Select, Sub, Var)
from kiln.tir.stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For, IfThenElse,
                           LetStmt, SeqStmt)


def _tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_BIN = {
    Add: lambda a, b: a + b, Sub: lambda a, b: a - b, Mul: lambda a, b: a * b,
    FloorDiv: lambda a, b: a // b, FloorMod: lambda a, b: a % b,
    Min: min, Max: max,
    LT: lambda a, b: a < b, LE: lambda a, b: a <= b, GT: lambda a, b: a > b,
    GE: lambda a, b: a >= b, EQ: lambda a, b: a == b, NE: lambda a, b: a != b,
}


def evaluate(e, env: dict, buffers: dict | None = None):
    """Value of e with variables from env (Var -> number) and buffers (Buffer -> array)."""
    cls = type(e)
    if cls in (IntImm, FloatImm):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if cls in _BIN:
        return _BIN[cls](evaluate(e.a, env, buffers), evaluate(e.b, env, buffers))
    if cls is Div:
        a, b = evaluate(e.a, env, buffers), evaluate(e.b, env, buffers)
        return a / b if dt.is_float(e.dtype) else _tdiv(a, b)
    if cls is Mod:
        a, b = evaluate(e.a, env, buffers), evaluate(e.b, env, buffers)
        return a - _tdiv(a, b) * b
    if cls is And:
        return bool(evaluate(e.a, env, buffers)) and bool(evaluate(e.b, env, buffers))
    if cls is Or:
        return bool(evaluate(e.a, env, buffers)) or bool(evaluate(e.b, env, buffers))
    if cls is Not:
        return not evaluate(e.a, env, buffers)
    if cls is Select:
        c = evaluate(e.condition, env, buffers)
        t, f = evaluate(e.true_value, env, buffers), evaluate(e.false_value, env, buffers)
        return t if c else f
    if cls is Call and e.op == "if_then_else":
        c = evaluate(e.args[0], env, buffers)
        return evaluate(e.args[1] if c else e.args[2], env, buffers)
    if cls is Call and e.op == "likely":
        return evaluate(e.args[0], env, buffers)
    if cls is Cast:
        v = evaluate(e.value, env, buffers)
        return float(v) if dt.is_float(e.dtype) else int(v)
    if cls is Let:
        inner = dict(env)
        inner[e.var] = evaluate(e.value, env, buffers)
        return evaluate(e.body, inner, buffers)
    if cls is Ramp:
        base, stride = evaluate(e.base, env, buffers), evaluate(e.stride, env, buffers)
        return [base + k * stride for k in range(e.lanes)]
    if cls is Broadcast:
        return [evaluate(e.value, env, buffers)] * e.lanes
    if cls is BufferLoad:
        index = evaluate(e.index, env, buffers)
        array = buffers[e.buffer]
        if isinstance(index, list):
            return [_load(array, k, e) for k in index]
        return _load(array, index, e)
    raise NotImplementedError(f"arith_eval: {cls.__name__}")


def _load(array, k, e):
    if not 0 <= k < array.size:
        raise IndexError(f"load {e} out of bounds: {k}")
    return array[k].item()


def run(stmt, buffers: dict, env: dict | None = None) -> None:
    """Execute stmt, writing into the numpy arrays of buffers (Buffer -> flat array)."""
    env = dict(env or {})
    _exec(stmt, env, buffers)


def _exec(s, env, buffers):
    if isinstance(s, SeqStmt):
        for x in s.seq:
            _exec(x, env, buffers)
    elif isinstance(s, For):
        lo = evaluate(s.min, env, buffers)
        ext = evaluate(s.extent, env, buffers)
        for k in range(lo, lo + ext):
            env[s.loop_var] = k
            _exec(s.body, env, buffers)
        env.pop(s.loop_var, None)
    elif isinstance(s, IfThenElse):
        if evaluate(s.condition, env, buffers):
            _exec(s.then_case, env, buffers)
        elif s.else_case is not None:
            _exec(s.else_case, env, buffers)
    elif isinstance(s, BufferStore):
        index = evaluate(s.index, env, buffers)
        value = evaluate(s.value, env, buffers)
        array = buffers[s.buffer]
        if not 0 <= index < array.size:
            raise IndexError(f"store to {s.buffer.name}[{index}] out of bounds")
        array[index] = value
    elif isinstance(s, LetStmt):
        env[s.var] = evaluate(s.value, env, buffers)
        _exec(s.body, env, buffers)
    elif isinstance(s, Allocate):
        buffers[s.buffer] = np.zeros(evaluate(s.extent, env, buffers), dtype=s.buffer.dtype)
        _exec(s.body, env, buffers)
    elif isinstance(s, AttrStmt):
        _exec(s.body, env, buffers)
    elif isinstance(s, AssertStmt):
        assert evaluate(s.condition, env, buffers), s.message
        _exec(s.body, env, buffers)
    elif isinstance(s, Evaluate):
        evaluate(s.value, env, buffers)
    else:
        raise NotImplementedError(f"arith_eval: {type(s).__name__}")

"""Helpers for code generator tests: hand-built PrimFuncs over flat buffers, run on both
back-ends through kiln.runtime.Module and compared with numpy."""
from __future__ import annotations

import numpy as np

from kiln.codegen import build_module
from kiln.tir import Buffer, BufferLoad, BufferStore, For, IntImm, PrimFunc, Ramp, Var, const

TARGETS = ["llvm", "c"]


def loop(var, extent, body, kind="serial", start=0):
    """for var in [start, start + extent): body"""
    return For(var, const(start, var.dtype), const(extent, var.dtype) if isinstance(extent, int)
               else extent, kind, body)


def elementwise(name: str, in_dtypes, out_dtype: str, fn, n: int, lanes: int = 1):
    """Y[i] = fn(X0[i], X1[i], ...) over n elements, `lanes` at a time (Ramp indices)."""
    ins = [Buffer.make(f"X{k}", d, (n,)) for k, d in enumerate(in_dtypes)]
    out = Buffer.make("Y", out_dtype, (n,))
    i = Var("i")
    index = i if lanes == 1 else Ramp(i * lanes, const(1), lanes)
    body = BufferStore(out, fn(*[BufferLoad(b, index) for b in ins]), index)
    return PrimFunc(name, ins + [out], loop(i, n // lanes, body))


def run(funcs, target, *args, entry=None):
    """Build funcs for target and call the entry function on args (arrays updated in place)."""
    mod = build_module(funcs if isinstance(funcs, list) else [funcs], target, entry)
    mod(*args)
    return mod


def random_array(rng, dtype: str, n: int, low=-100, high=100) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(low, high, n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, low), min(info.max, high), n, endpoint=True).astype(dtype)


def int_const(value, dtype="int32"):
    return IntImm(dtype, value)

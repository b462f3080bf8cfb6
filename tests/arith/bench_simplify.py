"""Micro-benchmark (not a test): simplify time for a few hundred typical index expressions.

Run: .venv/bin/python tests/arith/bench_simplify.py
Expressions are the kinds lowering produces: conv2d windows over split loops, fused/split
indices (floordiv/floormod), split-tail guards, bound-inference min/max, symbolic shapes.
Each round builds fresh variables, so nothing is memoized across rounds.
"""
import time

from kiln.arith import Analyzer
from kiln.tir import Range, SizeVar, Var, const, likely
from kiln.tir import op


def expressions():
    """(bindings, expressions) for one round, with fresh variables."""
    v = {name: Var(name) for name in
         ("n", "k", "yo", "yi", "xo", "xi", "ry", "rx", "rc", "f", "fo", "fi", "io", "ii")}
    sym = SizeVar("N")
    binds = [("n", 1), ("k", 64), ("yo", 14), ("yi", 4), ("xo", 4), ("xi", 16), ("ry", 3),
             ("rx", 3), ("rc", 64), ("fo", 256), ("fi", 4), ("io", None), ("ii", 32)]
    exprs = []
    y = v["yo"] * 4 + v["yi"]
    x = v["xo"] * 16 + v["xi"]
    for stride in (1, 2):
        for pad in (0, 1):
            hy = y * stride + v["ry"] - pad
            hx = x * stride + v["rx"] - pad
            exprs += [
                ((v["n"] * 64 + v["rc"]) * 58 + hy) * 58 + hx,
                ((v["n"] * 64 + v["k"]) * 56 + y) * 56 + x,
                ((v["k"] * 64 + v["rc"]) * 3 + v["ry"]) * 3 + v["rx"],
                op.all_(hy >= 0, hy < 56, hx >= 0, hx < 56),
                likely(x < 56), likely(y * stride + v["ry"] < 57),
                op.min_(hy, 55) - op.max_(hy - 2, 0) + 1,
            ]
    f = v["fo"] * 4 + v["fi"]
    for inner in (4, 8, 16, 32, 64):
        exprs += [f // inner, f % inner, (f // inner) * inner + f % inner,
                  (f % (inner * 4)) // inner, f // inner // 2, (f + 3) // inner * inner]
    for factor in (8, 16, 32, 64):
        i = v["io"] * factor + v["ii"] % factor
        exprs += [likely(i < sym), i * 4 + 3, (sym + factor - 1) // factor,
                  op.min_(sym - v["io"] * factor, factor), i // factor, i % factor]
    exprs = exprs + [e + 1 for e in exprs if e.dtype == "int32"] + \
        [e * 2 - 1 for e in exprs if e.dtype == "int32"] + [e + v["n"] for e in exprs if e.dtype == "int32"]
    return v, binds, exprs


def main(rounds=5):
    times = []
    count = 0
    for _ in range(rounds):
        v, binds, exprs = expressions()
        ana = Analyzer()
        sym = None
        start = time.perf_counter()
        for name, extent in binds:
            if extent is None:
                sym = SizeVar("N")
                ana.bind(v[name], Range(const(0), (sym + 31) // 32))
            else:
                ana.bind(v[name], Range(const(0), const(extent)))
        for e in exprs:
            ana.simplify(e)
        times.append(time.perf_counter() - start)
        count = len(set(exprs))
        warm = time.perf_counter()
        for e in exprs:
            ana.simplify(e)
        warm = time.perf_counter() - warm
    best = min(times)
    print(f"{count} distinct expressions: cold {best * 1e3:.1f} ms ({best / count * 1e6:.0f} us each), "
          f"memoized {warm * 1e3:.2f} ms")


if __name__ == "__main__":
    main()

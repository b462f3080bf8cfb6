"""Elementwise arithmetic, comparisons, logic and casts on both back-ends, scalar and vector.

Single IEEE operations (+ - * /) are correctly rounded in numpy and in generated code, so
results are compared exactly; integer results are exact by definition.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen_helpers import TARGETS, elementwise, random_array
from kiln.tir import (Cast, Div, FloorDiv, FloorMod, Max, Min, Mod, Not, Select, op)

N = 64
INT_TYPES = ["int8", "int16", "int32", "int64", "uint8"]
FLOAT_TYPES = ["float16", "float32", "float64"]

BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "min": (lambda a, b: Min(a, b), np.minimum),
    "max": (lambda a, b: Max(a, b), np.maximum),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 8])
def test_binary_ops_every_dtype(target, lanes, rng):
    # One module per (target, lanes): every op x dtype as its own function.
    funcs, cases = [], []
    for dtype in INT_TYPES + FLOAT_TYPES:
        ops = dict(BINARY)
        if dtype in FLOAT_TYPES:
            ops["div"] = (lambda a, b: Div(a, b), np.divide)
        for name, (build, ref) in ops.items():
            fname = f"{name}_{dtype}"
            funcs.append(elementwise(fname, [dtype, dtype], dtype, build, N, lanes))
            cases.append((fname, dtype, ref))
    from kiln.codegen import build_module
    mod = build_module(funcs, target)
    for fname, dtype, ref in cases:
        a = random_array(rng, dtype, N, -100, 100)
        b = random_array(rng, dtype, N, -100, 100)
        if fname.startswith("div"):
            b[b == 0] = 1
        if dtype in FLOAT_TYPES:
            # NaN on either side propagates through min/max (numpy's rule); signed zeros
            a[:4], b[:4] = [np.nan, 1.0, 0.0, -0.0], [2.0, np.nan, -0.0, 0.0]
        y = np.zeros(N, dtype)
        mod[fname](a, b, y)
        with np.errstate(over="ignore", invalid="ignore"):
            expected = ref(a, b).astype(dtype)
        np.testing.assert_array_equal(y, expected, err_msg=fname)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 16])
def test_comparisons_write_bool_buffers(target, lanes, rng):
    cmps = {"lt": (op.less, np.less), "le": (op.less_equal, np.less_equal),
            "gt": (op.greater, np.greater), "ge": (op.greater_equal, np.greater_equal),
            "eq": (op.equal, np.equal), "ne": (op.not_equal, np.not_equal)}
    funcs = [elementwise(f"{k}_{d}", [d, d], "bool", build, N, lanes)
             for k, (build, _) in cmps.items() for d in ("int32", "uint8", "float32", "float64")]
    from kiln.codegen import build_module
    mod = build_module(funcs, target)
    for k, (_, ref) in cmps.items():
        for d in ("int32", "uint8", "float32", "float64"):
            a = random_array(rng, d, N, 0, 5)
            b = random_array(rng, d, N, 0, 5)
            if d.startswith("float"):
                a[:4] = np.nan          # NaN compares false, except !=
            y = np.ones(N, bool)
            mod[f"{k}_{d}"](a, b, y)
            np.testing.assert_array_equal(y, ref(a, b), err_msg=f"{k} {d}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 8])
def test_logic_and_select(target, lanes, rng):
    funcs = [
        elementwise("land", ["bool", "bool"], "bool", lambda a, b: a & b, N, lanes),
        elementwise("lor", ["bool", "bool"], "bool", lambda a, b: a | b, N, lanes),
        elementwise("lnot", ["bool"], "bool", lambda a: Not(a), N, lanes),
        elementwise("sel_f32", ["bool", "float32", "float32"], "float32", Select, N, lanes),
        elementwise("sel_i8", ["bool", "int8", "int8"], "int8", Select, N, lanes),
        elementwise("sel_f64", ["bool", "float64", "float64"], "float64", Select, N, lanes),
        elementwise("sel_cmp", ["float32", "float32"], "float32",
                    lambda a, b: Select(a < b, a * 2.0, b), N, lanes),
    ]
    from kiln.codegen import build_module
    mod = build_module(funcs, target)
    p, q = random_array(rng, "bool", N), random_array(rng, "bool", N)
    for name, ref in (("land", p & q), ("lor", p | q)):
        y = np.zeros(N, bool)
        mod[name](p, q, y)
        np.testing.assert_array_equal(y, ref)
    y = np.zeros(N, bool)
    mod["lnot"](p, y)
    np.testing.assert_array_equal(y, ~p)
    for dtype, name in (("float32", "sel_f32"), ("int8", "sel_i8"), ("float64", "sel_f64")):
        a, b = random_array(rng, dtype, N), random_array(rng, dtype, N)
        y = np.zeros(N, dtype)
        mod[name](p, a, b, y)
        np.testing.assert_array_equal(y, np.where(p, a, b))
    a, b = random_array(rng, "float32", N), random_array(rng, "float32", N)
    y = np.zeros(N, "float32")
    mod["sel_cmp"](a, b, y)
    np.testing.assert_array_equal(y, np.where(a < b, a * 2, b))


CASTS = [("int32", "float32"), ("float32", "int32"), ("float32", "float16"),
         ("float16", "float32"), ("int8", "int32"), ("uint8", "int32"), ("int32", "int8"),
         ("int64", "int32"), ("float64", "float32"), ("float32", "float64"),
         ("int32", "uint8"), ("float32", "bool"), ("int32", "bool"), ("bool", "int32"),
         ("bool", "float32"), ("uint8", "float32"), ("float32", "uint8"), ("int16", "float64"),
         ("float64", "float16"), ("float16", "float64")]
# double -> half must round once: ties, just-above-ties (double rounding through float would
# lose the 2^-40), overflow to inf, subnormal halves, underflow to zero
HALF_EDGES = [1 + 2 ** -11, 1 + 2 ** -11 + 2 ** -40, 1 + 3 * 2 ** -11, -(1 + 2 ** -11 + 2 ** -40),
              65519.0, 65520.0, 1e6, -1e6, 2 ** -24, 2 ** -25, 2 ** -25 + 2 ** -60, 1e-10,
              float("inf"), float("-inf")]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 8])
def test_casts(target, lanes, rng):
    funcs = [elementwise(f"cast_{s}_{d}", [s], d, lambda x, d=d: Cast(d if lanes == 1 else
                                                                       f"{d}x{lanes}", x), N, lanes)
             for s, d in CASTS]
    from kiln.codegen import build_module
    mod = build_module(funcs, target)
    for s, d in CASTS:
        low, high = (0, 250) if d == "uint8" or s == "uint8" else (-120, 120)
        x = random_array(rng, s, N, low, high)
        if s.startswith("float"):
            x[:3] = [0.0, -0.0, 2.75]
        if (s, d) == ("float64", "float16"):
            x[3:3 + len(HALF_EDGES)] = HALF_EDGES
        y = np.zeros(N, d)
        mod[f"cast_{s}_{d}"](x, y)
        with np.errstate(invalid="ignore", over="ignore"):
            expected = x.astype(d)
        np.testing.assert_array_equal(y, expected, err_msg=f"{s} -> {d}")


DIV_TYPES = ["int8", "int32", "int64"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 8])
def test_integer_division_semantics_on_negatives(target, lanes, rng):
    kinds = {"floordiv": FloorDiv, "floormod": FloorMod, "truncdiv": Div, "truncmod": Mod}
    funcs = [elementwise(f"{k}_{d}", [d, d], d, node, N, lanes)
             for k, node in kinds.items() for d in DIV_TYPES]
    from kiln.codegen import build_module
    mod = build_module(funcs, target)
    for d in DIV_TYPES:
        a = random_array(rng, d, N, -100, 100)
        b = random_array(rng, d, N, -9, 9)
        b[b == 0] = 3
        a[:8] = [-7, 7, -7, 7, -6, 6, 0, -1]
        b[:8] = [2, -2, -2, 2, 3, -3, -5, 7]
        trunc_q = (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(d)
        expected = {"floordiv": np.floor_divide(a, b), "floormod": np.remainder(a, b),
                    "truncdiv": trunc_q, "truncmod": np.fmod(a, b)}
        for k in kinds:
            y = np.zeros(N, d)
            mod[f"{k}_{d}"](a, b, y)
            np.testing.assert_array_equal(y, expected[k], err_msg=f"{k} {d}")


@pytest.mark.parametrize("target", TARGETS)
def test_float_floordiv_floormod(target, rng):
    funcs = [elementwise("fdiv", ["float32", "float32"], "float32", FloorDiv, N),
             elementwise("fmod_floor", ["float64", "float64"], "float64", FloorMod, N)]
    from kiln.codegen import build_module
    mod = build_module(funcs, target)
    a = rng.uniform(-10, 10, N).astype("float32")
    b = rng.choice([-3.0, -0.5, 2.0, 4.0], N).astype("float32")
    y = np.zeros(N, "float32")
    mod["fdiv"](a, b, y)
    np.testing.assert_array_equal(y, np.floor(a / b))
    a64, b64 = a.astype("float64"), b.astype("float64")
    y64 = np.zeros(N, "float64")
    mod["fmod_floor"](a64, b64, y64)
    # a - floor(a/b)*b: equal to numpy's remainder up to one rounding of the product.
    np.testing.assert_allclose(y64, np.remainder(a64, b64), rtol=0, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_bitwise_and_shifts(target, rng):
    from kiln.tir import Call
    ops = {"band": ("bitwise_and", np.bitwise_and), "bor": ("bitwise_or", np.bitwise_or),
           "bxor": ("bitwise_xor", np.bitwise_xor), "shl": ("shift_left", np.left_shift),
           "shr": ("shift_right", np.right_shift)}
    funcs = []
    for lanes in (1, 8):
        for d in ("int32", "uint8", "int8"):
            for k, (name, _) in ops.items():
                funcs.append(elementwise(f"{k}_{d}_{lanes}", [d, d], d,
                                         lambda a, b, name=name: Call(a.dtype, name, (a, b)), N, lanes))
            funcs.append(elementwise(f"pop_{d}_{lanes}", [d], d,
                                     lambda a: Call(a.dtype, "popcount", (a,)), N, lanes))
    from kiln.codegen import build_module
    mod = build_module(funcs, target)
    for lanes in (1, 8):
        for d in ("int32", "uint8", "int8"):
            a = random_array(rng, d, N, -100, 120)
            b = random_array(rng, d, N, 0, 6)
            for k, (_, ref) in ops.items():
                y = np.zeros(N, d)
                mod[f"{k}_{d}_{lanes}"](a, b, y)
                np.testing.assert_array_equal(y, ref(a, b).astype(d), err_msg=f"{k} {d}")
            y = np.zeros(N, d)
            mod[f"pop_{d}_{lanes}"](a, y)
            bits = np.dtype(d).itemsize * 8
            pop = np.array([bin(int(v) & ((1 << bits) - 1)).count("1") for v in a], d)
            np.testing.assert_array_equal(y, pop)


_DIV_MODULES = {}


def _division_module(target):
    if target not in _DIV_MODULES:
        funcs = [elementwise(f"{k}_{d}_{lanes}", [d, d], d, node, N, lanes)
                 for k, node in (("floordiv", FloorDiv), ("floormod", FloorMod), ("truncdiv", Div),
                                 ("truncmod", Mod))
                 for d in ("int32", "int64") for lanes in (1, 4)]
        from kiln.codegen import build_module
        _DIV_MODULES[target] = build_module(funcs, target)
    return _DIV_MODULES[target]


_nonzero32 = st.integers(-2 ** 31 + 1, 2 ** 31 - 1).filter(lambda v: v != 0)


def _python_division(xs, ys):
    floor_q = [x // y for x, y in zip(xs, ys)]
    trunc_q = [abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1) for x, y in zip(xs, ys)]
    return {"floordiv": floor_q, "truncdiv": trunc_q,
            "floormod": [x - q * y for x, y, q in zip(xs, ys, floor_q)],
            "truncmod": [x - q * y for x, y, q in zip(xs, ys, trunc_q)]}


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=40, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(-2 ** 31 + 1, 2 ** 31 - 1), _nonzero32),
                      min_size=1, max_size=N))
def test_division_matches_python_on_any_int32_and_int64(target, pairs):
    mod = _division_module(target)
    pairs = pairs + [(1, 1)] * (N - len(pairs))
    ys = [y for _, y in pairs]
    for d, scale in (("int32", 1), ("int64", 3)):     # int64 numerators beyond the int32 range
        xs = [x * scale for x, _ in pairs]
        for k, want in _python_division(xs, ys).items():
            for lanes in (1, 4):
                out = np.zeros(N, d)
                mod[f"{k}_{d}_{lanes}"](np.array(xs, d), np.array(ys, d), out)
                np.testing.assert_array_equal(out, np.array(want, d), err_msg=f"{k} {d} x{lanes}")

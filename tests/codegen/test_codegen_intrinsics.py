"""Math intrinsics: the float32 lowerings (exp, exp2, log, tanh, sigmoid, erf) against
double-precision references from Python's math module, in ulps, over wide ranges and special
values; float64 and float16 through libm; rounding and other unary/binary math.

Stated accuracy (max error over the samples below, both back-ends, scalar and 16-lane code):
exp, exp2, log <= 2 ulp; tanh <= 3 ulp; sigmoid, erf <= 4 ulp (relative error < 1e-6 wherever
the result is a normal float).
"""
import math

import numpy as np
import pytest

from codegen_helpers import TARGETS, elementwise
from kiln.codegen import build_module, lower_intrinsics
from kiln.target import Target
from kiln.tir import Call, post_order_visit

F32_MIN = np.finfo(np.float32).tiny


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def _safe(fn):
    def ref(x):
        try:
            return fn(x)
        except OverflowError:
            return math.inf
        except ValueError:
            return math.nan
    return ref


REFERENCES = {
    "exp": (_safe(math.exp), 2.0),
    "exp2": (_safe(lambda x: 2.0 ** x), 2.0),
    "log": (_safe(lambda x: -math.inf if x == 0 else math.log(x)), 2.0),
    "tanh": (math.tanh, 3.0),
    "sigmoid": (_sigmoid, 4.0),
    "erf": (math.erf, 4.0),
}


def _inputs(name: str, rng) -> np.ndarray:
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e-45, 1.0, -1.0]
    if name == "log":
        pieces = [np.geomspace(1e-45, 3e38, 20000), rng.uniform(0.5, 2.0, 8000),
                  np.array([-1.0, -np.inf, 2 ** -149, F32_MIN, 3.4e38])]
    elif name in ("exp", "exp2"):
        hi = 89.0 if name == "exp" else 128.5
        lo = -104.5 if name == "exp" else -151.0
        pieces = [np.linspace(lo, hi, 20000), rng.uniform(-1, 1, 8000)]
    else:
        pieces = [np.linspace(-12, 12, 20000), rng.uniform(-1, 1, 4000),
                  np.geomspace(1e-30, 1, 2000), -np.geomspace(1e-30, 1, 2000)]
    x = np.concatenate(pieces + [np.array(specials)]).astype("float32")
    return x[: len(x) // 16 * 16]


def ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the float32 spacing at ref (subnormal spacing near zero)."""
    spacing = np.spacing(np.abs(ref).astype("float32")).astype("float64")
    return np.abs(got.astype("float64") - ref) / np.maximum(spacing, 2.0 ** -149)


@pytest.fixture(scope="module", params=TARGETS)
def math_module(request):
    funcs = []
    for name in REFERENCES:
        for lanes in (1, 16):
            funcs.append(elementwise(f"{name}_{lanes}", ["float32"], "float32",
                                     lambda x, name=name: Call(x.dtype, name, (x,)), 16, lanes))
    return request.param, funcs


@pytest.mark.parametrize("name", list(REFERENCES))
def test_float32_lowering_accuracy(math_module, name, rng):
    target, funcs = math_module
    ref_fn, max_ulp = REFERENCES[name]
    x = _inputs(name, rng)
    ref = np.array([ref_fn(float(v)) for v in x])
    for lanes in (1, 16):
        func = next(f for f in funcs if f.name == f"{name}_{lanes}")
        # rebuild at the input's size: a PrimFunc per size keeps the tests simple
        f = elementwise(func.name, ["float32"], "float32",
                        lambda v: Call(v.dtype, name, (v,)), len(x), lanes)
        y = np.zeros_like(x)
        build_module([f], target)(x, y)
        nan = np.isnan(ref)
        np.testing.assert_array_equal(np.isnan(y), nan, err_msg=f"{name} NaN lanes")
        finite_ref = ~nan & np.isfinite(ref) & (np.abs(ref) <= np.finfo(np.float32).max)
        inf_ref = ~nan & ~finite_ref
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(y[inf_ref], ref[inf_ref].astype("float32"))
        err = ulp_error(y[finite_ref], ref[finite_ref])
        assert err.max() <= max_ulp, (f"{name} ({target}, {lanes} lanes): {err.max():.2f} ulp at "
                                      f"x={x[finite_ref][err.argmax()]!r}")
        normal = finite_ref & (np.abs(ref) >= F32_MIN)
        rel = np.abs(y[normal] - ref[normal]) / np.abs(ref[normal])
        assert rel.max() < 1e-6
        # signed zeros survive where the function is odd or exact at zero
        zeros = (x == 0)
        if name in ("tanh", "erf"):
            np.testing.assert_array_equal(np.signbit(y[zeros]), np.signbit(x[zeros]))


def test_lowering_replaces_float32_calls_only():
    fs = [elementwise("f32", ["float32"], "float32", lambda x: Call(x.dtype, "erf", (x,)), 16, 16),
          elementwise("f64", ["float64"], "float64", lambda x: Call(x.dtype, "erf", (x,)), 16),
          elementwise("f16", ["float16"], "float16", lambda x: Call(x.dtype, "exp", (x,)), 16)]
    ops = {}
    for f in fs:
        calls = []
        post_order_visit(lower_intrinsics(f, Target("llvm")).body,
                         lambda n: calls.append(n.op) if isinstance(n, Call) else None)
        ops[f.name] = set(calls)
    assert "erf" not in ops["f32"] and "reinterpret" in ops["f32"]
    assert ops["f64"] == {"erf"}
    assert "exp" not in ops["f16"]
    assert lower_intrinsics(fs[1], Target("llvm")) is fs[1]


LIBM_CASES = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sqrt": np.sqrt, "sin": np.sin,
    "cos": np.cos, "erf": np.vectorize(math.erf), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "log1p": np.log1p, "exp2": np.exp2, "log2": np.log2, "rsqrt": lambda x: 1 / np.sqrt(x),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 4])
def test_float64_math_through_libm(target, lanes, rng):
    n = 64
    funcs = [elementwise(f"m_{k}", ["float64"], "float64", lambda x, k=k: Call(x.dtype, k, (x,)),
                         n, lanes) for k in LIBM_CASES]
    mod = build_module(funcs, target)
    x = rng.uniform(0.01, 5, n)
    for k, ref in LIBM_CASES.items():
        y = np.zeros(n)
        mod[f"m_{k}"](x, y)
        np.testing.assert_allclose(y, ref(x), rtol=1e-14, atol=0, err_msg=k)


ROUNDING = {"floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.round,
            "fabs": np.abs, "sqrt": np.sqrt}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 16])
def test_float32_rounding_and_exact_functions(target, lanes, rng):
    n = 64
    funcs = [elementwise(f"m_{k}", ["float32"], "float32", lambda x, k=k: Call(x.dtype, k, (x,)),
                         n, lanes) for k in ROUNDING]
    funcs.append(elementwise("m_fma", ["float32"] * 3, "float32",
                             lambda a, b, c: Call(a.dtype, "fma", (a, b, c)), n, lanes))
    funcs.append(elementwise("m_pow", ["float32"] * 2, "float32",
                             lambda a, b: Call(a.dtype, "pow", (a, b)), n, lanes))
    funcs.append(elementwise("m_fmod", ["float32"] * 2, "float32",
                             lambda a, b: Call(a.dtype, "fmod", (a, b)), n, lanes))
    mod = build_module(funcs, target)
    x = (rng.uniform(-50, 50, n) * 4).round() / 4       # many exact .5 and .25 cases
    x = x.astype("float32")
    for k, ref in ROUNDING.items():
        arg = np.abs(x) if k == "sqrt" else x
        y = np.zeros(n, "float32")
        mod[f"m_{k}"](arg, y)
        np.testing.assert_array_equal(y, ref(arg), err_msg=k)     # round: half to even
    a, b, c = (rng.standard_normal(n).astype("float32") for _ in range(3))
    y = np.zeros(n, "float32")
    mod["m_fma"](a, b, c, y)
    np.testing.assert_array_equal(y, (a.astype("float64") * b + c).astype("float32"))
    pa = np.abs(a) + 0.5
    mod["m_pow"](pa, b, y)
    np.testing.assert_allclose(y, np.power(pa, b), rtol=2e-7)
    mod["m_fmod"](a * 10, b, y)
    np.testing.assert_array_equal(y, np.fmod(a * 10, b))


@pytest.mark.parametrize("target", TARGETS)
def test_float16_math(target, rng):
    n = 64
    names = ["exp", "tanh", "sigmoid", "erf", "log", "sqrt"]
    funcs = [elementwise(f"m_{k}", ["float16"], "float16", lambda x, k=k: Call(x.dtype, k, (x,)), n)
             for k in names]
    mod = build_module(funcs, target)
    x = rng.uniform(0.05, 4, n).astype("float16")
    refs = {"exp": np.exp, "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
            "erf": np.vectorize(math.erf), "log": np.log, "sqrt": np.sqrt}
    for k in names:
        y = np.zeros(n, "float16")
        mod[f"m_{k}"](x, y)
        expected = refs[k](x.astype("float64")).astype("float16")
        # computed in float32 and rounded once to half: within one half-precision ulp
        np.testing.assert_allclose(y.astype("float32"), expected.astype("float32"), rtol=2 ** -10, err_msg=k)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 16])
def test_float32_libm_functions_and_reinterpret(target, lanes, rng):
    n = 64
    unary = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "log2": np.log2, "log1p": np.log1p,
             "rsqrt": lambda v: 1 / np.sqrt(v), "expm1": np.expm1}
    funcs = [elementwise(f"m_{k}", ["float32"], "float32", lambda x, k=k: Call(x.dtype, k, (x,)),
                         n, lanes) for k in unary]
    bits = "int32" if lanes == 1 else f"int32x{lanes}"
    funcs.append(elementwise("as_bits", ["float32"], "int32",
                             lambda x: Call(bits, "reinterpret", (x,)), n, lanes))
    funcs.append(elementwise("from_bits", ["int32"], "float32",
                             lambda x: Call(x.dtype.replace("int32", "float32"), "reinterpret", (x,)),
                             n, lanes))
    mod = build_module(funcs, target)
    x = rng.uniform(0.1, 3.0, n).astype("float32")
    for k, ref in unary.items():
        y = np.zeros(n, "float32")
        mod[f"m_{k}"](x, y)
        # libm's float functions are faithfully rounded: within 2 ulp of the float64 result
        np.testing.assert_allclose(y, ref(x.astype("float64")), rtol=2.5e-7, err_msg=k)
    y = np.zeros(n, "int32")
    mod["as_bits"](x, y)
    np.testing.assert_array_equal(y, x.view("int32"))
    back = np.zeros(n, "float32")
    mod["from_bits"](y, back)
    np.testing.assert_array_equal(back, x)

"""The core both back-ends share (kiln/codegen/emitter.py): dispatch, scoping, the cast
classification and the shared op sets, checked directly and through both back-ends."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codegen_helpers import TARGETS, elementwise, loop, run
from kiln.codegen import CodegenError, build_module
from kiln.codegen.common import prepare, wrap_int
from kiln.codegen.emitter import (BITWISE, FLOAT_MATH, BaseFunctionEmitter, argument_slot,
                                  cast_kind, dense_base)
from kiln.target import as_target
from kiln.tir import dtype as dt
from kiln.tir import (Add, Buffer, BufferLoad, BufferStore, Call, Cast, Evaluate, IntImm,
                      LetStmt, Mul, PrimFunc, Ramp, SeqStmt, Var, const)
from kiln.tir.expr import Let
from kiln.te.schedule import ScheduleError

SCALARS = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
           "float16", "float32", "float64"]


class _Printer(BaseFunctionEmitter):
    """The smallest back-end: integers and sums as text."""

    def e_IntImm(self, e):
        return str(e.value)

    def e_Add(self, e):
        return f"({self.expr(e.a)}+{self.expr(e.b)})"


def test_dispatch_names_the_function_and_the_construct():
    printer = _Printer(None, "kernel", 0)
    assert printer.expr(Add(IntImm("int32", 1), IntImm("int32", 2))) == "(1+2)"
    with pytest.raises(CodegenError, match=r"function 'kernel': cannot compile expression .*Mul"):
        printer.expr(Mul(IntImm("int32", 2), IntImm("int32", 3)))
    with pytest.raises(CodegenError, match=r"function 'kernel': cannot compile statement IntImm"):
        printer.stmt(SeqStmt.flatten(Evaluate(const(0)), IntImm("int32", 0)))
    # handlers are cached per emitter class, never in a sibling's table
    assert Add in _Printer._expr_table and Add not in BaseFunctionEmitter._expr_table


def test_let_rebinding_one_variable_sees_its_own_value():
    x = Var("x")
    one, two = IntImm("int32", 1), IntImm("int32", 2)
    # nested: the outer binding comes back (and its memoized values are not the inner ones)
    assert _Printer(None, "f", 0).expr(Let(x, one, Add(x, Add(Let(x, two, x), x)))) == "(1+(2+1))"
    # one after the other in one expression: the same body means two different values
    body = Add(x, x)
    assert _Printer(None, "f", 0).expr(Add(Let(x, one, body), Let(x, two, body))) == "((1+1)+(2+2))"


@pytest.mark.parametrize("target", TARGETS)
def test_two_lets_of_one_variable_in_one_statement(target, rng):
    # Y[i] = (let x = X[i] in x * x) + (let x = X[i] + 1 in x * x): one body, two values.
    X, Y = Buffer.make("X", "float64", (8,)), Buffer.make("Y", "float64", (8,))
    i, x = Var("i"), Var("x", "float64")
    square = x * x
    value = Let(x, BufferLoad(X, i), square) + Let(x, BufferLoad(X, i) + 1.0, square)
    data, y = rng.uniform(-2, 2, 8), np.zeros(8)
    run(PrimFunc("two_lets", [X, Y], loop(i, 8, BufferStore(Y, value, i))), target, data, y)
    np.testing.assert_allclose(y, data ** 2 + (data + 1) ** 2, rtol=1e-15)


@pytest.mark.parametrize("target", TARGETS)
def test_nested_letstmt_of_one_variable(target):
    # LetStmt x = 1 { LetStmt x = 2 { Y[0] = x }; Y[1] = x }: the outer x is visible again.
    Y = Buffer.make("Y", "int32", (2,))
    x = Var("x")
    body = LetStmt(x, const(1), SeqStmt.flatten(LetStmt(x, const(2), BufferStore(Y, x, const(0))),
                                                BufferStore(Y, x, const(1))))
    y = np.zeros(2, "int32")
    run(PrimFunc("shadow", [Y], body), target, y)
    np.testing.assert_array_equal(y, [2, 1])


@given(st.sampled_from(SCALARS), st.sampled_from(SCALARS))
def test_cast_kind_classification(src, dst):
    kind = cast_kind(src, dst)
    integral = {s for s in SCALARS if s.startswith(("int", "uint"))}
    same_bits = src in integral and dst in integral and dt.bits_of(src) == dt.bits_of(dst)
    assert (kind == "retag") == (src == dst or same_bits)
    if kind != "retag":
        assert (kind == "to_bool") == (dst == "bool")
    if src.startswith("float") and dst.startswith("float") and src != dst:
        wider = int(dst[5:]) > int(src[5:])
        assert kind in ("float_extend" if wider else "float_truncate", "double_to_half")
    if src == "bool" and dst != "bool":
        assert kind in ("zero_extend", "uint_to_float")
    assert cast_kind(f"{src}x8", f"{dst}x8") == kind          # lanes do not matter


# One pair per kind: both back-ends must agree with numpy's astype on in-range values.
CAST_CASES = [("uint8", "int8", "retag"), ("float32", "bool", "to_bool"),
              ("float64", "float16", "double_to_half"), ("float16", "float64", "float_extend"),
              ("float64", "float32", "float_truncate"), ("float32", "int16", "float_to_int"),
              ("float64", "uint32", "float_to_uint"), ("int64", "float32", "int_to_float"),
              ("uint16", "float64", "uint_to_float"), ("int8", "int64", "sign_extend"),
              ("uint8", "int32", "zero_extend"), ("bool", "int16", "zero_extend"),
              ("int64", "uint8", "truncate")]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 8])
def test_each_cast_kind_matches_numpy(target, lanes, rng):
    n = 64
    funcs, inputs = [], []
    for k, (src, dst, kind) in enumerate(CAST_CASES):
        assert cast_kind(src, dst) == kind
        vdst = dst if lanes == 1 else f"{dst}x{lanes}"
        funcs.append(elementwise(f"c{k}", [src], dst, lambda x, d=vdst: Cast(d, x), n, lanes))
        if src == "bool":
            x = rng.integers(0, 2, n).astype(bool)
        elif src.startswith("float"):
            x = rng.uniform(-100, 100, n).astype(src)
            x[:4] = [0.0, -0.0, np.nan, 0.5] if dst == "bool" else x[:4]
            if dst.startswith("uint"):
                x = np.abs(x)
        else:
            info = np.iinfo(src)
            x = rng.integers(info.min, info.max, n, endpoint=True).astype(src)
        inputs.append(x)
    mod = build_module(funcs, target)
    for k, ((src, dst, _), x) in enumerate(zip(CAST_CASES, inputs)):
        y = np.zeros(n, dst)
        mod[f"c{k}"](x, y)
        with np.errstate(invalid="ignore", over="ignore"):
            expected = x.astype(dst)
        # exact: every case above is correctly rounded (or exact) in numpy and in both back-ends
        np.testing.assert_array_equal(y, expected, err_msg=f"{src} -> {dst}")


_ARITY = {"pow": 2, "fmod": 2, "fma": 3}
_REFERENCE = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.round, "fabs": np.abs,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "pow": np.power,
    "fma": lambda a, b, c: a * b + c, "fmod": np.fmod, "erf": np.vectorize(math.erf),
    "log1p": np.log1p, "expm1": np.expm1, "atan": np.arctan, "asin": np.arcsin,
    "acos": np.arccos, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 4])
def test_every_shared_float_op_on_both_back_ends(target, lanes, rng):
    assert set(_REFERENCE) == FLOAT_MATH
    n = 32
    ops = sorted(FLOAT_MATH)
    funcs = [elementwise(f"m_{op}", ["float64"] * _ARITY.get(op, 1), "float64",
                         lambda *xs, op=op: Call(xs[0].dtype, op, xs), n, lanes) for op in ops]
    mod = build_module(funcs, target)
    args = [rng.uniform(0.05, 0.95, n) for _ in range(3)]     # inside every op's domain
    # but acosh's (x >= 1): NaN from both libm and numpy, which assert_allclose takes as equal
    for op in ops:
        y = np.zeros(n)
        mod[f"m_{op}"](*args[:_ARITY.get(op, 1)], y)
        # libm and numpy agree to a few ulp; a*b+c vs fma differs by one rounding
        np.testing.assert_allclose(y, _REFERENCE[op](*args[:_ARITY.get(op, 1)]), rtol=1e-13,
                                   atol=0, err_msg=op)


@pytest.mark.parametrize("target", TARGETS)
def test_shared_op_sets_reject_the_wrong_types_alike(target):
    f = elementwise("bad_exp", ["int32"], "int32", lambda x: Call("int32", "exp", (x,)), 8)
    with pytest.raises(CodegenError, match="'bad_exp'.*exp needs floating-point arguments"):
        build_module([f], target)
    g = elementwise("bad_op", ["int32"], "int32", lambda x: Call("int32", "no_such_op", (x,)), 8)
    with pytest.raises(CodegenError, match="'bad_op'.*unsupported intrinsic `no_such_op`"):
        build_module([g], target)
    assert "shift_right" in BITWISE and not BITWISE & FLOAT_MATH


def test_prepare_checks_lowers_and_describes():
    f = elementwise("ex", ["float32"], "float32", lambda x: Call("float32", "exp", (x,)), 16)
    prep = prepare([f], as_target("llvm"))
    assert list(prep.infos) == ["ex"] and prep.errors.messages == []
    assert "exp(" in str(f) and "exp(" not in str(prep.funcs[0])   # float32 exp is lowered
    assert [p.kind for p in prep.infos["ex"].params] == ["buffer", "buffer"]
    i = Var("i")
    X = Buffer.make("X", "float32", (8,))
    gpu = PrimFunc("gpu", [X], loop(i, 8, BufferStore(X, const(1.0), i), kind="thread_binding"))
    with pytest.raises(ScheduleError, match="'gpu'"):
        prepare([gpu], as_target("c"))


@given(st.integers(-(1 << 70), 1 << 70), st.sampled_from([8, 16, 32, 64]), st.booleans())
def test_wrap_int_matches_numpy(value, bits, signed):
    unsigned = np.array([value % (1 << bits)], dtype=f"uint{bits}")
    expected = int(unsigned.view(f"int{bits}")[0] if signed else unsigned[0])
    assert wrap_int(value, bits, signed) == expected


def test_small_shared_decisions():
    i = Var("i")
    assert dense_base(Ramp(i, const(1), 8)) is i
    assert dense_base(Ramp(i, const(2), 8)) is None and dense_base(i) is None
    slots = [argument_slot(p) for p in (Buffer.make("A", "float32", (4,)), Var("h", "handle"),
                                        Var("s", "float32"), Var("b", "bool"), Var("n", "int64"))]
    assert slots == ["handle", "handle", "float64", "int64", "int64"]

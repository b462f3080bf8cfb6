"""Broadcasting binary operators, comparisons, logic and where against numpy."""
import numpy as np
import pytest

import kiln
from kiln import te
from kiln.topi import broadcast as bc
from kiln.topi import elemwise as ew
from kiln.topi.utils import TopiError
from kiln.topi.x86.injective import schedule_injective


def run(outs, ins, arrays):
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    f = kiln.build(schedule_injective(outs), list(ins) + list(outs), target="llvm")
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=o.dtype) for o in outs]
    f(*arrays, *results)
    return results if len(results) > 1 else results[0]


SHAPES = [((4, 37), (4, 37)), ((4, 1), (19,)), ((3, 1, 5), (1, 6, 1)), ((17,), ()), ((2, 3, 4), (3, 1))]

ARITH = {
    "add": (bc.add, np.add), "subtract": (bc.subtract, np.subtract),
    "multiply": (bc.multiply, np.multiply), "divide": (bc.divide, np.divide),
    "maximum": (bc.maximum, np.maximum), "minimum": (bc.minimum, np.minimum),
    "power": (bc.power, np.power),
}


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("name", sorted(ARITH))
def test_float_arith_broadcast(name, sa, sb, rng):
    op, ref = ARITH[name]
    a = rng.uniform(0.5, 2, sa).astype("float32")
    b = rng.uniform(0.5, 2, sb).astype("float32")
    A, B = te.placeholder(sa, name="A"), te.placeholder(sb, name="B")
    C = op(A, B)
    assert C.shape == np.broadcast_shapes(sa, sb)
    assert C.op.tag == ("elemwise" if sa == sb else "broadcast")
    # float32 results within 2 ulps-ish of numpy's float32 (pow goes through exp/log).
    np.testing.assert_allclose(run(C, [A, B], [a, b]), ref(a, b), rtol=2e-6 if name != "power" else 1e-5)


def test_float64_tight(rng):
    A, B = te.placeholder((5, 1), "float64", name="A"), te.placeholder((7,), "float64", name="B")
    a, b = rng.standard_normal((5, 1)), rng.uniform(0.5, 2, 7)
    outs = run([bc.divide(A, B), bc.subtract(A, B), bc.floor_mod(A, B)], [A, B], [a, b])
    np.testing.assert_allclose(outs[0], a / b, rtol=1e-15)
    np.testing.assert_allclose(outs[1], a - b, rtol=1e-15)
    np.testing.assert_allclose(outs[2], np.mod(a, b), rtol=1e-12, atol=1e-14)


def test_python_scalars_on_either_side(rng):
    A = te.placeholder((3, 20), name="A")
    a = rng.uniform(0.5, 2, (3, 20)).astype("float32")
    outs = run([bc.subtract(1.0, A), bc.divide(A, 4), bc.power(A, 2.0), bc.maximum(0.75, A),
                bc.multiply(A, 3)], [A], [a])
    for got, want in zip(outs, [1 - a, a / 4, a ** 2, np.maximum(a, 0.75), a * 3]):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-6)


def test_integer_division_and_modulo(rng):
    A, B = te.placeholder((40,), "int32", name="A"), te.placeholder((40,), "int32", name="B")
    a = rng.integers(-50, 50, 40).astype("int32")
    b = rng.integers(1, 7, 40).astype("int32") * rng.choice([-1, 1], 40).astype("int32")
    fd, fm, td = run([bc.floor_divide(A, B), bc.floor_mod(A, B), bc.divide(A, B)], [A, B], [a, b])
    np.testing.assert_array_equal(fd, a // b)
    np.testing.assert_array_equal(fm, a % b)
    np.testing.assert_array_equal(td, np.trunc(a / b).astype("int32"))   # C / ONNX integer Div


def test_float_floor_divide_and_mod(rng):
    A, B = te.placeholder((4, 9), name="A"), te.placeholder((9,), name="B")
    a = rng.uniform(-10, 10, (4, 9)).astype("float32")
    b = rng.uniform(0.5, 3, 9).astype("float32") * np.where(np.arange(9) % 2, 1, -1).astype("float32")
    fd, fm = run([bc.floor_divide(A, B), bc.floor_mod(A, B)], [A, B], [a, b])
    np.testing.assert_array_equal(fd, np.floor_divide(a, b))
    # a - floor(a/b)*b in float32 vs numpy's fmod-based remainder: a few ulps of |a|.
    np.testing.assert_allclose(fm, np.mod(a, b), rtol=0, atol=1e-5)


CMP = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less,
       "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal}


@pytest.mark.parametrize("name", sorted(CMP))
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_comparisons(name, dtype, rng):
    A, B = te.placeholder((6, 1), dtype, name="A"), te.placeholder((21,), dtype, name="B")
    a = rng.integers(-3, 3, (6, 1)).astype(dtype)
    b = rng.integers(-3, 3, 21).astype(dtype)
    C = getattr(bc, name)(A, B)
    assert C.dtype == "bool"
    np.testing.assert_array_equal(run(C, [A, B], [a, b]), CMP[name](a, b))


def test_logical_ops_and_where(rng):
    M, N = te.placeholder((5, 1), "bool", name="M"), te.placeholder((33,), "bool", name="N")
    X, Y = te.placeholder((5, 33), name="X"), te.placeholder((33,), name="Y")
    I = te.placeholder((33,), "int32", name="I")
    m, n = rng.random((5, 1)) > 0.5, rng.random(33) > 0.5
    x, y = rng.standard_normal((5, 33)).astype("float32"), rng.standard_normal(33).astype("float32")
    i = rng.integers(-2, 2, 33).astype("int32")
    outs = run([bc.logical_and(M, N), bc.logical_or(M, N), bc.logical_xor(M, N), bc.logical_not(N),
                bc.where(M, X, Y), bc.where(N, 0.0, X), bc.logical_and(I, N)],
               [M, N, X, Y, I], [m, n, x, y, i])
    np.testing.assert_array_equal(outs[0], m & n)
    np.testing.assert_array_equal(outs[1], m | n)
    np.testing.assert_array_equal(outs[2], m ^ n)
    np.testing.assert_array_equal(outs[3], ~n)
    np.testing.assert_array_equal(outs[4], np.where(m, x, y))
    np.testing.assert_array_equal(outs[5], np.where(n, np.float32(0), x))
    np.testing.assert_array_equal(outs[6], (i != 0) & n)


def test_where_with_comparison_fused(rng):
    X = te.placeholder((7, 40), name="X")
    out = bc.where(bc.greater(X, 0.5), X, bc.multiply(X, -1.0))
    s = schedule_injective(out)
    assert "greater[" not in str(kiln.lower(s, [X, out]))      # the mask stage is inlined
    x = rng.standard_normal((7, 40)).astype("float32")
    np.testing.assert_array_equal(run(out, [X], [x]), np.where(x > 0.5, x, -x))


def test_fused_broadcast_epilogue_chain(rng):
    X, b = te.placeholder((2, 3, 5, 7), name="X"), te.placeholder((3, 1, 1), name="b")
    out = ew.relu(bc.add(bc.multiply(X, 2.0), b))
    x = rng.standard_normal((2, 3, 5, 7)).astype("float32")
    bv = rng.standard_normal((3, 1, 1)).astype("float32")
    np.testing.assert_allclose(run(out, [X, b], [x, bv]), np.maximum(x * 2 + bv, 0), rtol=1e-6)


def test_errors():
    A, B = te.placeholder((3, 4), name="A"), te.placeholder((5,), name="B")
    with pytest.raises(TopiError, match=r"add: shapes \(3, 4\), \(5,\) do not broadcast"):
        bc.add(A, B)
    with pytest.raises(TopiError, match="dtypes differ"):
        bc.add(A, te.placeholder((4,), "float64", name="D"))
    with pytest.raises(TopiError, match="at least one operand"):
        bc.add(1, 2)
    with pytest.raises(TopiError, match="power needs floating-point"):
        bc.power(te.placeholder((3,), "int32", name="I"), 2)
    with pytest.raises(TopiError, match="cannot take the int32 dtype"):
        bc.add(te.placeholder((3,), "int32", name="I"), 0.5)
    with pytest.raises(TopiError, match="operand 1 must be a te.Tensor or a Python number"):
        bc.multiply(A, "x")


def test_symbolic_batch(rng):
    n = te.var("n")
    X, b = te.placeholder((n, 20), name="X"), te.placeholder((20,), name="b")
    out = ew.relu(bc.add(X, b))
    f = kiln.build(schedule_injective(out), [X, b, out], target="llvm")
    bv = rng.standard_normal(20).astype("float32")
    for rows in (1, 9):
        x = rng.standard_normal((rows, 20)).astype("float32")
        got = np.zeros((rows, 20), "float32")
        f(x, bv, got)
        np.testing.assert_array_equal(got, np.maximum(x + bv, 0))

"""detect_linear."""
from kiln.arith import detect_linear
from kiln.tir import Var, const
from kiln.tir import op


def test_integer_coefficients_and_base():
    i, j, n = Var("i"), Var("j"), Var("n")
    assert detect_linear(i * 4 + j * n + 3, [i, j]) == [const(4), n, const(3)]
    c = detect_linear((i + 1) * (n + 2) - i, [i])
    assert c[0] is n + 1 and c[1] is n + 2


def test_non_linear_is_none():
    i, j = Var("i"), Var("j")
    assert detect_linear(i * j, [i, j]) is None
    assert detect_linear(i * i, [i]) is None
    assert detect_linear(i // 4, [i]) is None
    assert detect_linear(op.min_(i, 3) + 1, [i]) is None


def test_absent_var_has_zero_coefficient():
    i, j = Var("i"), Var("j")
    assert detect_linear(j * 2, [i]) == [const(0), j * 2]


def test_float_expressions_structurally():
    x = Var("x", "float32")
    y = Var("y", "float32")
    c = detect_linear(x * 2.0 + y, [x])
    assert c[0] is const(2.0) and c[1] is y
    assert detect_linear(x * x, [x]) is None

"""Symbolic dimensions of an execution graph: evaluating them and binding them from inputs."""
import pytest

from kiln.runtime.packed_func import ArgumentError
from kiln.runtime.symbolic import DimError, bind, evaluate, names


@pytest.mark.parametrize("dim, env, value", [
    (7, {}, 7),
    ("seq", {"seq": 5}, 5),
    ("(seq * 12)", {"seq": 5}, 60),
    ("((n + 3) // 4)", {"n": 9}, 3),
    ("((n - 1) % 4)", {"n": 9}, 0),
    ("max(a, (b * 2))", {"a": 3, "b": 4}, 8),
    ("min(a, 2)", {"a": 3}, 2),
    ("(-1 + seq)", {"seq": 5}, 4),
])
def test_evaluate(dim, env, value):
    assert evaluate(dim, env) == value


@pytest.mark.parametrize("text", ["__import__('os')", "a.b", "x ** 2", "a if b else c",
                                  "[1]", "seq(", "1.5", "abs(n)", "max(a)", "(min * 2)",
                                  "max(n, min)", "__builtins__", "(n // 0)"])
def test_only_size_arithmetic_is_evaluated(text):
    with pytest.raises(DimError, match="dimension"):
        evaluate(text, {"a": 1, "b": 1, "c": 1, "x": 1, "n": 1, "seq": 1})


def test_an_unbound_name_is_named():
    with pytest.raises(DimError, match="names 'm', which no input binds"):
        evaluate("(n * m)", {"n": 2})


def test_names():
    assert names("max(a, (b * 2))") == {"a", "b"}
    assert names(4) == set()


RANGES = {"seq": [1, 64], "batch": [1, None]}


def test_bind_reads_every_dimension_once():
    env = bind(RANGES, [("ids", ["batch", "seq"], (2, 9)), ("mask", ["batch", "seq"], (2, 9)),
                        ("pairs", ["(seq * 2)", 3], (18, 3))])
    assert env == {"seq": 9, "batch": 2}


@pytest.mark.parametrize("inputs, message", [
    ([("ids", ["batch", "seq"], (2,))], r"input 'ids': expected 2 dimensions \(batch, seq\)"),
    ([("ids", ["batch", "seq"], (2, 65))], r"dimension 1 \(seq\) is 65, outside its range "
                                           r"\[1, 64\]"),
    ([("ids", ["batch", "seq"], (0, 3))], r"dimension 0 \(batch\) is 0, outside its range "
                                          r"\[1, \.\.\.\)"),
    ([("ids", ["batch", 4], (2, 5))], r"dimension 1 must be 4, got 5"),
    ([("ids", ["batch", "seq"], (2, 9)), ("mask", ["batch", "seq"], (2, 8))],
     r"inputs 'ids' and 'mask' disagree on seq: 9 and 8"),
    ([("sq", ["seq", "seq"], (3, 4))], r"input 'sq': two dimensions disagree on seq: 3 and 4"),
    ([("ids", ["batch", "seq"], (2, 9)), ("pairs", ["(seq * 2)", 3], (17, 3))],
     r"input 'pairs': dimension 0 \(\(seq \* 2\)\) must be 18 here, got 17"),
    ([("ids", ["batch", 4], (2, 4))], r"no input's shape gives symbolic dimension\(s\) \['seq'\]"),
])
def test_bind_errors_name_the_input_and_dimension(inputs, message):
    with pytest.raises(ArgumentError, match=message):
        bind(RANGES, inputs)


def test_one_input_alone_is_checked_without_the_others():
    assert bind(RANGES, [("ids", ["batch", 4], (3, 4))], complete=False) == {"batch": 3}
    with pytest.raises(ArgumentError, match="outside its range"):
        bind(RANGES, [("ids", ["seq"], (100,))], complete=False)

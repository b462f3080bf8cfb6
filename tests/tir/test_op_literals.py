"""Python numbers in expressions take the other operand's type; one that does not fit it is
an error, never a silent wrap (`i + (1 << 34)` must not become `i + 0`)."""
import pytest

from kiln.tir import Var, op
from kiln.tir.op import IRError


def test_literal_adopts_the_operand_type_when_it_fits():
    i = Var("i")
    assert (i + 5).dtype == "int32" and (i + (2**31 - 1)).dtype == "int32"
    j = Var("j", "int64")
    assert (j + (1 << 34)).dtype == "int64"
    x = Var("x", "float32")
    assert (x + (1 << 34)).dtype == "float32"


@pytest.mark.parametrize("dtype,value", [("int32", 1 << 34), ("int32", 2**31), ("int32", -2**31 - 1),
                                         ("uint8", 256), ("int8", -129)])
def test_literal_that_does_not_fit_is_an_error(dtype, value):
    v = Var("v", dtype)
    with pytest.raises(IRError, match=f"the literal {value} does not fit the {dtype}"):
        v + value
    with pytest.raises(IRError, match="does not fit"):
        value * v
    # The fix the message suggests works.
    assert (op.cast(v, "int64") + value).dtype == "int64"

"""FunctionInfo / ParamInfo: validation and JSON round trips."""
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln.runtime import FunctionInfo, ParamInfo

DTYPES = ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"]


@st.composite
def function_infos(draw):
    size_names = draw(st.lists(st.sampled_from("nmkpq"), unique=True, max_size=3))
    params, used = [], set()
    for k in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            shape = tuple(draw(st.lists(st.one_of(st.integers(0, 9), st.sampled_from(size_names))
                                        if size_names else st.integers(0, 9), max_size=3)))
            used |= {e for e in shape if isinstance(e, str)}
            params.append(ParamInfo(f"p{k}", "buffer", draw(st.sampled_from(DTYPES)), shape))
        else:
            params.append(ParamInfo(f"p{k}", "scalar", draw(st.sampled_from(DTYPES))))
    shape_vars = tuple((n, draw(st.sampled_from(["int32", "int64"]))) for n in sorted(used))
    return FunctionInfo("f", tuple(params), shape_vars)


@given(function_infos())
def test_json_round_trip(info):
    text = info.to_json()
    assert json.loads(text)["name"] == "f"
    again = FunctionInfo.from_json(text)
    assert again == info and hash(again) == hash(info)
    assert FunctionInfo.from_json(json.loads(text)) == info


def test_lists_become_tuples_and_dtypes_canonical():
    import numpy as np
    p = ParamInfo("A", "buffer", np.float32, ["n", 4])
    assert p.shape == ("n", 4) and p.dtype == "float32"
    info = FunctionInfo("f", [p], [["n", "int64"]])
    assert info.params == (p,) and info.shape_vars == (("n", "int64"),)
    assert info.signature() == "f(A: float32[n, 4])"


@pytest.mark.parametrize("args, message", [
    (("A", "tensor", "float32"), "kind must be 'buffer' or 'scalar'"),
    (("", "buffer", "float32"), "non-empty string"),
    (("A", "buffer", "complex64"), "unsupported dtype"),
    (("A", "buffer", "float32", (-1,)), "extent -1 must be"),
    (("A", "buffer", "float32", (2.5,)), "extent 2.5 must be"),
    (("x", "scalar", "int32", (1,)), "cannot have a shape"),
])
def test_bad_params(args, message):
    with pytest.raises((ValueError, TypeError), match=message):
        ParamInfo(*args)


def test_bad_functions():
    a = ParamInfo("A", "buffer", "float32", ("n",))
    with pytest.raises(ValueError, match=r"symbolic sizes \['n'\] appear in buffer shapes"):
        FunctionInfo("f", (a,))
    with pytest.raises(ValueError, match=r"shape_vars \['m'\] are no buffer dimension"):
        FunctionInfo("f", (a,), (("n", "int64"), ("m", "int64")))
    with pytest.raises(ValueError, match="parameter names repeat"):
        FunctionInfo("f", (a, a), (("n", "int64"),))
    with pytest.raises(ValueError, match="symbolic sizes are int32 or int64"):
        FunctionInfo("f", (a,), (("n", "float32"),))


def test_an_extent_may_be_an_expression_of_bound_sizes():
    a = ParamInfo("A", "buffer", "float32", ("n",))
    b = ParamInfo("B", "buffer", "float32", ("m",))
    c = ParamInfo("C", "buffer", "float32", ("(n + m)",))
    info = FunctionInfo("cat", (a, b, c), (("n", "int64"), ("m", "int64")),
                        {"n": (1, 8), "m": (1, None)})
    assert FunctionInfo.from_json(info.to_json()) == info
    assert info.bounds == {"n": (1, 8), "m": (1, None)}
    with pytest.raises(ValueError, match=r"shape_vars \['m'\] are no buffer dimension by "
                                         r"themselves"):
        FunctionInfo("f", (a, ParamInfo("D", "buffer", "float32", ("(n * m)",))),
                     (("n", "int64"), ("m", "int64")))
    with pytest.raises(ValueError, match=r"symbolic sizes \['k'\] appear in buffer shapes"):
        FunctionInfo("f", (a, ParamInfo("D", "buffer", "float32", ("(n + k)",))),
                     (("n", "int64"),))
    with pytest.raises(ValueError, match=r"bounds name \['k'\], which are not shape_vars"):
        FunctionInfo("f", (a,), (("n", "int64"),), {"k": (1, 2)})

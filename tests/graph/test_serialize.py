"""The JSON form of graph functions: fused kernels of small models round-trip to the same text
and the same loop program; sharing, constants, attributes and spans survive; bad data fails
with a SerializeError naming what is wrong."""
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kiln import te
from kiln.driver.compile import kernel_calls
from kiln.driver.lower_graph import lower_primitive
from kiln.driver.stages import module_at_stage
from kiln.frontend import from_pytorch
from kiln.graph import (Attrs, Call, Function, If, Let, TensorType, Tuple, TupleGetItem, call,
                        const, post_order, to_text, var)
from kiln.graph.serialize import (SerializeError, expr_from_json, expr_to_json,
                                  function_from_json, function_to_json)
from kiln.testing.models import bert, example_input


def roundtrip(e):
    """Through strict JSON text, as another process would receive it."""
    return expr_from_json(json.loads(json.dumps(expr_to_json(e), allow_nan=False)))


class ConvNet(nn.Module):
    """conv+bn+relu, pool, a concatenate then split (a kernel with tuple outputs), dense,
    layer norm, softmax and a reduction: most of the kernel shapes kiln fuses."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.branch = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8, 10)
        self.norm = nn.LayerNorm(10)

    def forward(self, x):
        y = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        y = torch.cat([y, torch.sigmoid(self.branch(y))], 1)
        a, b = torch.split(y, 8, dim=1)
        y = F.adaptive_avg_pool2d(a * b + a, 1).flatten(1)
        return F.softmax(self.norm(self.fc(y)), -1), b.max(1)[0]


def _conv_net():
    return ConvNet().eval(), (torch.randn(1, 3, 8, 8),)


def _bert():
    model = bert(layers=1, hidden=16, heads=2, vocab_size=20, max_position=16)
    return model, example_input(model, seq_len=8)


@pytest.mark.parametrize("build", [_conv_net, _bert], ids=["convnet", "bert"])
def test_fused_kernels_round_trip_to_the_same_text_and_loop_program(build):
    model, inputs = build()
    mod, params = from_pytorch(model, inputs)
    calls = kernel_calls(module_at_stage(mod, "fused", "llvm", params)["main"])
    assert len(calls) > 5
    for c, name in calls.items():
        data = function_to_json(c.op)
        back = function_from_json(json.loads(json.dumps(data, allow_nan=False)))
        assert to_text(back) == to_text(c.op), name
        assert str(lower_primitive(back, name)) == str(lower_primitive(c.op, name)), name


def test_shared_nodes_stay_shared_and_each_is_written_once():
    x = var("x", (2, 3))
    y = call("nn.relu", x)
    fn = Function([x], Tuple([call("add", y, y), y]))
    data = function_to_json(fn)
    assert len(data["nodes"]) == len(post_order(fn)) == 5     # fn, x, relu, add, tuple
    back = roundtrip(fn)
    add, relu = back.body.fields
    assert add.args[0] is add.args[1] is relu and relu.args[0] is back.params[0]


def test_calls_of_functions_let_if_tuples_and_spans():
    p = var("p0", (4,))
    prim = Function([p], call("exp", p, span="inner.exp"),
                    {"Primitive": 1, "Name": "fused_exp"})
    x, c = var("x", (4,)), var("c", (), "bool")
    t = Tuple([Call(prim, [x], span="model.exp"), x], span="pair")
    v = var("v", (4,))
    body = Let(v, TupleGetItem(t, -1), If(c, v, call("nn.relu", v), span="branch"))
    fn = Function([x, c], body, span="main")
    back = roundtrip(fn)
    assert to_text(back) == to_text(fn)
    assert [n.span for n in post_order(back)] == [n.span for n in post_order(fn)]
    assert [n.checked_type for n in post_order(back)] == [n.checked_type for n in post_order(fn)]


def test_symbolic_dimensions_stay_one_variable():
    n = te.var("n")
    x = var("x", (n, 16))
    fn = Function([x], call("nn.dense", x, var("w", (8, 16))))
    back = roundtrip(fn)
    assert to_text(back) == to_text(fn)
    dim = back.params[0].checked_type.shape[0]
    assert dim is back.body.checked_type.shape[0] and dim is not n and dim.name == "n"


def test_size_expressions_and_size_attributes_round_trip():
    # A flattened dynamic length (n * 16) in a type, and a reshape whose attribute names n.
    n = te.size_var("n")
    x = var("x", (n, 4, 4))
    flat = call("reshape", x, newshape=(n * 16,))
    back = roundtrip(Function([x], call("reshape", flat, newshape=(n, 16))))
    m = back.params[0].checked_type.shape[0]
    assert m.name == "n" and m is not n
    inner = back.body.args[0]
    assert inner.checked_type.shape[0].a is m          # (n * 16), over the one variable
    assert str(inner.checked_type.shape[0]) == str(n * 16)
    assert back.body.attrs.newshape[0] is m and back.body.checked_type.shape == (m, 16)


@pytest.mark.parametrize("value", [
    np.array([np.inf, -np.inf, np.nan, -0.0, 1e-45], "float32"),
    np.array([65504, np.nan, -np.inf, 6e-8], "float16"),
    np.array([2**62, -2**63, 7], "int64"),
    np.array([[True, False], [False, True]]),
    np.array(3, "uint8"),
    np.random.default_rng(0).standard_normal((3, 5, 7)),
    np.zeros((0, 4), "int32"),
], ids=["float32", "float16", "int64", "bool", "uint8-scalar", "float64", "empty"])
def test_constants_round_trip_bit_for_bit(value):
    back = roundtrip(const(value))
    assert back.data.dtype == value.dtype and back.data.shape == value.shape
    assert back.data.tobytes() == value.tobytes()
    assert back.checked_type == const(value).checked_type


def test_attrs_keep_their_values_types_and_order():
    attrs = {"Name": "k", "inf": math.inf, "neg": -math.inf, "nan": math.nan, "zero": -0.0,
             "one": 1.0, "int": 1, "flag": True, "none": None, "pad": ((1, 2), ()),
             "nested": Attrs({"b": (math.inf, "s"), "a": False})}
    x = var("x", (2,))
    fn = Function([x], call("nn.leaky_relu", x, alpha=math.inf), attrs)
    back = roundtrip(fn)
    assert to_text(back) == to_text(fn)

    def shape_of(v):   # nan != nan, so compare text and exact Python types
        if isinstance(v, (tuple, Attrs)):
            items = v.items() if isinstance(v, Attrs) else enumerate(v)
            return type(v), [(k, shape_of(x)) for k, x in items]
        return type(v), repr(v)
    assert shape_of(back.attrs) == shape_of(fn.attrs)
    assert list(back.attrs) == list(attrs)
    assert back.body.attrs == fn.body.attrs


def _data():
    x = var("x", (2, 3))
    return function_to_json(Function([x], call("nn.relu", call("exp", x))))


def _edit(change):
    data = json.loads(json.dumps(_data()))
    change(data)
    return data


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(version=99), r"unsupported format version 99; this kiln reads version 1"),
    (lambda d: d.pop("version"), r"unsupported format version None"),
    (lambda d: d.update(format="onnx"), r"not kiln graph data: format 'onnx'"),
    (lambda d: d["nodes"][1].update(op="nn.relu_typo"),
     r"node 1 \(Call\): unknown operator 'nn.relu_typo'"),
    (lambda d: d["nodes"][1].update(kind="Lambda"), r"node 1: unknown node kind 'Lambda'"),
    (lambda d: d["nodes"][1].update(args=[2]), r"node 1 \(Call\) field 'args': 2 is not the "
                                               r"index of an earlier node"),
    (lambda d: d["nodes"][1].pop("type"), r"node 1 \(Call exp\): missing field 'type'"),
    (lambda d: d["nodes"][0]["type"].update(dtype="float64"),
     r"node 1 \(Call exp\): written with type Tensor\[\(2, 3\), float32\], but its operator "
     r"infers Tensor\[\(2, 3\), float64\]"),
    (lambda d: d["nodes"][0]["type"].update(shape=[2, True]),
     r"node 0 \(Var\): dimension True is neither an int"),
    (lambda d: d["nodes"][0]["type"].update(kind="Tensor"), r"unknown type kind 'Tensor'"),
    (lambda d: d["nodes"][1].update(attrs=[["a", {"float": "1e999"}]]),
     r"node 1 \(Call\) attribute 'a': .* is not an attribute value"),
    (lambda d: d["nodes"][1].update(attrs=[["alpha", 1]]),
     r"node 1 \(Call exp\): unknown attribute\(s\) \['alpha'\]; known: \[\]"),
    (lambda d: d["nodes"][3].update(params=[1]), r"node 3 \(Function\) field 'params': node 1 "
                                                 r"is a Call, not a Var"),
    (lambda d: d.update(nodes=[]), r"graph data has no nodes"),
    (lambda d: d["nodes"].__setitem__(0, "x"), r"node 0: must be a JSON object"),
], ids=["version", "no-version", "format", "unknown-op", "unknown-kind", "forward-ref",
        "missing-field", "type-mismatch", "bad-dim", "unknown-type", "bad-float-tag",
        "bad-attrs", "param-not-var", "no-nodes", "node-not-object"])
def test_malformed_data_names_what_is_wrong(change, message):
    with pytest.raises(SerializeError, match=message):
        function_from_json(_edit(change))


def test_constant_data_errors():
    good = expr_to_json(const(np.arange(4, dtype="int64")))

    def bad(**fields):
        data = json.loads(json.dumps(good))
        data["nodes"][0].update(fields)
        return data
    with pytest.raises(SerializeError, match=r"node 0 \(Constant\): data is not base64"):
        expr_from_json(bad(data="not base64!"))
    with pytest.raises(SerializeError, match=r"16 bytes of data for shape \(3,\) of int64, "
                                             r"expected 24"):
        expr_from_json(bad(data="AAAAAAAAAAAAAAAAAAAAAA==", shape=[3]))
    with pytest.raises(SerializeError, match=r"unknown constant dtype 'object'"):
        expr_from_json(bad(dtype="object"))


def test_writing_and_reading_the_wrong_things():
    assert issubclass(SerializeError, ValueError)
    x = var("x", (2,))
    with pytest.raises(SerializeError, match=r"expected a Function, got Call"):
        function_to_json(call("exp", x))
    with pytest.raises(SerializeError, match=r"graph data holds a Call, not a Function"):
        function_from_json(expr_to_json(call("exp", x)))
    with pytest.raises(SerializeError, match=r"graph data must be a JSON object, got list"):
        expr_from_json([])
    with pytest.raises(SerializeError, match=r"node 1 attribute 'Name': value .* of type "
                                             r"object has no JSON form"):
        function_to_json(Function([x], x, {"Name": object()}))
    with pytest.raises(SerializeError, match=r"symbolic dimension .* is not a variable or "
                                             r"\+ - \* // % min max of them"):
        expr_to_json(var("y", (te.var("n").astype("int64"),)))

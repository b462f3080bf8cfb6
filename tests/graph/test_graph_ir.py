"""The graph IR: typing at construction, errors naming the op, printer, deep graphs, equality."""
import numpy as np
import pytest

from kiln.graph import (AttrError, ExprMutator, Function, GraphTypeError, IRModule, TensorType,
                        Tuple, TupleGetItem, call, const, post_order, structural_equal, to_text, var)


def test_types_are_inferred_when_built():
    x = var("x", (1, 3, 224, 224))
    w = const(np.zeros((64, 3, 7, 7), "float32"))
    y = call("nn.conv2d", x, w, strides=(2, 2), padding=(3, 3))
    assert y.checked_type == TensorType((1, 64, 112, 112), "float32")
    r = call("nn.relu", call("nn.bias_add", y, const(np.zeros(64, "float32"))))
    assert r.checked_type == y.checked_type


def test_printer_format():
    x = var("x", (1, 3, 8, 8))
    w = var("w", (4, 3, 3, 3))
    y = call("nn.conv2d", x, w, strides=(2, 2), padding=1)
    text = to_text(Function([x, w], y))
    assert "%0 = nn.conv2d(%x, %w, strides=[2, 2]" in text
    assert "/* ty=Tensor[(1, 4, 4, 4), float32] */" in text


def test_type_error_names_op_inputs_and_node():
    x = var("x", (1, 3, 8, 8))
    w = var("w", (4, 2, 3, 3))
    with pytest.raises(GraphTypeError, match=r"nn.conv2d at layer1.conv: data has 3 channels.*"
                                             r"input types: Tensor\[\(1, 3, 8, 8\), float32\]"):
        call("nn.conv2d", x, w, span="layer1.conv")
    with pytest.raises(GraphTypeError, match=r"add: shapes \(2, 3\) and \(4,\) do not broadcast"):
        call("add", var("a", (2, 3)), var("b", (4,)))


def test_unknown_and_missing_attributes():
    x = var("x", (2, 6))
    with pytest.raises(AttrError, match=r"nn.relu: unknown attribute\(s\) \['alpha'\]"):
        call("nn.relu", x, alpha=1)
    with pytest.raises(AttrError, match=r"reshape: attribute 'newshape' is required"):
        call("reshape", x)
    assert call("reshape", x, newshape=(3, -1)).checked_type.shape == (3, 4)


def test_tuples():
    a, b = var("a", (2,)), var("b", (3,), "int32")
    t = Tuple([a, b])
    assert TupleGetItem(t, 1).checked_type == TensorType((3,), "int32")
    with pytest.raises(GraphTypeError, match="out of range"):
        TupleGetItem(t, 2)


def test_deep_graph_without_recursion():
    """A chain far deeper than Python's recursion limit: traverse, rewrite, print, compare."""
    x = var("x", (4,))
    y = x
    for _ in range(30000):
        y = call("nn.relu", y)
    f = Function([x], y)
    assert len(post_order(f)) == 30002

    class ReluToTanh(ExprMutator):
        def rewrite_Call(self, c, op, args):
            return call("tanh", *args)

    g = ReluToTanh().visit(f)
    assert g.body.op.name == "tanh" and len(post_order(g)) == 30002
    assert to_text(g).count("tanh(") == 30000
    assert not structural_equal(f, g)
    assert structural_equal(g, ReluToTanh().visit(f))


def test_structural_equality_maps_params():
    def build(shape):
        x = var("x", shape)
        return Function([x], call("add", call("nn.relu", x), const(np.float32(1))))

    assert structural_equal(build((2, 2)), build((2, 2)))
    assert not structural_equal(build((2, 2)), build((2, 3)))


def test_module():
    x = var("x", (2,))
    mod = IRModule.from_expr(Function([x], call("exp", x)))
    assert "def @main" in repr(mod)
    with pytest.raises(KeyError, match="no function 'other'"):
        mod["other"]

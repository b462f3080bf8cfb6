"""The dataflow pattern language (kiln.graph.pattern) and MergeComposite (Before → Expected)."""
import numpy as np
import pytest

from kiln.graph import (Call, Function, IRModule, TupleGetItem, Var, call, const,
                        structural_equal, var)
from kiln.graph.pattern import is_constant, is_op, is_tuple_get_item, match, wildcard
from kiln.graph.transform import MergeComposite, merge_composite


def _qconv_graph(x):
    w = const(np.ones((8, 4, 3, 3), "int8"))
    conv = call("nn.conv2d", x, w, padding=(1, 1), out_dtype="int32")
    shift = call("right_shift", conv, const(np.int32(4)))
    clip = call("clip", shift, a_min=-128, a_max=127)
    return conv, shift, clip, call("cast", clip, dtype="int8")


def _qconv_pattern():
    conv = is_op("nn.conv2d")(wildcard(), is_constant())
    shift = is_op("right_shift")(conv, is_constant())
    return is_op("cast")(is_op("clip")(shift))


def _composite(name, params, body):
    return Function(params, body, {"Composite": name, "Primitive": 1})


def test_match_binds_consistently_and_checks_ops_attrs_and_fields():
    x, y = var("x", (2, 3)), var("y", (2, 3))
    a = wildcard()
    same = is_op("add")(a, a)
    assert same.match(call("add", x, x))
    assert not same.match(call("add", x, y))          # one pattern object, one expression
    assert is_op("add")(wildcard(), wildcard()).match(call("add", x, y))
    assert not is_op("subtract")(wildcard(), wildcard()).match(call("add", x, y))
    assert not is_op("exp")(wildcard(), wildcard()).match(call("exp", x))   # arity
    relu_or_exp = is_op("nn.relu")(a) | is_op("exp")(a)
    assert relu_or_exp.match(call("exp", x)) and not relu_or_exp.match(call("sqrt", x))
    clip = is_op("clip")(wildcard()).has_attr({"a_min": 0.0})
    assert clip.match(call("clip", x, a_min=0.0, a_max=6.0))
    assert not clip.match(call("clip", x, a_min=-1.0, a_max=6.0))
    strided = is_op("nn.conv2d")(wildcard(), is_constant()).has_attr({"strides": [2, 2]})
    w = const(np.ones((4, 3, 1, 1), "float32"))
    xi = var("x", (1, 3, 8, 8))
    assert strided.match(call("nn.conv2d", xi, w, strides=(2, 2)))
    assert not strided.match(call("nn.conv2d", xi, w))
    assert not strided.match(call("nn.conv2d", xi, var("w", (4, 3, 1, 1)), strides=(2, 2)))
    first = is_tuple_get_item(is_op("split")(wildcard()), 0)
    parts = call("split", x, indices_or_sections=3, axis=1)
    assert first.match(TupleGetItem(parts, 0)) and not first.match(TupleGetItem(parts, 1))
    assert is_tuple_get_item(wildcard()).match(TupleGetItem(parts, 2))
    env = match(is_op("exp")(a), call("exp", x))
    assert env[a] is x


def test_pattern_errors_name_the_problem():
    with pytest.raises(KeyError, match="nn.nope"):
        is_op("nn.nope")
    with pytest.raises(TypeError, match="not a pattern"):
        is_op("exp")("x")
    with pytest.raises(ValueError, match="wildcard"):
        merge_composite(Function([var("x", (2,))], var("x", (2,))), [("t.any", wildcard())])
    with pytest.raises(ValueError, match=r"entry 0 .*\(name, pattern\)"):
        merge_composite(Function([var("x", (2,))], var("x", (2,))), [("t.exp",)])


def test_conv_shift_clip_cast_becomes_one_composite():
    x = var("x", (1, 4, 8, 8), "int8")
    *_, out = _qconv_graph(x)
    after = merge_composite(Function([x], out), [("t.qconv", _qconv_pattern())])

    p0 = var("p0", (1, 4, 8, 8), "int8")
    *_, inner = _qconv_graph(p0)          # the constants stay inside the body
    expected = Function([x], Call(_composite("t.qconv", [p0], inner), [x]))
    assert structural_equal(after, expected), after


def test_interior_node_used_outside_is_not_merged():
    x = var("x", (1, 4, 8, 8), "int8")
    conv, shift, clip, out = _qconv_graph(x)
    before = Function([x], call("add", out, call("cast", shift, dtype="int8")))
    assert structural_equal(merge_composite(before, [("t.qconv", _qconv_pattern())]), before)
    # the shorter pattern whose interior is private still merges
    shorter = is_op("right_shift")(is_op("nn.conv2d")(wildcard(), is_constant()), is_constant())
    after = merge_composite(before, [("t.qconv", _qconv_pattern()), ("t.conv_shift", shorter)])
    p0 = var("p0", (1, 4, 8, 8), "int8")
    _, inner_shift, _, _ = _qconv_graph(p0)
    merged = Call(_composite("t.conv_shift", [p0], inner_shift), [x])
    clip = call("clip", merged, a_min=-128, a_max=127)
    expected = Function([x], call("add", call("cast", clip, dtype="int8"),
                                  call("cast", merged, dtype="int8")))
    assert structural_equal(after, expected), after


def test_longest_pattern_first_and_check_and_wildcard_inputs():
    x, y = var("x", (4,)), var("y", (4,))
    before = Function([x, y], call("nn.relu", call("add", call("exp", x), y)))
    add = is_op("add")(wildcard(), wildcard())
    table = [("t.add_relu", is_op("nn.relu")(add)), ("t.add", is_op("add")(wildcard(), wildcard()))]
    after = merge_composite(before, table)
    p0, p1 = var("p0", (4,)), var("p1", (4,))
    fn = _composite("t.add_relu", [p0, p1], call("nn.relu", call("add", p0, p1)))
    assert structural_equal(after, Function([x, y], Call(fn, [call("exp", x), y])))

    # the check refuses the long match: the short one takes the add
    after = merge_composite(before, [("t.add_relu", is_op("nn.relu")(add), lambda c: False),
                                     ("t.add", is_op("add")(wildcard(), wildcard()))])
    fn = _composite("t.add", [p0, p1], call("add", p0, p1))
    assert structural_equal(after, Function([x, y], call("nn.relu", Call(fn, [call("exp", x), y]))))

    # a constant a wildcard matched is an input like any other; the same value enters once
    k = const(np.ones(4, "float32"))
    after = merge_composite(Function([x], call("add", call("add", x, k), x)),
                            [("t.add2", is_op("add")(is_op("add")(wildcard(), wildcard()),
                                                     wildcard()))])
    fn = _composite("t.add2", [p0, p1], call("add", call("add", p0, p1), p0))
    assert structural_equal(after, Function([x], Call(fn, [x, k])))


def test_matches_do_not_overlap_and_functions_are_not_entered():
    x = var("x", (4,))
    before = Function([x], call("exp", call("exp", call("exp", x))))
    pair = is_op("exp")(is_op("exp")(wildcard()))
    after = merge_composite(before, [("t.exp2", pair)])
    p0 = var("p0", (4,))
    fn = _composite("t.exp2", [p0], call("exp", call("exp", p0)))
    # producers first: the inner pair merges, the last exp stays
    assert structural_equal(after, Function([x], call("exp", Call(fn, [x]))))
    # running again finds nothing new: the composite's body is not entered
    assert structural_equal(merge_composite(after, [("t.exp2", pair)]), after)


def test_module_pass_leaves_external_functions_alone():
    x = var("x", (4,))
    ext_x = var("x", (4,))
    ext = Function([ext_x], call("exp", call("exp", ext_x)),
                   {"Compiler": "t", "global_symbol": "t_main_0", "Primitive": 1})
    mod = IRModule({"main": Function([x], call("exp", call("exp", x))), "t_main_0": ext})
    out = MergeComposite([("t.exp2", is_op("exp")(is_op("exp")(wildcard())))])(mod)
    assert out["t_main_0"] is ext
    assert isinstance(out["main"].body.op, Function)
    assert isinstance(merge_composite(mod, [("t.exp2", is_op("exp")(is_op("exp")(wildcard())))]),
                      IRModule)
    assert isinstance(out["main"].body.op.params[0], Var)

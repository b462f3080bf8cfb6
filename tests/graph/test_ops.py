"""The operator catalog: registration facts, type relations (shapes, dtypes, errors) and, per
op, a differential test: a one-op graph call lowered through the op's own compute and CPU
schedule with kiln.build, run, and compared with numpy / PyTorch.

Tolerances: float32 elementwise and transform ops 1e-5 (absolute and relative; transforms
and integer results are exact); ops with reductions (conv, dense, pooling, norms, softmax)
1e-4 relative to the output's magnitude; float64 1e-12.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import te
from kiln.graph import (AttrError, Call, GraphTypeError, OpPattern, TensorType, Tuple,
                        TupleType, call, get_op, list_ops, post_order, var)
from kiln.graph.ops.define import LoweringError

RNG = np.random.default_rng(0)

# The catalog every part of kiln uses (docs/add_operator.md; the issue 3 prompt).
UNARY = ["nn.relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "negative", "floor",
         "ceil", "round", "erf", "nn.silu", "nn.hardswish", "nn.hardsigmoid", "copy",
         "logical_not", "nn.leaky_relu", "clip", "nn.gelu", "cast"]
BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "floor_divide",
          "floor_mod", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
          "logical_and", "logical_or", "where", "nn.prelu", "nn.bias_add"]
ANCHORS = ["nn.conv2d", "nn.conv2d_transpose", "nn.dense", "nn.matmul", "nn.batch_matmul",
           "nn.max_pool2d", "nn.avg_pool2d", "nn.global_max_pool2d", "nn.global_avg_pool2d",
           "nn.adaptive_max_pool2d", "nn.adaptive_avg_pool2d", "image.resize2d", "nn.softmax",
           "nn.log_softmax", "nn.layer_norm", "nn.batch_norm", "nn.dropout"]
REDUCTIONS = ["sum", "mean", "max", "min", "prod", "argmax", "argmin"]
TRANSFORMS = ["reshape", "transpose", "concatenate", "split", "strided_slice", "take", "gather",
              "expand_dims", "squeeze", "nn.pad", "broadcast_to", "tile"]
CATALOG = UNARY + BINARY + ANCHORS + REDUCTIONS + TRANSFORMS


def rand(*shape, dtype="float32", low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape).astype(dtype)


def f32(shape, dtype="float32"):
    return var("x", shape, dtype)


# ---------------------------------------------------------------------------- registration
def test_catalog_is_registered_with_lowering_hooks():
    registered = set(list_ops())
    missing = [n for n in CATALOG if n not in registered]
    assert not missing, f"unregistered catalog ops: {missing}"
    for name in CATALOG:
        op = get_op(name)
        assert callable(op.compute), name
        assert callable(op.schedules.get("cpu")), name
        assert op.doc, name


def test_every_topi_function_named_by_the_registry_exists():
    """The compute and schedule hooks name kiln.topi functions that resolve on first use;
    check that each one exists, so a renamed topi function fails here and not mid-compile."""
    import kiln.graph.ops as ops_pkg
    from kiln.graph.ops.define import TopiRef
    refs = []
    for name in list_ops():
        op = get_op(name)
        refs += [getattr(h, "topi", None) for h in [op.compute, *op.schedules.values()]]
    for module in vars(ops_pkg).values():
        refs += [v for v in vars(module).values() if isinstance(v, TopiRef)] \
            if hasattr(module, "__dict__") else []
    refs = [r for r in refs if r is not None]
    assert len(refs) > 100
    missing = sorted({repr(r) for r in refs if not r.available})
    assert not missing, f"kiln.topi lacks {missing}"


@pytest.mark.parametrize("name,pattern", [
    ("nn.relu", OpPattern.ELEMWISE), ("exp", OpPattern.ELEMWISE), ("add", OpPattern.BROADCAST),
    ("less", OpPattern.BROADCAST), ("where", OpPattern.BROADCAST),
    ("nn.bias_add", OpPattern.BROADCAST), ("nn.batch_norm", OpPattern.BROADCAST),
    ("reshape", OpPattern.INJECTIVE), ("split", OpPattern.INJECTIVE),
    ("concatenate", OpPattern.INJECTIVE), ("nn.pad", OpPattern.INJECTIVE),
    ("take", OpPattern.INJECTIVE), ("sum", OpPattern.COMM_REDUCE),
    ("argmax", OpPattern.COMM_REDUCE), ("nn.conv2d", OpPattern.OUT_ELEMWISE_FUSABLE),
    ("nn.dense", OpPattern.OUT_ELEMWISE_FUSABLE), ("nn.batch_matmul", OpPattern.OUT_ELEMWISE_FUSABLE),
    ("nn.conv2d_transpose", OpPattern.OUT_ELEMWISE_FUSABLE),
    ("nn.max_pool2d", OpPattern.OUT_ELEMWISE_FUSABLE), ("nn.softmax", OpPattern.OUT_ELEMWISE_FUSABLE),
])
def test_fusion_patterns(name, pattern):
    assert get_op(name).pattern == pattern


def test_defaults_and_required_attributes():
    x = f32((2, 3, 8, 8))
    c = call("nn.max_pool2d", x, pool_size=(2, 2), strides=(2, 2))
    assert dict(c.attrs) == {"pool_size": (2, 2), "strides": (2, 2), "padding": (0, 0, 0, 0),
                             "dilation": (1, 1), "ceil_mode": False, "layout": "NCHW"}
    assert call("nn.gelu", x).attrs.approximate == "none"
    assert call("image.resize2d", x, size=(4, 4)).attrs.coordinate_transformation_mode == "half_pixel"
    for name, attr in [("nn.max_pool2d", "pool_size"), ("cast", "dtype"), ("reshape", "newshape"),
                       ("split", "indices_or_sections"), ("strided_slice", "begin"),
                       ("expand_dims", "axis"), ("nn.pad", "pad_width"), ("tile", "reps"),
                       ("broadcast_to", "shape"), ("image.resize2d", "size"),
                       ("nn.adaptive_avg_pool2d", "output_size")]:
        with pytest.raises(AttrError, match=f"{name}: attribute '{attr}' is required"):
            call(name, x)


# ---------------------------------------------------------------------------- type relations
def _types(name, args, attrs):
    return call(name, *args, **attrs).checked_type


TYPE_CASES = [
    # elementwise
    ("exp", [f32((2, 3))], {}, (2, 3), "float32"),
    ("nn.relu", [f32((2, 3), "int32")], {}, (2, 3), "int32"),
    ("cast", [f32((2, 3))], {"dtype": "int8"}, (2, 3), "int8"),
    ("logical_not", [f32((4,), "bool")], {}, (4,), "bool"),
    ("clip", [f32((4,), "int32")], {"a_min": 0.0, "a_max": 6.0}, (4,), "int32"),
    ("add", [f32((4, 1)), f32((3,))], {}, (4, 3), "float32"),
    ("multiply", [f32(()), f32((2, 5))], {}, (2, 5), "float32"),
    ("less", [f32((2, 1, 3)), f32((4, 1))], {}, (2, 4, 3), "bool"),
    ("where", [f32((4, 1), "bool"), f32((3,)), f32((1, 3))], {}, (4, 3), "float32"),
    ("nn.prelu", [f32((1, 3, 4, 4)), f32((1,))], {}, (1, 3, 4, 4), "float32"),
    ("nn.bias_add", [f32((2, 5, 7)), f32((7,))], {"axis": -1}, (2, 5, 7), "float32"),
    # anchors
    ("nn.conv2d", [f32((1, 3, 224, 224)), f32((64, 3, 7, 7))],
     {"strides": (2, 2), "padding": (3, 3, 3, 3)}, (1, 64, 112, 112), "float32"),
    ("nn.conv2d", [f32((1, 32, 15, 15)), f32((32, 1, 3, 3))],
     {"groups": 32, "padding": (0, 1, 1, 2), "dilation": (2, 1)}, (1, 32, 12, 16), "float32"),
    ("nn.conv2d", [f32((2, 9, 9, 4)), f32((3, 3, 2, 6))],
     {"groups": 2, "data_layout": "NHWC", "strides": 2}, (2, 4, 4, 6), "float32"),
    ("nn.conv2d", [f32((1, 3, 8, 8), "int8"), f32((4, 3, 1, 1), "int8")],
     {"out_dtype": "int32"}, (1, 4, 8, 8), "int32"),
    ("nn.conv2d_transpose", [f32((1, 4, 5, 5)), f32((4, 3, 3, 3))],
     {"strides": (2, 2), "padding": (1, 1, 1, 1), "output_padding": (1, 1)}, (1, 3, 10, 10),
     "float32"),
    ("nn.conv2d_transpose", [f32((1, 4, 5, 6)), f32((4, 2, 3, 2))],
     {"groups": 2, "dilation": (2, 1)}, (1, 4, 9, 7), "float32"),
    ("nn.dense", [f32((2, 7, 16)), f32((10, 16))], {}, (2, 7, 10), "float32"),
    ("nn.matmul", [f32((5, 3)), f32((4, 5))], {"transpose_a": True, "transpose_b": True}, (3, 4),
     "float32"),
    ("nn.batch_matmul", [f32((1, 4, 8)), f32((6, 8, 3))], {}, (6, 4, 3), "float32"),
    ("nn.batch_matmul", [f32((6, 8, 4)), f32((1, 3, 8))],
     {"transpose_a": True, "transpose_b": True}, (6, 4, 3), "float32"),
    ("nn.max_pool2d", [f32((1, 64, 112, 112))],
     {"pool_size": 3, "strides": 2, "padding": 1}, (1, 64, 56, 56), "float32"),
    ("nn.max_pool2d", [f32((1, 1, 6, 6))], {"pool_size": 3, "strides": 2, "ceil_mode": True},
     (1, 1, 3, 3), "float32"),
    ("nn.avg_pool2d", [f32((1, 1, 5, 5))],
     {"pool_size": 2, "strides": 2, "padding": (1, 1, 1, 1), "ceil_mode": True}, (1, 1, 3, 3),
     "float32"),
    ("nn.global_avg_pool2d", [f32((2, 8, 7, 7))], {}, (2, 8, 1, 1), "float32"),
    ("nn.adaptive_avg_pool2d", [f32((2, 8, 7, 9))], {"output_size": (3, None)}, (2, 8, 3, 9),
     "float32"),
    ("image.resize2d", [f32((1, 3, 4, 5))], {"size": (8, 10), "method": "linear"}, (1, 3, 8, 10),
     "float32"),
    ("nn.softmax", [f32((2, 3, 4))], {"axis": 1}, (2, 3, 4), "float32"),
    ("nn.layer_norm", [f32((2, 3, 4)), f32((3, 4)), f32((3, 4))], {"axis": -2}, (2, 3, 4),
     "float32"),
    ("nn.batch_norm", [f32((2, 3, 4))] + [f32((3,))] * 4, {}, (2, 3, 4), "float32"),
    ("nn.dropout", [f32((2, 3))], {"rate": 0.1}, (2, 3), "float32"),
    # reductions
    ("sum", [f32((2, 3, 4))], {}, (), "float32"),
    ("mean", [f32((2, 3, 4))], {"axis": (0, -1), "keepdims": True}, (1, 3, 1), "float32"),
    ("max", [f32((2, 3, 4))], {"axis": 1}, (2, 4), "float32"),
    ("argmax", [f32((2, 3, 4))], {"axis": -1}, (2, 3), "int64"),
    ("argmin", [f32((2, 3, 4))], {"keepdims": True}, (1, 1, 1), "int64"),
    # transforms
    ("reshape", [f32((2, 3, 4))], {"newshape": (4, -1)}, (4, 6), "float32"),
    ("transpose", [f32((2, 3, 4))], {}, (4, 3, 2), "float32"),
    ("transpose", [f32((2, 3, 4))], {"axes": (0, 2, 1)}, (2, 4, 3), "float32"),
    ("expand_dims", [f32((2, 3))], {"axis": -1, "num_newaxis": 2}, (2, 3, 1, 1), "float32"),
    ("squeeze", [f32((1, 3, 1))], {}, (3,), "float32"),
    ("squeeze", [f32((1, 3, 1))], {"axis": (0,)}, (3, 1), "float32"),
    ("strided_slice", [f32((10, 8))], {"begin": (1, -1), "end": (8, 0), "strides": (2, -3)},
     (4, 3), "float32"),
    ("strided_slice", [f32((10, 8))], {"begin": (-3,), "end": (2**63 - 1,), "axes": (1,)},
     (10, 3), "float32"),
    ("take", [f32((10, 4)), f32((2, 3), "int64")], {"axis": 0}, (2, 3, 4), "float32"),
    ("take", [f32((10, 4)), f32((5,), "int32")], {}, (5,), "float32"),
    ("gather", [f32((3, 4)), f32((3, 2), "int64")], {"axis": 1}, (3, 2), "float32"),
    ("nn.pad", [f32((1, 3, 5))], {"pad_width": ((0, 0), (1, 2), (3, 0))}, (1, 6, 8), "float32"),
    ("broadcast_to", [f32((3, 1))], {"shape": (2, 3, 4)}, (2, 3, 4), "float32"),
    ("tile", [f32((2, 3))], {"reps": (2, 1, 2)}, (2, 2, 6), "float32"),
]


@pytest.mark.parametrize("name,args,attrs,shape,dtype", TYPE_CASES,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(TYPE_CASES)])
def test_type_relation(name, args, attrs, shape, dtype):
    assert _types(name, args, attrs) == TensorType(shape, dtype)


def test_tuple_ops():
    a, b = f32((2, 3)), var("b", (2, 5))
    assert call("concatenate", Tuple([a, b]), axis=-1).checked_type == TensorType((2, 8))
    parts = call("split", f32((6, 4)), indices_or_sections=3).checked_type
    assert parts == TupleType([TensorType((2, 4))] * 3)
    parts = call("split", f32((6, 7)), indices_or_sections=(2, 5), axis=1).checked_type
    assert [t.shape for t in parts.fields] == [(6, 2), (6, 3), (6, 2)]


def test_symbolic_batch_passes_through():
    n = te.var("n")
    x = var("x", (n, 16))
    y = call("nn.relu", call("add", call("nn.dense", x, var("w", (8, 16))), var("b", (8,))))
    assert y.checked_type.shape[0] is n and y.checked_type.shape[1] == 8


ERROR_CASES = [
    ("exp", [f32((2,), "int32")], {}, r"input must have a floating-point dtype, got int32"),
    ("add", [f32((2, 3)), f32((2, 3), "float64")], {}, r"inputs have different dtypes"),
    ("add", [f32((2, 3)), f32((4,))], {}, r"shapes \(2, 3\) and \(4,\) do not broadcast"),
    ("power", [f32((2,), "int32"), f32((2,), "int32")], {}, r"operands must have a floating"),
    ("cast", [f32((2,))], {"dtype": "float7"}, r"attribute dtype: unknown dtype 'float7'"),
    ("clip", [f32((2,))], {"a_min": 3.0, "a_max": 1.0}, r"a_min \(3.0\) is greater"),
    ("nn.gelu", [f32((2,))], {"approximate": "fast"}, r"approximate must be one of"),
    ("where", [f32((2,), "bool"), f32((2,)), f32((2,), "int32")], {}, r"inputs have different"),
    ("nn.prelu", [f32((1, 3, 4)), f32((2,))], {}, r"slope of shape \(2,\) does not match axis 1"),
    ("nn.bias_add", [f32((1, 3, 4)), f32((4,))], {}, r"bias of shape \(4,\) does not match axis 1"),
    ("nn.conv2d", [f32((1, 3, 8, 8)), f32((4, 2, 3, 3))], {}, r"data has 3 channels but weight"),
    ("nn.conv2d", [f32((1, 3, 8)), f32((4, 3, 3))], {}, r"conv2d takes 4-d data and weight"),
    ("nn.conv2d", [f32((1, 3, 2, 2)), f32((4, 3, 3, 3))], {}, r"output would be empty"),
    ("nn.conv2d", [f32((1, 3, 8, 8)), f32((4, 3, 3, 3))], {"data_layout": "NCWH"},
     r"data_layout must be one of 'NCHW', 'NHWC'"),
    ("nn.conv2d", [f32((1, 3, 8, 8)), f32((4, 3, 3, 3))], {"strides": (0, 1)},
     r"strides must be >= 1"),
    ("nn.conv2d", [f32((1, 3, 8, 8)), f32((4, 3, 3, 3))], {"padding": (1, 2, 3)},
     r"padding needs 4 values"),
    ("nn.conv2d_transpose", [f32((1, 4, 5, 5)), f32((3, 3, 3, 3))], {},
     r"data has 4 channels but weight \(IOHW\) has 3"),
    ("nn.conv2d_transpose", [f32((1, 4, 5, 5)), f32((4, 3, 3, 3))], {"output_padding": (1, 1)},
     r"output_padding \(1, 1\) must be smaller"),
    ("nn.dense", [f32((2, 16)), f32((10, 15))], {}, r"last dimension 16 does not match .* 15"),
    ("nn.matmul", [f32((5, 3)), f32((5, 4))], {}, r"reduction dimensions differ: 3 \(a\) vs 5"),
    ("nn.batch_matmul", [f32((2, 4, 8)), f32((3, 8, 4))], {}, r"batch sizes 2 and 3 differ"),
    ("nn.max_pool2d", [f32((1, 1, 2, 2))], {"pool_size": 3}, r"output would be empty"),
    ("nn.avg_pool2d", [f32((1, 2, 8))], {"pool_size": 2}, r"data must be 4-d \(NCHW\)"),
    ("nn.adaptive_avg_pool2d", [f32((1, 2, 8, 8))], {"output_size": (0, 2)},
     r"output_size entries must be positive"),
    ("image.resize2d", [f32((1, 2, 8, 8))], {"size": (4, 4), "method": "area"},
     r"method must be one of 'nearest', 'linear'"),
    ("nn.softmax", [f32((2, 3))], {"axis": 2}, r"axis 2 is out of range for a tensor of rank 2"),
    ("nn.layer_norm", [f32((2, 3, 4)), f32((3, 4)), f32((4,))], {},
     r"beta of shape \(4,\) must have the normalized shape \(4,\)|gamma of shape \(3, 4\)"),
    ("nn.batch_norm", [f32((2, 3, 4)), f32((3,)), f32((3,)), f32((4,)), f32((3,))], {},
     r"moving_mean of shape \(4,\) must be 1-d of size 3"),
    ("nn.dropout", [f32((2,))], {"rate": 1.5}, r"rate must be in \[0, 1\)"),
    ("sum", [f32((2, 3))], {"axis": (0, -2)}, r"names an axis twice"),
    ("sum", [f32((2, 3))], {"axis": ()}, r"axis is empty; use axis=None"),
    ("argmax", [f32((2, 3))], {"axis": (0, 1)}, r"axis must be an int or None"),
    ("argmin", [f32((2, 3), "bool")], {}, r"of a bool tensor: cast it"),
    ("reshape", [f32((2, 3))], {"newshape": (4, -1)}, r"cannot reshape \(2, 3\) to \(4, -1\)"),
    ("reshape", [f32((2, 3))], {"newshape": (-1, -1)}, r"more than one -1"),
    ("transpose", [f32((2, 3, 4))], {"axes": (0, 0, 1)}, r"not a permutation of 3 axes"),
    ("expand_dims", [f32((2, 3))], {"axis": 4}, r"axis 4 is out of range \[-3, 2\]"),
    ("squeeze", [f32((1, 3))], {"axis": (1,)}, r"cannot squeeze axis 1 of size 3"),
    ("split", [f32((6, 4))], {"indices_or_sections": 4}, r"size 6 cannot be cut into 4 equal"),
    ("split", [f32((6, 4))], {"indices_or_sections": (3, 2)}, r"must be increasing"),
    ("strided_slice", [f32((6, 4))], {"begin": (0, 0), "end": (2,)}, r"need the same length"),
    ("strided_slice", [f32((6, 4))], {"begin": (0,), "end": (2,), "strides": (0,)},
     r"stride of axis 0 is 0"),
    ("take", [f32((6, 4)), f32((2,))], {}, r"indices must have an integer dtype, got float32"),
    ("take", [f32((6, 4)), f32((2,), "int64")], {"mode": "raise"}, r"mode must be one of"),
    ("gather", [f32((6, 4)), f32((2,), "int64")], {}, r"indices have rank 1, data has rank 2"),
    ("gather", [f32((6, 4)), f32((2, 5), "int64")], {}, r"indices size 5 on axis 1 exceeds"),
    ("nn.pad", [f32((6, 4))], {"pad_width": ((1, 1),)}, r"one \(before, after\) pair per axis"),
    ("nn.pad", [f32((6, 4))], {"pad_width": ((1, 1), (4, 0)), "pad_mode": "reflect"},
     r"reflect padding \(4, 0\) of axis 1 must be smaller than its size 4"),
    ("nn.pad", [f32((6, 4))], {"pad_width": ((1, 1), (-1, 0))}, r"must be >= 0"),
    ("broadcast_to", [f32((3, 2))], {"shape": (3, 4)}, r"cannot broadcast \(3, 2\) to \(3, 4\)"),
    ("tile", [f32((3, 2))], {"reps": (2, -1)}, r"reps must be >= 0"),
]


@pytest.mark.parametrize("name,args,attrs,pattern", ERROR_CASES,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(ERROR_CASES)])
def test_type_errors(name, args, attrs, pattern):
    with pytest.raises(GraphTypeError, match=pattern) as info:
        call(name, *args, span="model.layer", **attrs)
    text = str(info.value)
    assert text.startswith(f"{name} at model.layer: ") and "(input types: Tensor[" in text


def test_wrong_arity_and_tuple_input():
    with pytest.raises(GraphTypeError, match=r"nn.dense takes 2 inputs, got 1"):
        call("nn.dense", f32((2, 3)))
    with pytest.raises(GraphTypeError, match=r"concatenate: concatenate takes a non-empty Tuple"):
        call("concatenate", f32((2, 3)))
    with pytest.raises(GraphTypeError, match=r"field 1 has size 4 on axis 0, field 0 has 2"):
        call("concatenate", Tuple([f32((2, 3)), f32((4, 3))]), axis=1)


# ---------------------------------------------------------------------------- differential
def lower_and_run(name, inputs, **attrs):
    """Build call(name, *vars) with the inputs' types, lower it through the op's compute and
    CPU schedule, kiln.build it, run it on `inputs` and return the outputs (a list).
    An input that is a list of arrays becomes a Tuple argument."""
    op = get_op(name)
    args, placeholders, arrays = [], [], []

    def leaf(a):
        k = len(placeholders)
        placeholders.append(te.placeholder(a.shape, str(a.dtype), name=f"p{k}"))
        arrays.append(np.ascontiguousarray(a))
        return var(f"p{k}", a.shape, str(a.dtype))

    for item in inputs:
        args.append(Tuple([leaf(a) for a in item]) if isinstance(item, list) else leaf(item))
    c = call(name, *args, **attrs)
    out_types = c.checked_type.fields if isinstance(c.checked_type, TupleType) else [c.checked_type]
    try:
        outs = op.compute(c.attrs, placeholders, c.checked_type)
        s = op.schedules["cpu"](c.attrs, outs)
    except LoweringError as err:
        pytest.skip(f"kiln.topi does not provide it yet: {err}")
    assert [tuple(int(d) for d in t.shape) for t in outs] == [tuple(t.shape) for t in out_types]
    assert [t.dtype for t in outs] == [t.dtype for t in out_types]
    f = kiln.build(s, placeholders + list(outs))
    results = [np.zeros(t.shape, t.dtype) for t in out_types]
    f(*arrays, *results)
    return results


def check(name, inputs, ref, rtol=1e-5, atol=1e-5, **attrs):
    got = lower_and_run(name, inputs, **attrs)
    refs = ref if isinstance(ref, list) else [ref]
    assert len(got) == len(refs)
    for g, r in zip(got, refs):
        r = np.asarray(r)
        assert g.shape == r.shape
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, r.astype(g.dtype))
        else:
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


X = rand(3, 37)
POS = rand(3, 37, low=0.1, high=4.0)
HALVES = np.array([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.2, -0.7]], "float32")

UNARY_REFS = [
    ("nn.relu", X, np.maximum(X, 0), {}),
    ("sigmoid", X, 1 / (1 + np.exp(-X)), {}),
    ("tanh", X, np.tanh(X), {}),
    ("exp", X, np.exp(X), {}),
    ("log", POS, np.log(POS), {}),
    ("sqrt", POS, np.sqrt(POS), {}),
    ("rsqrt", POS, 1 / np.sqrt(POS), {}),
    ("abs", X, np.abs(X), {}),
    ("negative", X, -X, {}),
    ("floor", X, np.floor(X), {}),
    ("ceil", X, np.ceil(X), {}),
    ("round", HALVES, np.round(HALVES), {}),
    ("erf", X, torch.erf(t(X)).numpy(), {}),
    ("nn.silu", X, F.silu(t(X)).numpy(), {}),
    ("nn.hardswish", X * 2, F.hardswish(t(X * 2)).numpy(), {}),
    ("nn.hardsigmoid", X * 2, F.hardsigmoid(t(X * 2)).numpy(), {}),
    ("copy", X, X, {}),
    ("nn.leaky_relu", X, np.where(X > 0, X, 0.2 * X), {"alpha": 0.2}),
    ("clip", X, np.clip(X, -0.5, 1.0), {"a_min": -0.5, "a_max": 1.0}),
    ("clip", X, np.minimum(X, 1.0), {"a_max": 1.0}),
    ("nn.gelu", X, F.gelu(t(X)).numpy(), {}),
    ("nn.gelu", X, F.gelu(t(X), approximate="tanh").numpy(), {"approximate": "tanh"}),
    ("cast", X * 3, (X * 3).astype("int32"), {"dtype": "int32"}),
    ("cast", X, X.astype("float64"), {"dtype": "float64"}),
    ("nn.dropout", X, X, {"rate": 0.3}),
]


@pytest.mark.parametrize("name,x,ref,attrs", UNARY_REFS,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(UNARY_REFS)])
def test_unary_matches_reference(name, x, ref, attrs):
    check(name, [x], ref, **attrs)


def test_integer_and_bool_elementwise():
    xi = RNG.integers(-9, 9, (4, 5)).astype("int32")
    check("nn.relu", [xi], np.maximum(xi, 0))
    check("clip", [xi], np.clip(xi, -3, 4), a_min=-3.5, a_max=4.5)
    m = RNG.random((4, 5)) > 0.5
    check("logical_not", [m], ~m)


A, B = rand(4, 1, 5), rand(3, 1)
BPOS = rand(3, 1, low=0.5, high=2.0)
IA, IB = RNG.integers(-20, 20, (4, 6)).astype("int32"), RNG.integers(1, 7, (6,)).astype("int32")
IB = IB * np.where(RNG.random(6) > 0.5, 1, -1).astype("int32")
BINARY_REFS = [
    ("add", [A, B], A + B), ("subtract", [A, B], A - B), ("multiply", [A, B], A * B),
    ("divide", [A, BPOS], A / BPOS), ("power", [np.abs(A) + 0.1, B], (np.abs(A) + 0.1) ** B),
    ("maximum", [A, B], np.maximum(A, B)), ("minimum", [A, B], np.minimum(A, B)),
    ("floor_divide", [A, BPOS], np.floor_divide(A, BPOS)),
    ("floor_mod", [A, BPOS], np.mod(A, BPOS)),
    ("divide", [IA, IB], np.trunc(IA / IB)), ("floor_divide", [IA, IB], IA // IB),
    ("floor_mod", [IA, IB], IA % IB),
    ("equal", [IA, IB], IA == IB), ("not_equal", [IA, IB], IA != IB),
    ("less", [A, B], A < B), ("less_equal", [IA, IB], IA <= IB),
    ("greater", [A, B], A > B), ("greater_equal", [IA, IB], IA >= IB),
    ("logical_and", [A > 0, B > 0], (A > 0) & (B > 0)),
    ("logical_or", [A > 0, B > 0], (A > 0) | (B > 0)),
]


@pytest.mark.parametrize("name,inputs,ref", BINARY_REFS,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(BINARY_REFS)])
def test_binary_matches_numpy(name, inputs, ref):
    check(name, inputs, ref, rtol=1e-5, atol=1e-5)


def test_where_prelu_bias_add():
    cond = rand(4, 1) > 0
    x, y = rand(3), rand(4, 3)
    check("where", [cond, x, y], np.where(cond, x, y))
    data, slope = rand(2, 3, 4, 5), rand(3)
    check("nn.prelu", [data, slope], F.prelu(t(data), t(slope)).numpy())
    check("nn.prelu", [data, slope[:1]], np.where(data > 0, data, slope[0] * data))
    bias = rand(3)
    check("nn.bias_add", [data, bias], data + bias[:, None, None])
    b5 = rand(5)
    check("nn.bias_add", [data, b5], data + b5, axis=-1)


# ---- anchors
def _conv_ref(d, w, stride, pads, dilation, groups):
    pt, pl, pb, pr = pads
    d = np.pad(d, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    return F.conv2d(t(d), t(w), stride=stride, dilation=dilation, groups=groups).numpy()


CONV_CASES = [
    # (data shape, weight shape, strides, padding (t, l, b, r), dilation, groups)
    ((1, 3, 10, 11), (8, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((2, 4, 9, 9), (6, 4, 3, 2), (2, 1), (0, 1, 2, 1), (1, 2), 1),
    ((1, 8, 7, 7), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8),     # depthwise
    ((1, 6, 8, 8), (4, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 2),     # grouped
]


@pytest.mark.parametrize("dshape,wshape,strides,pads,dilation,groups", CONV_CASES)
def test_conv2d_nchw_matches_torch(dshape, wshape, strides, pads, dilation, groups):
    d, w = rand(*dshape), rand(*wshape)
    ref = _conv_ref(d, w, strides, pads, dilation, groups)
    check("nn.conv2d", [d, w], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(), strides=strides,
          padding=pads, dilation=dilation, groups=groups)


def test_conv2d_nhwc_matches_torch():
    d, w = rand(1, 9, 8, 4), rand(3, 3, 4, 6)      # NHWC data, HWIO weight
    ref = _conv_ref(d.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), (2, 2), (1, 0, 1, 2),
                    (1, 1), 1).transpose(0, 2, 3, 1)
    check("nn.conv2d", [d, w], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(), strides=(2, 2),
          padding=(1, 0, 1, 2), data_layout="NHWC")


def test_conv2d_float64_is_tight():
    d, w = rand(1, 3, 6, 6, dtype="float64"), rand(4, 3, 3, 3, dtype="float64")
    ref = _conv_ref(d, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    check("nn.conv2d", [d, w], ref, rtol=1e-12, atol=1e-12, padding=(1, 1, 1, 1))


@pytest.mark.parametrize("strides,padding,output_padding,dilation,groups", [
    ((2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1),
    ((1, 2), (0, 0, 0, 0), (0, 1), (2, 1), 2),
])
def test_conv2d_transpose_matches_torch(strides, padding, output_padding, dilation, groups):
    d, w = rand(1, 4, 5, 6), rand(4, 3, 3, 3)
    ref = F.conv_transpose2d(t(d), t(w), stride=strides, padding=padding[:2],
                             output_padding=output_padding, dilation=dilation,
                             groups=groups).numpy()
    check("nn.conv2d_transpose", [d, w], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(),
          strides=strides, padding=padding, output_padding=output_padding, dilation=dilation,
          groups=groups)


def test_dense_matmul_batch_matmul():
    x, w = rand(2, 5, 19), rand(7, 19)
    ref = x @ w.T
    check("nn.dense", [x, w], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    for ta in (False, True):
        for tb in (False, True):
            a = rand(9, 6) if ta else rand(6, 9)
            b = rand(5, 9) if tb else rand(9, 5)
            ref = (a.T if ta else a) @ (b.T if tb else b)
            check("nn.matmul", [a, b], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(),
                  transpose_a=ta, transpose_b=tb)
    a, b = rand(1, 4, 8), rand(3, 5, 8)
    ref = np.matmul(a, b.transpose(0, 2, 1))
    check("nn.batch_matmul", [a, b], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(),
          transpose_b=True)
    a, b = rand(3, 8, 4), rand(3, 8, 5)
    ref = np.matmul(a.transpose(0, 2, 1), b)
    check("nn.batch_matmul", [a, b], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(),
          transpose_a=True)


@pytest.mark.parametrize("kind,kwargs", [
    ("max", dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))),
    ("max", dict(pool_size=(2, 3), strides=(2, 2), ceil_mode=True, dilation=(1, 2))),
    ("avg", dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), count_include_pad=True)),
    ("avg", dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), count_include_pad=False,
                 ceil_mode=True)),
])
def test_pool2d_matches_torch(kind, kwargs):
    x = rand(2, 3, 9, 10)
    pad = kwargs.get("padding", (0, 0, 0, 0))[:2]
    common = dict(kernel_size=kwargs["pool_size"], stride=kwargs["strides"], padding=pad,
                  ceil_mode=kwargs.get("ceil_mode", False))
    if kind == "max":
        ref = F.max_pool2d(t(x), dilation=kwargs.get("dilation", (1, 1)), **common).numpy()
    else:
        ref = F.avg_pool2d(t(x), count_include_pad=kwargs["count_include_pad"], **common).numpy()
    check(f"nn.{kind}_pool2d", [x], ref, rtol=1e-5, atol=1e-5, **kwargs)


def test_global_and_adaptive_pool_match_torch():
    x = rand(2, 3, 7, 9)
    check("nn.global_max_pool2d", [x], x.max(axis=(2, 3), keepdims=True))
    check("nn.global_avg_pool2d", [x], x.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-5)
    check("nn.adaptive_avg_pool2d", [x], F.adaptive_avg_pool2d(t(x), (3, 4)).numpy(),
          output_size=(3, 4))
    check("nn.adaptive_max_pool2d", [x], F.adaptive_max_pool2d(t(x), (4, None)).numpy(),
          output_size=(4, None))


def _nearest_onnx(x, size, rounding):
    # half_pixel coordinates, ONNX nearest_mode rounding, clamped to the input.
    out = np.empty(x.shape[:2] + size, x.dtype)
    idx = []
    for n_in, n_out in zip(x.shape[2:], size):
        c = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
        r = np.ceil(c - 0.5) if rounding == "round_prefer_floor" else np.floor(c + 0.5)
        idx.append(np.clip(r, 0, n_in - 1).astype(int))
    out[...] = x[:, :, idx[0][:, None], idx[1][None, :]]
    return out


@pytest.mark.parametrize("size,attrs,ref", [
    ((9, 7), dict(method="nearest", coordinate_transformation_mode="asymmetric",
                  rounding_method="floor"), lambda x, s: F.interpolate(t(x), s, mode="nearest")),
    ((9, 7), dict(method="nearest", rounding_method="round_prefer_ceil"),
     lambda x, s: F.interpolate(t(x), s, mode="nearest-exact")),
    ((9, 7), dict(method="nearest"), lambda x, s: _nearest_onnx(x, s, "round_prefer_floor")),
    ((9, 7), dict(method="linear"),
     lambda x, s: F.interpolate(t(x), s, mode="bilinear", align_corners=False)),
    ((3, 11), dict(method="linear", coordinate_transformation_mode="align_corners"),
     lambda x, s: F.interpolate(t(x), s, mode="bilinear", align_corners=True)),
])
def test_resize2d_matches_torch(size, attrs, ref):
    x = rand(1, 2, 5, 6)
    expected = ref(x, size)
    expected = expected.numpy() if isinstance(expected, torch.Tensor) else expected
    check("image.resize2d", [x], expected, rtol=1e-5, atol=1e-5, size=size, **attrs)


def test_softmax_and_log_softmax():
    x = rand(2, 5, 7) * 3
    check("nn.softmax", [x], F.softmax(t(x), dim=-1).numpy(), rtol=1e-5, atol=1e-6)
    check("nn.softmax", [x], F.softmax(t(x), dim=1).numpy(), rtol=1e-5, atol=1e-6, axis=1)
    check("nn.log_softmax", [x], F.log_softmax(t(x), dim=-1).numpy(), rtol=1e-5, atol=1e-5)


def test_layer_norm_matches_torch():
    x, g, b = rand(2, 5, 7) * 3, rand(5, 7), rand(5, 7)
    ref = F.layer_norm(t(x), (5, 7), t(g), t(b), eps=1e-3).numpy()
    check("nn.layer_norm", [x, g, b], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(), axis=1,
          epsilon=1e-3)


def test_batch_norm_matches_torch():
    x = rand(2, 5, 7) * 3
    g, b, mean, var_ = rand(5), rand(5), rand(5), rand(5, low=0.5, high=2.0)
    ref = F.batch_norm(t(x), t(mean), t(var_), t(g), t(b), eps=1e-5).numpy()
    check("nn.batch_norm", [x, g, b, mean, var_], ref, rtol=1e-5, atol=1e-5)


# ---- reductions
R = rand(3, 4, 5)


@pytest.mark.parametrize("name,attrs,ref", [
    ("sum", {}, R.sum()), ("sum", {"axis": 1}, R.sum(1)),
    ("sum", {"axis": (0, 2), "keepdims": True}, R.sum((0, 2), keepdims=True)),
    ("mean", {"axis": -1}, R.mean(-1)), ("max", {"axis": (1, 2)}, R.max((1, 2))),
    ("min", {"axis": 0, "keepdims": True}, R.min(0, keepdims=True)),
    ("prod", {"axis": 2}, R.prod(2)),
    ("argmax", {"axis": 1}, R.argmax(1)), ("argmin", {"axis": -1, "keepdims": True},
                                           R.argmin(-1)[..., None]),
    ("argmax", {}, R.argmax()),
])
def test_reductions_match_numpy(name, attrs, ref):
    check(name, [R], ref, rtol=1e-5, atol=1e-5, **attrs)


def test_arg_reduce_ties_and_last_index():
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], "float32")
    check("argmax", [x], np.array([1, 0]), axis=1)
    check("argmax", [x], np.array([2, 3]), axis=1, select_last_index=True)
    check("argmin", [x], np.array([3, 3]), axis=1, select_last_index=True)


# ---- transforms
T = rand(2, 3, 4)
IDX = np.array([[0, -1, 2], [1, 1, 5]], "int64")
GIDX = np.array([[[2, 0, 1, 1], [0, 0, 2, 1], [1, 2, 2, 0]]] * 2, "int64")


@pytest.mark.parametrize("name,inputs,attrs,ref", [
    ("reshape", [T], {"newshape": (4, -1)}, T.reshape(4, -1)),
    ("transpose", [T], {}, T.T),
    ("transpose", [T], {"axes": (1, -1, 0)}, T.transpose(1, 2, 0)),
    ("expand_dims", [T], {"axis": 1, "num_newaxis": 2}, T[:, None, None]),
    ("squeeze", [T[:1, :, None]], {}, T[0]),
    ("squeeze", [T[:1, :, None]], {"axis": (2,)}, T[:1]),
    ("strided_slice", [T], {"begin": (1, -1), "end": (8, 0), "strides": (1, -2)}, T[1:8, -1:0:-2]),
    ("strided_slice", [T], {"begin": (-3,), "end": (2**63 - 1,), "axes": (2,)}, T[:, :, -3:]),
    ("take", [T, IDX], {"axis": 2}, np.take(T, np.clip(np.where(IDX < 0, IDX + 4, IDX), 0, 3), 2)),
    ("take", [T, IDX], {"axis": 1, "mode": "wrap"}, np.take(T, IDX, 1, mode="wrap")),
    ("take", [T, IDX], {}, np.take(T, np.clip(np.where(IDX < 0, IDX + 24, IDX), 0, 23))),
    ("gather", [T, GIDX], {"axis": 1}, torch.gather(t(T), 1, t(GIDX)).numpy()),
    ("gather", [T, GIDX[:1, :2] % 2], {"axis": 0}, torch.gather(t(T), 0, t(GIDX[:1, :2] % 2)).numpy()),
    ("nn.pad", [T], {"pad_width": ((0, 1), (2, 0), (1, 1)), "pad_value": -1.5},
     np.pad(T, ((0, 1), (2, 0), (1, 1)), constant_values=-1.5)),
    ("nn.pad", [T], {"pad_width": ((0, 0), (2, 1), (3, 1)), "pad_mode": "reflect"},
     np.pad(T, ((0, 0), (2, 1), (3, 1)), mode="reflect")),
    ("nn.pad", [T], {"pad_width": ((1, 0), (2, 1), (0, 3)), "pad_mode": "edge"},
     np.pad(T, ((1, 0), (2, 1), (0, 3)), mode="edge")),
    ("broadcast_to", [T[:, :1]], {"shape": (5, 2, 3, 4)}, np.broadcast_to(T[:, :1], (5, 2, 3, 4))),
    ("tile", [T], {"reps": (2, 1, 1, 3)}, np.tile(T, (2, 1, 1, 3))),
])
def test_transforms_match_numpy(name, inputs, attrs, ref):
    check(name, inputs, ref, rtol=0, atol=0, **attrs)


def test_concatenate_and_split():
    a, b, c = rand(2, 3), rand(2, 1), rand(2, 4)
    check("concatenate", [[a, b, c]], np.concatenate([a, b, c], axis=1), rtol=0, atol=0, axis=-1)
    x = rand(6, 7)
    check("split", [x], np.split(x, 3), rtol=0, atol=0, indices_or_sections=3)
    check("split", [x], np.split(x, [2, 5], axis=1), rtol=0, atol=0,
          indices_or_sections=(2, 5), axis=1)


def test_lowering_error_names_the_missing_topi_function():
    from kiln.graph.ops.define import TopiRef
    ref = TopiRef("elemwise:no_such_op")
    assert not ref.available
    with pytest.raises(LoweringError, match=r"kiln.topi.elemwise has no function 'no_such_op'"):
        ref()
    with pytest.raises(LoweringError, match=r"kiln.topi has no module 'nowhere'"):
        TopiRef("nowhere:f")()


# ---------------------------------------------------------------------------- fused groups
def lower_group(root, params, arrays):
    """Lower a graph of calls the way the graph compiler lowers one fused function: every
    call's compute in order, then the schedule of the master op (the highest pattern) with
    the group's output; build and run it."""
    tensors = {p: te.placeholder(p.checked_type.shape, p.checked_type.dtype, name=p.name_hint)
               for p in params}
    master = None
    for node in post_order(root):
        if isinstance(node, Call):
            outs = node.op.compute(node.attrs, [tensors[a] for a in node.args], node.checked_type)
            tensors[node] = outs[0]
            if master is None or node.op.pattern > master.op.pattern:
                master = node
    out = tensors[root]
    s = master.op.schedules["cpu"](master.attrs, [out])
    f = kiln.build(s, [tensors[p] for p in params] + [out])
    result = np.zeros(root.checked_type.shape, root.checked_type.dtype)
    f(*arrays, result)
    return result


def test_fused_groups_lower_through_the_master_schedule():
    d, w, b = rand(1, 4, 9, 9), rand(8, 4, 3, 3), rand(8)
    x, wv, bv = var("x", d.shape), var("w", w.shape), var("b", b.shape)
    y = call("nn.relu", call("nn.bias_add", call("nn.conv2d", x, wv, padding=(1, 1, 1, 1)), bv))
    ref = np.maximum(_conv_ref(d, w, (1, 1), (1, 1, 1, 1), (1, 1), 1) + b[:, None, None], 0)
    np.testing.assert_allclose(lower_group(y, [x, wv, bv], [d, w, b]), ref, rtol=1e-4,
                               atol=1e-4 * np.abs(ref).max())

    a, w2, b2 = rand(6, 32), rand(16, 32), rand(16)
    x, wv, bv = var("x", a.shape), var("w", w2.shape), var("b", b2.shape)
    y = call("nn.gelu", call("add", call("nn.dense", x, wv), bv))
    ref = F.gelu(t(a @ w2.T + b2)).numpy()
    np.testing.assert_allclose(lower_group(y, [x, wv, bv], [a, w2, b2]), ref, rtol=1e-4,
                               atol=1e-4 * np.abs(ref).max())

    r = rand(4, 6, 5)
    x = var("x", r.shape)
    y = call("sum", call("multiply", x, x), axis=-1)   # a reduction with its injective input
    np.testing.assert_allclose(lower_group(y, [x], [r]), (r * r).sum(-1), rtol=1e-5, atol=1e-5)

    y = call("multiply", call("nn.softmax", x), x)   # a row anchor with an epilogue
    np.testing.assert_allclose(lower_group(y, [x], [r]), F.softmax(t(r), -1).numpy() * r,
                               rtol=1e-5, atol=1e-6)

    y = call("transpose", call("reshape", call("exp", x), newshape=(4, 30)))
    np.testing.assert_allclose(lower_group(y, [x], [r]), np.exp(r).reshape(4, 30).T, rtol=1e-5)

"""topi.cumulative (cumsum, cumprod) and its schedule against numpy, and the graph operators'
type relations.

Axes of up to ONE_BLOCK elements are one block; longer ones go through the block totals and
offsets (lengths with a partial last block included). Tolerances: float32 sums of up to 300
terms of magnitude 1 rtol 1e-5 / atol 1e-5 (a different summation order than numpy's loop);
products of factors within 2% of 1 rtol 1e-5; integers exactly (wrapping included).
"""
import numpy as np
import pytest

from kiln import te
from kiln.graph import GraphTypeError, call, var
from kiln.topi import cumulative as cu
from kiln.topi.utils import TopiError


def reference(x, axis, exclusive, reverse, fn):
    """numpy's running sum / product with ONNX CumSum's exclusive and reverse."""
    if reverse:
        x = np.flip(x, axis)
    out = fn(x, axis=axis, dtype=x.dtype)
    if exclusive:
        identity = np.zeros_like if fn is np.cumsum else np.ones_like
        head = identity(np.take(x, [0], axis=axis))
        out = np.concatenate([head, np.delete(out, -1, axis=axis)], axis=axis)
    return np.flip(out, axis) if reverse else out


MODES = [(False, False), (True, False), (False, True), (True, True)]


@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 300), 1), ((97, 2), -2),
                                        ((2, 33, 3), 1)])
@pytest.mark.parametrize("exclusive,reverse", MODES)
def test_cumsum_float32(build_run, shape, axis, exclusive, reverse):
    x = te.placeholder(shape, name="x")
    a = np.random.default_rng(1).uniform(-1, 1, shape).astype("float32")
    out = build_run(cu.schedule_cumulative, cu.cumsum(x, axis, exclusive, reverse), [x], [a])
    np.testing.assert_allclose(out, reference(a, axis, exclusive, reverse, np.cumsum),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("exclusive,reverse", MODES)
def test_cumprod_float32_long_axis(build_run, exclusive, reverse):
    x = te.placeholder((2, 150), name="x")
    a = np.random.default_rng(2).uniform(0.98, 1.02, (2, 150)).astype("float32")
    out = build_run(cu.schedule_cumulative, cu.cumprod(x, 1, exclusive, reverse), [x], [a])
    np.testing.assert_allclose(out, reference(a, 1, exclusive, reverse, np.cumprod), rtol=1e-5)


@pytest.mark.parametrize("dtype,fn", [("int32", "cumsum"), ("uint32", "cumprod"),
                                      ("int64", "cumprod")])
def test_integers_wrap_as_a_loop(build_run, dtype, fn):
    x = te.placeholder((40,), dtype, name="x")
    a = np.random.default_rng(3).integers(1, 2 ** 20, 40).astype(dtype)
    out = build_run(cu.schedule_cumulative, getattr(cu, fn)(x, 0), [x], [a])
    np.testing.assert_array_equal(out, getattr(np, fn)(a, dtype=dtype))


def test_a_long_axis_costs_about_n_sqrt_n():
    """The stages' innermost iterations (outputs times reduced elements): 2 n sqrt(n) for an
    axis of 10,000, where one reduction per element would be n^2 / 2 = 5e7."""
    y = cu.cumsum(te.placeholder((10000,), name="x"), 0)
    todo, work = [y.op], 0
    while todo:
        op = todo.pop()
        if isinstance(op, te.ComputeOp):
            extents = [int(iv.dom.extent.value) for iv in (*op.axis, *op.reduce_axis)]
            work += int(np.prod(extents))
            todo += [t.op for t in op.input_tensors()]
    assert work <= 2.1e6


def test_topi_errors():
    x = te.placeholder((3, 4), name="x")
    with pytest.raises(TopiError, match="cumsum: axis 2 is out of range for a tensor of rank 2"):
        cu.cumsum(x, 2)
    with pytest.raises(TopiError, match="cumprod: input must be a te.Tensor"):
        cu.cumprod(np.zeros(3), 0)


def test_graph_type_relations():
    y = call("cumprod", var("x", (3, 6), "int64"), axis=-1, exclusive=True)
    assert (y.checked_type.shape, y.checked_type.dtype) == ((3, 6), "int64")
    with pytest.raises(GraphTypeError, match="axis 2 is out of range for a tensor of rank 2"):
        call("cumsum", var("x", (3, 6)), axis=2)
    with pytest.raises(GraphTypeError, match="rank 1 or more, got a scalar"):
        call("cumsum", var("x", ()), axis=0)
    with pytest.raises(GraphTypeError, match="rank 2 or more"):
        call("trilu", var("x", (3,)), k=0)
    with pytest.raises(GraphTypeError, match="operands must have an integer dtype, got float32"):
        call("left_shift", var("x", (3,)), var("y", (3,)))

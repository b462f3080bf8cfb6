"""topi helpers (tags, traverse_inline, constant shapes), the x86 schedule table, and the
structure of the default anchor schedules (vectorized, parallel, epilogue in the tile)."""
import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.topi import tags
from kiln.topi.utils import (TopiError, as_tensor_list, get_const_int, get_const_tuple,
                             traverse_inline)


def test_tags_injective():
    assert all(tags.is_injective(t) for t in (tags.ELEMWISE, tags.BROADCAST, tags.INJECTIVE))
    assert not any(tags.is_injective(t) for t in (tags.COMM_REDUCE, tags.CONV2D_NCHW, tags.DENSE,
                                                 tags.POOL, tags.RESIZE, ""))


def _chain():
    x = te.placeholder((4, 6), name="x")
    pre = te.compute((4, 6), lambda i, j: x[i, j] * 2.0, name="pre", tag=tags.ELEMWISE)
    k = te.reduce_axis((0, 6), name="k")
    red = te.compute((4,), lambda i: te.sum(pre[i, k], axis=k), name="red", tag="custom_anchor")
    post = te.compute((4,), lambda i: red[i] + 1.0, name="post", tag=tags.ELEMWISE)
    out = te.compute((4,), lambda i: te.max(post[i], 0.0), name="out", tag=tags.ELEMWISE)
    return x, pre, red, post, out


def test_traverse_inline_stops_at_anchor():
    x, pre, red, post, out = _chain()
    s = te.create_schedule(out.op)
    seen = []
    traverse_inline(s, out.op, seen.append)
    assert seen == [red.op]
    assert s[post].attach_type == "inline"
    assert s[out].attach_type == "root"          # outputs are never inlined
    assert s[pre].attach_type == "root"          # behind the anchor: the anchor's business


def test_traverse_inline_several_outputs_visit_once():
    x, pre, red, post, out = _chain()
    s = te.create_schedule([post.op, out.op])
    seen = []
    traverse_inline(s, [out.op, post.op], seen.append)
    assert seen == [red.op]
    assert s[post].attach_type == "root"


def test_const_helpers_and_errors():
    n = te.var("n")
    A = te.placeholder((n, 3), name="A")
    shape = get_const_tuple(A.shape)
    assert shape[1] == 3 and not isinstance(shape[0], int)
    assert get_const_int(te.const(5) + 2) == 7
    with pytest.raises(TopiError, match="must be a constant integer"):
        get_const_int(n, "width")
    with pytest.raises(TopiError, match="expected a Tensor"):
        as_tensor_list([])


def test_schedule_table():
    for tag in (tags.CONV2D_NCHW, tags.CONV2D_NHWC, tags.DEPTHWISE_CONV2D_NCHW,
                tags.GROUP_CONV2D_NCHW, tags.CONV2D_TRANSPOSE_NCHW, tags.DENSE, tags.MATMUL,
                tags.BATCH_MATMUL, tags.POOL, tags.ADAPTIVE_POOL, tags.RESIZE):
        assert callable(topi.x86.schedule_for(tag))
    with pytest.raises(KeyError, match="no x86 schedule for anchor tag 'nope'"):
        topi.x86.schedule_for("nope")


def _relu(y):
    return te.compute(y.shape, lambda *i: te.max(y[i], te.const(0, y.dtype)), name="relu",
                      tag=tags.ELEMWISE)


ANCHORS = {
    "conv2d_nchw": lambda: topi.nn.conv2d_nchw(te.placeholder((1, 8, 20, 40), name="x"),
                                               te.placeholder((16, 8, 3, 3), name="w"), 1, 1),
    "conv2d_nhwc": lambda: topi.nn.conv2d_nhwc(te.placeholder((1, 20, 20, 8), name="x"),
                                               te.placeholder((3, 3, 8, 32), name="w"), 1, 1),
    "depthwise": lambda: topi.nn.depthwise_conv2d_nchw(te.placeholder((1, 8, 20, 40), name="x"),
                                                       te.placeholder((8, 1, 3, 3), name="w"), 1, 1),
    "conv2d_transpose": lambda: topi.nn.conv2d_transpose_nchw(
        te.placeholder((1, 8, 10, 20), name="x"), te.placeholder((8, 8, 4, 4), name="w"), 2, 1),
    "dense": lambda: topi.nn.dense(te.placeholder((64, 32), name="x"),
                                   te.placeholder((64, 32), name="w")),
    "batch_matmul": lambda: topi.nn.batch_matmul(te.placeholder((4, 16, 32), name="a"),
                                                 te.placeholder((4, 32, 64), name="b")),
    "pool": lambda: topi.nn.pool2d(te.placeholder((1, 8, 40, 40), name="x"), 2, 2),
    # 32768 output elements: a parallel loop of less work runs serially (serial_small_parallel)
    "resize": lambda: topi.nn.resize2d(te.placeholder((1, 8, 32, 32), name="x"), scale=2),
}


@pytest.mark.parametrize("name", sorted(ANCHORS))
def test_default_schedule_is_vectorized_parallel_with_fused_epilogue(name):
    y = ANCHORS[name]()
    out = _relu(y)
    s = topi.x86.schedule_for(y.op.tag)(out)
    inputs = [t for t in _placeholders(out)]
    text = str(kiln.lower(s, inputs + [out]))
    assert "parallel" in text
    assert "ramp(" in text
    # The anchor has no buffer of the output's size: it is computed per tile (or inlined).
    assert f"{y.op.name} = allocate(float32, [{int(np.prod(y.shape))}]" not in text


def _placeholders(t):
    found, todo = [], [t.op]
    while todo:
        op = todo.pop()
        for inp in op.input_tensors():
            if isinstance(inp.op, te.PlaceholderOp):
                if inp not in found:
                    found.append(inp)
            else:
                todo.append(inp.op)
    return found


def test_find_anchor_through_injective_ops():
    x, pre, red, post, out = _chain()
    assert topi.utils.find_anchor([out], "custom_anchor") is red.op
    assert topi.utils.find_anchor(out, ("dense", "conv2d_nchw")) is None

"""FoldConstant folds rows of constant tables (take, strided_slice) with numpy, as BERT's
position and token-type embeddings need, instead of compiling a kernel for them; the values
agree with kiln's kernels in test_pass_fold_constant.test_numpy_fast_path_agrees_with_kiln."""
import numpy as np

from kiln.graph import Function, call, const, structural_equal, var
from kiln.graph.transform import fold_constant
from kiln.graph.transform.const_eval import numpy_eval


def _no_kernels(exprs):
    raise AssertionError(f"compiled {len(exprs)} expression(s); numpy should have folded them")


def test_embedding_rows_fold_without_a_kernel(rng):
    table = rng.standard_normal((16, 8)).astype("float32")
    types = rng.standard_normal((2, 8)).astype("float32")
    x = var("x", (1, 4, 8))
    positions = call("expand_dims", call("take", const(table), const(np.arange(4)), axis=0),
                     axis=0)
    token_type = call("squeeze", call("strided_slice", const(types), begin=(0,), end=(1,)),
                      axis=(0,))
    before = Function([x], call("add", call("add", x, positions), token_type))
    after = fold_constant(before, evaluate=_no_kernels)
    expected = Function([x], call("add", call("add", x, const(table[None, :4])),
                                  const(types[0])))
    assert structural_equal(after, expected)


def test_take_left_to_kiln_where_numpy_would_differ():
    table = const(np.arange(12, dtype="float32").reshape(4, 3))
    fast = call("take", table, const(np.array([4], "int64")), axis=0, mode="fast")
    assert numpy_eval(fast, [table.data, np.array([4], "int64")]) is None    # out of bounds
    narrow = call("take", table, const(np.array([-1], "int8")), axis=0)
    assert numpy_eval(narrow, [table.data, np.array([-1], "int8")]) is None
    wide = call("take", table, const(np.array([-1], "int32")), axis=0)
    np.testing.assert_array_equal(numpy_eval(wide, [table.data, np.array([-1], "int32")]),
                                  table.data[3:])

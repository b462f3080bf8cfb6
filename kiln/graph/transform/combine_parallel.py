"""CombineParallelDense / CombineParallelBatchMatmul: one big matmul instead of several small
ones that read the same input (BERT's query, key and value projections).

    q = dense(x, Wq) + bq;  k = dense(x, Wk) + bk;  v = dense(x, Wv) + bv
  → y = bias_add(dense(x, concat(Wq, Wk, Wv)), concat(bq, bk, bv))
    q = y[..., 0:n_q];  k = y[..., n_q:n_q+n_k];  v = ...          (strided_slice on the last axis)

A branch takes part when its weight is a constant (bind params first). A bias (nn.bias_add on
the last axis, or add of a constant that only varies along the last axis) used only after its
matmul is combined too; branches without one get zeros when others have one.
"""
from __future__ import annotations

import numpy as np

from ..expr import Call, Constant
from ..op import call as make_call
from ..visitor import ExprMutator, post_order, users
from .pass_infra import FunctionPass, PassContext, register_pass_config
from .rewrite import is_op

register_pass_config("CombineParallelDense.min_num_branches", 2, int,
                     "combine when at least this many dense ops share an input")
register_pass_config("CombineParallelBatchMatmul.min_num_branches", 2, int,
                     "combine when at least this many batch_matmul ops share an input")


class _DenseSpec:
    op = "nn.dense"

    @staticmethod
    def key(c):
        return (c.args[1].data.dtype.str, c.args[1].data.shape[1], c.checked_type.dtype)

    @staticmethod
    def units(c):
        return c.args[1].data.shape[0]

    @staticmethod
    def concat(weights, template):
        return np.concatenate(weights, axis=0)


class _BatchMatmulSpec:
    op = "nn.batch_matmul"

    @staticmethod
    def key(c):
        w = c.args[1].data
        k = w.shape[2] if c.attrs.transpose_b else w.shape[1]
        return (w.dtype.str, w.shape[0], k, c.attrs.transpose_a, c.attrs.transpose_b)

    @staticmethod
    def units(c):
        w = c.args[1].data
        return w.shape[1] if c.attrs.transpose_b else w.shape[2]

    @staticmethod
    def concat(weights, template):
        return np.concatenate(weights, axis=1 if template.attrs.transpose_b else 2)


class _Branch:
    __slots__ = ("matmul", "bias", "end")

    def __init__(self, matmul, bias):
        self.matmul, self.bias = matmul, bias      # bias: 1-d np array or None
        self.end = matmul                          # the node the slice replaces


class _Group:
    def __init__(self, data, branches):
        self.data, self.branches = data, branches
        self.combined = None


def _last_axis_bias(node, matmul, units):
    """The 1-d bias if node adds a constant to matmul along its last axis only, else None."""
    ndim = matmul.checked_type.ndim
    if is_op(node, "nn.bias_add") and node.args[0] is matmul and \
            isinstance(node.args[1], Constant) and node.attrs.axis % ndim == ndim - 1:
        return node.args[1].data
    if is_op(node, "add"):
        a, b = node.args
        c = b if a is matmul else a if b is matmul else None
        if isinstance(c, Constant) and c.data.size == units and c.data.ndim <= ndim and \
                c.data.shape[-1:] == (units,) and node.checked_type == matmul.checked_type:
            return c.data.reshape(units)
    return None


def _find_groups(root, spec, min_branches) -> list:
    use = users(root)
    groups = []
    for x in post_order(root):
        branches: dict = {}
        seen = set()
        for u in use.get(x, ()):
            if u in seen or not (is_op(u, spec.op) and u.args[0] is x and u.args[1] is not x
                                 and isinstance(u.args[1], Constant)):
                continue
            seen.add(u)
            consumers = use.get(u, [])
            bias = _last_axis_bias(consumers[0], u, spec.units(u)) if len(consumers) == 1 else None
            branch = _Branch(u, bias)
            if bias is not None:
                branch.end = consumers[0]
            branches.setdefault(spec.key(u), []).append(branch)
        for members in branches.values():
            if len(members) >= min_branches:
                groups.append(_Group(x, members))
    return groups


class _Combiner(ExprMutator):
    def __init__(self, spec, groups):
        super().__init__()
        self.spec = spec
        self.slot = {b.end: (g, k) for g in groups for k, b in enumerate(g.branches)}

    def rewrite_Call(self, call, op, args):
        found = self.slot.get(call)
        if found is None:
            return super().rewrite_Call(call, op, args)
        group, k = found
        if group.combined is None:
            group.combined = self._combine(group)
        offset = sum(self.spec.units(b.matmul) for b in group.branches[:k])
        size = self.spec.units(group.branches[k].matmul)
        last = group.combined.checked_type.ndim - 1
        return make_call("strided_slice", group.combined, begin=(offset,), end=(offset + size,),
                         strides=(1,), axes=(last,), span=call.span)

    def _combine(self, group):
        first = group.branches[0].matmul
        weights = [b.matmul.args[1].data for b in group.branches]
        w = Constant(self.spec.concat(weights, first), span=first.args[1].span)
        out = Call(first.op, [self.memo[group.data], w], first.attrs, first.span)
        if any(b.bias is not None for b in group.branches):
            dtype = first.checked_type.dtype     # an int8 dense's bias is int32, as its sums
            parts = [b.bias.astype(dtype) if b.bias is not None else
                     np.zeros(self.spec.units(b.matmul), dtype) for b in group.branches]
            out = make_call("nn.bias_add", out, Constant(np.concatenate(parts)),
                            axis=out.checked_type.ndim - 1, span=first.span)
        return out


def _combine_parallel(func, spec, min_branches):
    groups = _find_groups(func, spec, max(min_branches, 2))
    if not groups:
        return func
    return _Combiner(spec, groups).visit(func)


def combine_parallel_dense(func, min_num_branches: int = 2):
    """Combine nn.dense ops that share their data input and have constant weights.

    Example:
        >>> combine_parallel_dense(Function([x], Tuple([dense(x, wq), dense(x, wk)])))  # doctest: +SKIP
    """
    return _combine_parallel(func, _DenseSpec, min_num_branches)


def combine_parallel_batch_matmul(func, min_num_branches: int = 2):
    """Combine nn.batch_matmul ops that share their first operand and have constant second
    operands with the same batch, reduction size and transposition.

    Example:
        >>> combine_parallel_batch_matmul(f)  # doctest: +SKIP
    """
    return _combine_parallel(func, _BatchMatmulSpec, min_num_branches)


def CombineParallelDense(min_num_branches: int | None = None):
    """The CombineParallelDense function pass (opt_level 3); the branch minimum defaults to the
    PassContext config CombineParallelDense.min_num_branches (2).

    Example:
        >>> mod = CombineParallelDense()(mod)  # doctest: +SKIP
    """
    def run(func, mod, ctx: PassContext):
        n = min_num_branches or ctx.get_config("CombineParallelDense.min_num_branches")
        return combine_parallel_dense(func, n)
    return FunctionPass(run, opt_level=3, name="CombineParallelDense")


def CombineParallelBatchMatmul(min_num_branches: int | None = None):
    """The CombineParallelBatchMatmul function pass (opt_level 3).

    Example:
        >>> mod = CombineParallelBatchMatmul()(mod)  # doctest: +SKIP
    """
    def run(func, mod, ctx: PassContext):
        n = min_num_branches or ctx.get_config("CombineParallelBatchMatmul.min_num_branches")
        return combine_parallel_batch_matmul(func, n)
    return FunctionPass(run, opt_level=3, name="CombineParallelBatchMatmul")

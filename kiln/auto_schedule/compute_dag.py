"""The compute DAG of a fused kernel, and what the sketch rules ask of its stages.

A ComputeDAG holds the tensor expressions of one kernel (its outputs and every compute they
read), in the topological order a fresh schedule lists them. The analyses here are the
predicates of Ansor's derivation rules (OSDI'20, §4.1):

- injective: a compute without reduction axes (elementwise, broadcast, layout, padding);
- data reuse: a reduction where some input is read without some output axis, so one loaded
  element serves several outputs (matmul, convolution): worth multi-level tiling;
- expensive: an expression calling exp, tanh, erf, ... (not inlined into several readers).

Example:
    >>> from kiln import te
    >>> A = te.placeholder((64, 32), name="A"); B = te.placeholder((32, 48), name="B")
    >>> k = te.reduce_axis((0, 32), name="k")
    >>> C = te.compute((64, 48), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> dag = ComputeDAG([C])
    >>> [op.name for op in dag.ops], dag.has_data_reuse(C.op)
    (['A', 'B', 'C'], True)
"""
from __future__ import annotations

from ..te.schedule import create_schedule
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from ..tir.expr import Call, IntImm, ProducerLoad
from ..tir.functor import free_vars, post_order_visit

__all__ = ["ComputeDAG", "UnsupportedDAG", "EXPENSIVE_CALLS"]

# Intrinsics costing tens of cycles a lane: a stage computing one is not inlined into two
# readers (softmax's exp is computed once, not once per reader).
EXPENSIVE_CALLS = frozenset({"exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "tanh",
                             "sigmoid", "sqrt", "rsqrt", "erf", "pow", "sin", "cos", "tan",
                             "atan", "asin", "acos", "sinh", "cosh", "atanh", "asinh", "acosh",
                             "fast_exp", "fast_tanh", "fast_erf"})


class UnsupportedDAG(ValueError):
    """A kernel the auto-scheduler does not schedule (a symbolic extent, an operation kind it
    does not know); the kernel keeps the schedule its operator registers."""


def _const(extent) -> int | None:
    return extent.value if isinstance(extent, IntImm) else None


class ComputeDAG:
    """The operations of a kernel, placeholders first, in a fresh schedule's stage order.

    Example:
        >>> dag = ComputeDAG([C])        # doctest: +SKIP
        >>> dag.outputs[0] is C          # doctest: +SKIP
        True
    """

    def __init__(self, outputs):
        outputs = list(outputs)
        if not outputs or not all(isinstance(t, Tensor) for t in outputs):
            raise TypeError(f"a ComputeDAG takes the kernel's output tensors, got {outputs!r}")
        self.outputs = outputs
        sch = create_schedule([t.op for t in outputs])
        self.ops = [st.op for st in sch.stages]
        self.output_ops = {t.op for t in outputs}
        for op in self.ops:
            if not isinstance(op, (ComputeOp, PlaceholderOp)):
                raise UnsupportedDAG(f"operation '{op.name}' is a {type(op).__name__}")
            for iv in getattr(op, "axis", ()) + getattr(op, "reduce_axis", ()):
                if _const(iv.dom.extent) is None:
                    raise UnsupportedDAG(f"operation '{op.name}' has the symbolic extent "
                                         f"{iv.dom.extent} (axis {iv.var.name})")
        self._consumers: dict = {op: [] for op in self.ops}
        for op in self.ops:
            for t in op.input_tensors():
                if op not in self._consumers[t.op]:
                    self._consumers[t.op].append(op)

    # ---------------------------------------------------------------- structure
    def consumers(self, op) -> list:
        """The operations that read `op`'s outputs, in stage order."""
        return self._consumers[op]

    def is_output(self, op) -> bool:
        return op in self.output_ops

    @staticmethod
    def extents(op) -> list[int]:
        """The constant extents of `op`'s data axes."""
        return [_const(iv.dom.extent) for iv in op.axis]

    @staticmethod
    def reduce_extents(op) -> list[int]:
        return [_const(iv.dom.extent) for iv in op.reduce_axis]

    # ---------------------------------------------------------------- predicates
    @staticmethod
    def is_injective(op) -> bool:
        """A compute without reduction (each output element from its own inputs)."""
        return isinstance(op, ComputeOp) and not op.reduce_axis

    @staticmethod
    def _loads(op) -> list[ProducerLoad]:
        loads: list = []
        for body in op.body:
            post_order_visit(body, lambda n: loads.append(n) if isinstance(n, ProducerLoad)
                             else None)
        return loads

    @staticmethod
    def is_expensive(op) -> bool:
        """Whether the op's expression calls an intrinsic of EXPENSIVE_CALLS."""
        found = []
        for body in getattr(op, "body", ()):
            post_order_visit(body, lambda n: found.append(n) if isinstance(n, Call)
                             and n.op in EXPENSIVE_CALLS else None)
        return bool(found)

    @classmethod
    def loads(cls, op) -> int:
        """How many elements of other tensors one element of `op` reads (its loads)."""
        return len(cls._loads(op)) if isinstance(op, ComputeOp) else 0

    @classmethod
    def has_data_reuse(cls, op) -> bool:
        """A reduction reading some input without some (non-unit) data axis: an element
        loaded once serves several outputs, which multi-level tiling keeps in cache."""
        if not isinstance(op, ComputeOp) or not op.reduce_axis:
            return False
        axes = [iv.var for iv, n in zip(op.axis, cls.extents(op)) if n > 1]
        for load in cls._loads(op):
            used = {v for i in load.indices for v in free_vars(i)}
            if any(v not in used for v in axes):
                return True
        return False

    def __repr__(self):
        return f"ComputeDAG({', '.join(op.name for op in self.ops)})"

"""Tensors and the operations that produce them (placeholders and computes)."""
from __future__ import annotations

from ..tir import dtype as dt
from ..tir.expr import IntImm, IterVar, PrimExpr, ProducerLoad, Var
from ..tir.op import IRError, convert


class TensorError(IRError):
    """A tensor used wrongly: wrong number of indices, a non-integer index, ..."""


class Tensor:
    """One output of an operation; `T[i, j]` reads it inside a compute.

    Example:
        >>> from kiln import te
        >>> A = te.placeholder((4, 4), name="A")
        >>> A.shape
        (4, 4)
    """

    __slots__ = ("op", "value_index", "__weakref__")

    def __init__(self, op, value_index: int):
        self.op = op
        self.value_index = value_index

    @property
    def shape(self) -> tuple:
        return tuple(int(s) if isinstance(s, IntImm) else s for s in self.op.shape)

    @property
    def ndim(self) -> int:
        return len(self.op.shape)

    @property
    def dtype(self) -> str:
        return self.op.dtypes[self.value_index]

    @property
    def name(self) -> str:
        return self.op.name if self.op.num_outputs == 1 else f"{self.op.name}.v{self.value_index}"

    def __getitem__(self, indices):
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) == 1 and isinstance(indices[0], (list, tuple)):
            indices = tuple(indices[0])
        if len(indices) != self.ndim:
            raise TensorError(f"tensor {self.name} has {self.ndim} dimensions, "
                              f"indexed with {len(indices)}")
        converted = []
        for k, index in enumerate(indices):
            e = convert(index)
            if not dt.is_integral(e.dtype):
                raise TensorError(f"index {k} of {self.name} must be an integer, got `{e}` "
                                  f"of type {e.dtype}")
            converted.append(e)
        return ProducerLoad(self, tuple(converted))

    def __call__(self, *indices):
        return self[indices]

    def __len__(self):
        return self.ndim

    def __repr__(self):
        return f"Tensor(name={self.name}, shape={self.shape}, dtype={self.dtype})"

    def __reduce__(self):
        raise TypeError("tensors are not pickled")


class Operation:
    """Base of operations; outputs are cached so `op.output(i)` is always the same Tensor."""

    num_outputs = 1

    def __init__(self, name: str, tag: str = "", attrs=None):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self._outputs = None

    def output(self, index: int) -> Tensor:
        if self._outputs is None:
            self._outputs = tuple(Tensor(self, k) for k in range(self.num_outputs))
        return self._outputs[index]

    @property
    def outputs(self) -> tuple:
        return tuple(self.output(k) for k in range(self.num_outputs))

    def input_tensors(self) -> list:
        return []

    def __repr__(self):
        return f"{type(self).__name__}({self.name})"


class PlaceholderOp(Operation):
    def __init__(self, name, shape, dtype):
        super().__init__(name)
        self.shape = tuple(shape)
        self.dtypes = (dtype,)


class ComputeOp(Operation):
    """out[axis] = body; reductions are the top-level expression of each body."""

    def __init__(self, name, tag, attrs, axis, reduce_axis, body):
        super().__init__(name, tag, attrs)
        self.axis = tuple(axis)
        self.reduce_axis = tuple(reduce_axis)
        self.body = tuple(body)
        self.num_outputs = len(self.body)
        self.shape = tuple(iv.dom.extent for iv in self.axis)
        self.dtypes = tuple(b.dtype for b in self.body)
        self._inputs = None

    def input_tensors(self) -> list:
        if self._inputs is None:
            from ..tir.functor import post_order_visit
            found: dict = {}

            def fn(n):
                if isinstance(n, ProducerLoad):
                    found.setdefault(n.producer, None)
            for b in self.body:
                post_order_visit(b, fn)
            self._inputs = list(found)
        return self._inputs

    def with_body(self, body, name=None) -> "ComputeOp":
        """Same axes (the same IterVar objects, so users' axis handles stay valid), new body."""
        return ComputeOp(name or self.name, self.tag, self.attrs, self.axis, self.reduce_axis, body)


def is_reduction(op) -> bool:
    from ..tir.expr import Reduce
    return isinstance(op, ComputeOp) and isinstance(op.body[0], Reduce)


def fresh_itervar(iv: IterVar, suffix: str = "") -> IterVar:
    return IterVar(iv.dom, Var(iv.var.name + suffix, iv.var.dtype), iv.iter_type, iv.thread_tag)


__all__ = ["Tensor", "Operation", "PlaceholderOp", "ComputeOp", "TensorError", "is_reduction",
           "PrimExpr"]

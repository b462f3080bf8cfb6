"""Tensor intrinsics (TVM paper §4.3): a hardware instruction, or a hand-written micro-kernel,
declared by the computation it performs and by how to emit it.

A schedule puts one in place of a loop nest with `s[T].tensorize(axis, intrin)`; the lowering
(kiln/te/tensorize.py) checks that the nest computes what the declaration says, binds the
operands' regions to buffers and asks the intrinsic for its code.

Example:
    >>> from kiln import te
    >>> a = te.placeholder((4,), name="a")
    >>> b = te.compute((4,), lambda i: a[i] * 2.0, name="b")
    >>> twice = te.decl_tensor_intrin(b.op, lambda ins, outs: outs[0].vstore(
    ...     [0], ins[0].vload([0], 4) * te.const(2.0, "float32")), name="twice4")
    >>> twice
    TensorIntrin(twice4: b[4] <- a[4])
"""
from __future__ import annotations

from ..tir import dtype as dt
from ..tir.buffer import Buffer
from ..tir.expr import BufferLoad, IntImm, PrimExpr, ProducerLoad, Ramp, Var
from ..tir.functor import post_order_visit
from ..tir.op import convert
from ..tir.stmt import BufferStore, Stmt
from .schedule import ScheduleError
from .tensor import ComputeOp, PlaceholderOp, Tensor


class DeclBuffer:
    """How an intrinsic's operand may lie in memory.

    `strides` None means compact row-major; otherwise one entry per dimension, an integer that
    the schedule's layout must have, or a te.var that accepts any stride. `offset_factor` is a
    number of elements the region's start must be a multiple of (aligned vector loads); `scope`
    a memory scope the operand must live in ("" accepts any).

    Example:
        >>> from kiln import te
        >>> te.decl_buffer((16, 4), "int8", "w", strides=[te.var("s"), 1], offset_factor=64)
        DeclBuffer(w: int8[16, 4], strides=[s, 1], offset_factor=64)
    """

    __slots__ = ("shape", "dtype", "name", "strides", "offset_factor", "scope")

    def __init__(self, shape, dtype, name, strides=None, offset_factor=1, scope=""):
        self.shape = tuple(convert(s) for s in shape)
        self.dtype = dt.normalize(dtype)
        self.name = name
        if strides is not None:
            strides = tuple(convert(s) for s in strides)
            if len(strides) != len(self.shape):
                raise ScheduleError(f"decl_buffer '{name}': {len(strides)} strides for "
                                    f"{len(self.shape)} dimensions")
        self.strides = strides
        if not isinstance(offset_factor, int) or offset_factor < 1:
            raise ScheduleError(f"decl_buffer '{name}': offset_factor must be a positive "
                                f"integer, got {offset_factor!r}")
        self.offset_factor = offset_factor
        self.scope = scope

    def __repr__(self):
        shape = ", ".join(str(s) for s in self.shape)
        strides = "compact" if self.strides is None else f"[{', '.join(str(s) for s in self.strides)}]"
        return (f"DeclBuffer({self.name}: {self.dtype}[{shape}], strides={strides}, "
                f"offset_factor={self.offset_factor})")


def decl_buffer(shape, dtype="float32", name="buffer", strides=None, offset_factor=1,
                scope="") -> DeclBuffer:
    """Declare how an intrinsic operand may lie in memory (see DeclBuffer).

    Example:
        >>> from kiln import te
        >>> te.decl_buffer((16,), "int32", "acc")
        DeclBuffer(acc: int32[16], strides=compact, offset_factor=1)
    """
    return DeclBuffer(shape, dtype, name, strides, offset_factor, scope)


class BoundBuffer:
    """An intrinsic operand as the schedule lays it out: a region of a flat buffer starting at
    `elem_offset`, with one stride per dimension of the intrinsic's operand. The intrinsic's
    emit function builds its loads and stores through it.

    Example:
        >>> from kiln.tir import Buffer
        >>> flat = Buffer.make("W", "float32", (64,))
        >>> w = BoundBuffer("w", flat, 8, (4, 4), (16, 1))
        >>> print(w.offset(1, 2))
        26
    """

    __slots__ = ("name", "buffer", "elem_offset", "shape", "strides", "dtype")

    def __init__(self, name, buffer: Buffer, elem_offset, shape, strides):
        self.name, self.buffer = name, buffer
        self.elem_offset = convert(elem_offset)
        self.shape = tuple(convert(s) for s in shape)
        self.strides = tuple(convert(s) for s in strides)
        self.dtype = buffer.dtype

    def __repr__(self):
        return (f"BoundBuffer({self.name} -> {self.buffer.name}[{self.elem_offset}], "
                f"strides=({', '.join(str(s) for s in self.strides)}))")

    def offset(self, *indices) -> PrimExpr:
        """The flat element offset of `indices` (all dimensions of the operand)."""
        if len(indices) == 1 and isinstance(indices[0], (list, tuple)):
            indices = tuple(indices[0])
        if len(indices) != len(self.shape):
            raise ScheduleError(f"operand '{self.name}' has {len(self.shape)} dimensions, "
                                f"indexed with {len(indices)}")
        off = self.elem_offset
        for i, s in zip(indices, self.strides):
            off = off + convert(i) * s
        return off

    def vload(self, indices, lanes: int = 1) -> PrimExpr:
        """`lanes` consecutive elements along the last dimension from `indices` (a scalar load
        for 1 lane); their stride is the operand's last stride."""
        base = self.offset(*indices)
        if lanes == 1:
            return BufferLoad(self.buffer, base)
        return BufferLoad(self.buffer, Ramp(base, self.strides[-1], lanes))

    def vstore(self, indices, value) -> Stmt:
        """Store `value` (a vector stores consecutive elements along the last dimension)."""
        value = convert(value)
        base = self.offset(*indices)
        lanes = dt.lanes_of(value.dtype)
        index = base if lanes == 1 else Ramp(base, self.strides[-1], lanes)
        return BufferStore(self.buffer, value, index)


class TensorIntrin:
    """A declared intrinsic: `op` says what it computes over its placeholder inputs;
    `lower_fn(ins, outs)` takes BoundBuffers (inputs in the order the body first reads them,
    then the output) and returns the Stmt doing all of it, or (body, reset, update) for a
    reduction: body computes from scratch, reset writes the identity, update accumulates."""

    __slots__ = ("name", "op", "inputs", "lower_fn", "binds")

    def __init__(self, name, op, inputs, lower_fn, binds):
        self.name, self.op, self.inputs, self.lower_fn, self.binds = name, op, inputs, lower_fn, binds

    def __repr__(self):
        def sig(t):
            return f"{t.name}[{', '.join(str(s) for s in t.shape)}]"
        return (f"TensorIntrin({self.name}: {sig(self.op.output(0))} <- "
                f"{', '.join(sig(t) for t in self.inputs)})")

    def decl(self, tensor: Tensor) -> DeclBuffer:
        """The declared layout of one of the intrinsic's tensors (compact when not bound)."""
        return self.binds.get(tensor) or DeclBuffer(tensor.shape, tensor.dtype, tensor.name)


def read_order(expr) -> list:
    """The tensors `expr` reads, in the order of their first load."""
    seen: list = []

    def visit(e):
        if isinstance(e, ProducerLoad) and e.producer not in seen:
            seen.append(e.producer)
    post_order_visit(expr, visit)
    return seen


def decl_tensor_intrin(op, lower_fn, binds=None, name=None) -> TensorIntrin:
    """Declare a tensor intrinsic by its computation `op` (a te.compute over placeholders) and
    its emit function; `binds` maps some of its tensors to te.decl_buffer layouts.

    Example:
        >>> from kiln import te
        >>> a = te.placeholder((8,), name="a")
        >>> b = te.compute((8,), lambda i: a[i] + 1.0, name="b")
        >>> te.decl_tensor_intrin(b.op, lambda ins, outs: outs[0].vstore(
        ...     [0], ins[0].vload([0], 8) + te.const(1.0, "float32")), name="inc8")
        TensorIntrin(inc8: b[8] <- a[8])
    """
    name = name or getattr(op, "name", "intrin")
    if not isinstance(op, ComputeOp):
        raise ScheduleError(f"decl_tensor_intrin '{name}': expected the op of a te.compute, got {op!r}")
    if op.num_outputs != 1:
        raise ScheduleError(f"decl_tensor_intrin '{name}': the computation has {op.num_outputs} "
                            "outputs; an intrinsic computes one")
    if not callable(lower_fn):
        raise ScheduleError(f"decl_tensor_intrin '{name}': lower_fn must be callable, got {lower_fn!r}")
    inputs = read_order(op.body[0])
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise ScheduleError(f"decl_tensor_intrin '{name}': input '{t.name}' is computed; an "
                                "intrinsic's computation reads placeholders only")
    for iv in op.axis + op.reduce_axis:
        if not isinstance(iv.dom.extent, IntImm):
            raise ScheduleError(f"decl_tensor_intrin '{name}': axis '{iv.var.name}' has extent "
                                f"`{iv.dom.extent}`; an intrinsic's shape is constant")
    binds = dict(binds or {})
    own = inputs + [op.output(0)]
    for t, decl in binds.items():
        if t not in own:
            raise ScheduleError(f"decl_tensor_intrin '{name}': binds names '{getattr(t, 'name', t)}', "
                                "which the computation neither reads nor writes")
        if not isinstance(decl, DeclBuffer):
            raise ScheduleError(f"decl_tensor_intrin '{name}': '{t.name}' must be bound to a "
                                f"te.decl_buffer, got {decl!r}")
        if decl.dtype != t.dtype or [str(s) for s in decl.shape] != [str(s) for s in t.op.shape]:
            raise ScheduleError(f"decl_tensor_intrin '{name}': '{t.name}' is {t.dtype}"
                                f"{list(t.shape)} but its buffer '{decl.name}' is declared "
                                f"{decl.dtype}{[str(s) for s in decl.shape]}")
    return TensorIntrin(name, op, inputs, lower_fn, binds)


def is_any_stride(s) -> bool:
    return isinstance(s, Var)

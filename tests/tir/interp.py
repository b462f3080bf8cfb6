"""A reference interpreter of kiln's flat loop IR, over numpy arrays (a test oracle).

Use it for differential tests of passes: run the program before and after a pass on the
same random inputs and compare the buffers (`assert_same_effect` does both). Import it as
`from interp import run` in tests/tir (pytest puts a test's folder on sys.path), or as
`from tir.interp import run` from other test folders (tests/conftest.py puts tests/ there).

    >>> import numpy as np
    >>> from kiln.tir import Buffer, BufferLoad, BufferStore, For, Var, const
    >>> A = Buffer.make("A", "float32", (4,)); i = Var("i")
    >>> prog = For(i, const(0), const(4), "serial", BufferStore(A, BufferLoad(A, i) * 2.0, i))
    >>> a = np.arange(4, dtype="float32"); run(prog, {A: a}); a
    array([0., 2., 4., 6.], dtype=float32)

Semantics, chosen to match what the LLVM back-end generates:
- Every value is a 1-D numpy array with one entry per lane (scalars have one lane), of the
  element dtype; integer arithmetic wraps around as in numpy (two's complement).
- `Div` / `Mod` on integers truncate toward zero (C); `FloorDiv` / `FloorMod` round down.
  Integer division by zero raises InterpError (it is undefined behaviour in generated code).
- Casts: float -> int truncates toward zero, int -> narrower int wraps, anything -> bool is `!= 0`.
- `Select` evaluates both branches. The `if_then_else` call with a scalar condition evaluates
  only the taken branch; with a vector condition both branches run, but their vector loads
  touch only the lanes that take that branch (masked loads, as the LLVM and C back-ends emit).
  Scalar operands and integer divisions inside such a branch run unconditionally, as there.
  Loads and stores are bounds-checked (a masked lane is not checked).
- Loops of every kind (parallel, vectorized, thread_binding, ...) run serially in order;
  `AttrStmt(iter_var, "thread_extent", n)` runs its body once per thread index, serially.
- Memory from `Allocate` is poisoned (NaN for floats, 90 for integers, True for bool) so that
  reading it before writing shows up in a comparison.
- A `prefetch` call loads nothing: its address must lie in the buffer, and `run` returns the
  prefetches made, with the values of the loop variables at each.
- The interpreter checks types as it goes (operands of one dtype, stored value matching the
  buffer), so a pass that builds ill-typed IR fails here with an error naming the node.

Math intrinsics live in INTRINSICS (name -> function of numpy arrays); add entries there.
"""
from __future__ import annotations

import math

import numpy as np

from kiln.tir import dtype as dt
from kiln.tir.buffer import Buffer
from kiln.tir.expr import (EQ, GE, GT, LE, LT, NE, Add, And, Broadcast, BufferLoad, Call, Cast,
                           Div, FloatImm, FloorDiv, FloorMod, IntImm, IterVar, Let, Max, Min, Mod,
                           Mul, Not, Or, ProducerLoad, Ramp, Reduce, Select, StringImm, Sub, Var)
from kiln.tir.function import PrimFunc
from kiln.tir.printer import to_text
from kiln.tir.stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For,
                           IfThenElse, LetStmt, SeqStmt)

__all__ = ["run", "evaluate", "assert_same_effect", "InterpError", "InterpAssertError",
           "INTRINSICS"]


class InterpError(RuntimeError):
    """The program cannot be run: an unbound variable, an out-of-bounds access, a type error."""


class InterpAssertError(InterpError):
    """An AssertStmt of the program failed; the message is the program's own."""


def _np_dtype(dtype: str) -> np.dtype:
    base = dt.element_of(dtype)
    if base == "handle":
        raise InterpError("the interpreter has no values of type handle")
    return np.dtype(base)


def _short(node) -> str:
    text = to_text(node)
    return text if len(text) < 120 else text[:117] + "..."


# ------------------------------------------------------------------------- intrinsics
def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _reinterpret(out_dtype):
    def fn(x):
        target = np.dtype(out_dtype)
        if target.itemsize != x.dtype.itemsize:
            raise InterpError(f"reinterpret from {x.dtype} to {target} changes the bit width")
        return x.view(target)
    return fn


def _unary(fn):
    return lambda out_dtype, x: fn(x)


def _binary(fn):
    return lambda out_dtype, x, y: fn(x, y)


# name -> fn(out_dtype: numpy element dtype name, *args: np.ndarray) -> np.ndarray
INTRINSICS = {
    "exp": _unary(np.exp), "exp2": _unary(np.exp2), "expm1": _unary(np.expm1),
    "log": _unary(np.log), "log2": _unary(np.log2), "log1p": _unary(np.log1p),
    "sqrt": _unary(np.sqrt), "rsqrt": _unary(lambda x: 1 / np.sqrt(x)),
    "tanh": _unary(np.tanh), "sin": _unary(np.sin), "cos": _unary(np.cos),
    "sigmoid": _unary(lambda x: 1 / (1 + np.exp(-x))), "erf": _unary(_erf),
    "floor": _unary(np.floor), "ceil": _unary(np.ceil), "trunc": _unary(np.trunc),
    # LLVM's nearbyint in the default rounding mode: halves go to even, as np.rint.
    "round": _unary(np.rint), "nearbyint": _unary(np.rint),
    "fabs": _unary(np.abs), "isnan": _unary(np.isnan), "isinf": _unary(np.isinf),
    "isfinite": _unary(np.isfinite),
    "pow": _binary(np.power), "fmod": _binary(np.fmod),
    "fma": lambda out_dtype, x, y, z: x * y + z,
    "reinterpret": lambda out_dtype, x: _reinterpret(out_dtype)(x),
    "bitwise_and": _binary(np.bitwise_and), "bitwise_or": _binary(np.bitwise_or),
    "bitwise_xor": _binary(np.bitwise_xor), "bitwise_not": _unary(np.invert),
    "shift_left": _binary(np.left_shift), "shift_right": _binary(np.right_shift),
}


# ------------------------------------------------------------------------- the machine
def _lanes_mask(mask, lanes):
    """The mask seen by a child of `lanes` lanes. Masks only reach vector loads: a scalar
    operand inside a masked vector branch runs unconditionally, as in the back-ends."""
    if mask is None or lanes == 1:
        return None
    if len(mask) == lanes:
        return mask
    raise InterpError(f"a {lanes}-lane operand under a {len(mask)}-lane expression")


class _Machine:
    def __init__(self):
        self.env: dict = {}     # Var -> np.ndarray (one entry per lane)
        self.mem: dict = {}     # data Var of a buffer -> flat np.ndarray
        self.prefetches: list = []   # (buffer, flat index, {loop name: value}) per prefetch
        self.expr_table = {
            IntImm: self.e_const, FloatImm: self.e_const, StringImm: self.e_string,
            Var: self.e_var, Cast: self.e_cast, Not: self.e_not, Select: self.e_select,
            Call: self.e_call, Ramp: self.e_ramp, Broadcast: self.e_broadcast, Let: self.e_let,
            BufferLoad: self.e_load, And: self.e_logic, Or: self.e_logic,
            Div: self.e_div, Mod: self.e_div, FloorDiv: self.e_div, FloorMod: self.e_div,
        }
        for cls, fn in ((Add, np.add), (Sub, np.subtract), (Mul, np.multiply),
                        (Min, np.minimum), (Max, np.maximum), (EQ, np.equal),
                        (NE, np.not_equal), (LT, np.less), (LE, np.less_equal),
                        (GT, np.greater), (GE, np.greater_equal)):
            self.expr_table[cls] = self._elementwise(fn)
        self.stmt_table = {
            SeqStmt: self.s_seq, For: self.s_for, BufferStore: self.s_store,
            Allocate: self.s_allocate, LetStmt: self.s_let, AttrStmt: self.s_attr,
            AssertStmt: self.s_assert, IfThenElse: self.s_if, Evaluate: self.s_evaluate,
        }

    # -- binding -------------------------------------------------------------------------
    def bind_scalar(self, var, value):
        if not isinstance(var, Var):
            raise InterpError(f"scalars must be keyed by Var, got {var!r}")
        arr = np.asarray(value)
        npd = _np_dtype(var.dtype)
        lanes = dt.lanes_of(var.dtype)
        arr = arr.astype(npd).reshape(-1) if arr.ndim else np.full(lanes, arr, dtype=npd)
        if len(arr) != lanes:
            raise InterpError(f"variable {var.name} has {lanes} lanes, given {len(arr)} values")
        self.env[var] = arr

    def bind_buffer(self, buf, array):
        if isinstance(buf, Var):
            data, dtype, shape, name = buf, None, None, buf.name
        elif isinstance(buf, Buffer):
            data, dtype, shape, name = buf.data, buf.dtype, buf.shape, buf.name
        else:
            raise InterpError(f"buffers must be keyed by Buffer, got {buf!r}")
        if not isinstance(array, np.ndarray):
            raise InterpError(f"buffer {name} must be given a numpy array, "
                              f"got {type(array).__name__}")
        if not array.flags.c_contiguous or not array.flags.writeable:
            raise InterpError(f"the array for buffer {name} must be C-contiguous and writeable")
        if dtype is not None and array.dtype != _np_dtype(dtype):
            raise InterpError(f"buffer {name} holds {dtype}, given an array of {array.dtype}")
        if shape is not None:
            self._bind_shape(name, shape, array)
        self.mem[data] = array.reshape(-1)

    def _bind_shape(self, name, shape, array):
        if array.ndim != len(shape):
            # A flat array for a multi-dimensional buffer is fine: the IR indexes it flat.
            if array.ndim == 1 and all(isinstance(s, IntImm) for s in shape):
                if array.size != int(np.prod([s.value for s in shape])):
                    raise InterpError(f"buffer {name} has {len(shape)}-d shape "
                                      f"{[s.value for s in shape]}, given {array.size} elements")
                return
            if array.ndim == 1:
                return
            raise InterpError(f"buffer {name} has {len(shape)} dimensions, "
                              f"given an array of shape {array.shape}")
        for k, (extent, size) in enumerate(zip(shape, array.shape)):
            if isinstance(extent, Var):
                if extent in self.env:
                    if int(self.env[extent][0]) != size:
                        raise InterpError(f"dimension {k} of buffer {name} is {extent.name} = "
                                          f"{int(self.env[extent][0])}, but the array has {size}")
                else:
                    self.bind_scalar(extent, size)
            elif isinstance(extent, IntImm) and extent.value != size:
                raise InterpError(f"dimension {k} of buffer {name} is {extent.value}, "
                                  f"but the array has {size}")

    # -- expressions ---------------------------------------------------------------------
    def eval(self, e, mask=None):
        fn = self.expr_table.get(type(e))
        if fn is None:
            for klass in type(e).__mro__[1:]:
                fn = self.expr_table.get(klass)
                if fn is not None:
                    self.expr_table[type(e)] = fn
                    break
            else:
                if isinstance(e, (Reduce, ProducerLoad)):
                    raise InterpError(f"`{_short(e)}` belongs to tensor expressions; "
                                      "the interpreter runs lowered loop programs")
                raise InterpError(f"cannot evaluate a {type(e).__name__}: `{_short(e)}`")
        return fn(e, mask)

    def scalar(self, e):
        value = self.eval(e)
        if len(value) != 1:
            raise InterpError(f"expected a scalar, `{_short(e)}` has {len(value)} lanes")
        return value[0]

    def e_const(self, e, mask):
        return np.array([e.value], dtype=_np_dtype(e.dtype))

    def e_string(self, e, mask):
        return e.value

    def e_var(self, e, mask):
        try:
            return self.env[e]
        except KeyError:
            raise InterpError(f"variable `{e.name}` ({e.dtype}) is not bound; "
                              "pass it in scalars= or bind it by a loop or let") from None

    def _operands(self, e, mask):
        if e.a.dtype != e.b.dtype:
            raise InterpError(f"operands of {type(e).__name__} have types {e.a.dtype} and "
                              f"{e.b.dtype}: `{_short(e)}`")
        m = _lanes_mask(mask, dt.lanes_of(e.a.dtype))
        return self.eval(e.a, m), self.eval(e.b, m)

    def _elementwise(self, fn):
        def apply(e, mask):
            a, b = self._operands(e, mask)
            with np.errstate(all="ignore"):
                return fn(a, b).astype(_np_dtype(e.dtype), copy=False)
        return apply

    def e_logic(self, e, mask):
        a, b = self._operands(e, mask)
        if not dt.is_bool(e.a.dtype):
            raise InterpError(f"{type(e).__name__} needs bool operands: `{_short(e)}`")
        return (np.logical_and if isinstance(e, And) else np.logical_or)(a, b)

    def e_not(self, e, mask):
        if not dt.is_bool(e.a.dtype):
            raise InterpError(f"Not needs a bool operand: `{_short(e)}`")
        return np.logical_not(self.eval(e.a, mask))

    def e_div(self, e, mask):
        a, b = self._operands(e, mask)
        with np.errstate(all="ignore"):
            if dt.is_float(e.dtype):
                if isinstance(e, Div):
                    return a / b
                if isinstance(e, Mod):
                    return np.fmod(a, b)
                q = np.floor(a / b)
                return q if isinstance(e, FloorDiv) else a - q * b
            if dt.is_bool(e.dtype):
                raise InterpError(f"{type(e).__name__} on bool: `{_short(e)}`")
            # Every lane divides, masked or not (vector division traps like scalar division).
            if (b == 0).any():
                raise InterpError(f"integer division by zero in `{_short(e)}`")
            if isinstance(e, FloorDiv):
                return np.floor_divide(a, b)
            if isinstance(e, FloorMod):
                return np.mod(a, b)
            rem = np.fmod(a, b)  # truncated remainder, sign of the dividend
            return rem if isinstance(e, Mod) else (a - rem) // b

    def e_cast(self, e, mask):
        value = self.eval(e.value, mask)
        if dt.lanes_of(e.dtype) != len(value):
            raise InterpError(f"cast changes the number of lanes: `{_short(e)}`")
        target = _np_dtype(e.dtype)
        if target == np.bool_:
            return value != 0
        with np.errstate(all="ignore"):
            if np.issubdtype(value.dtype, np.floating) and np.issubdtype(target, np.integer):
                # Truncate toward zero, then wrap through int64 as the hardware would
                # for in-range values (out-of-range is undefined in LLVM anyway).
                return np.trunc(value).astype(np.int64).astype(target)
            return value.astype(target)

    def e_select(self, e, mask):
        lanes = dt.lanes_of(e.dtype)
        if e.true_value.dtype != e.false_value.dtype:
            raise InterpError(f"select branches have types {e.true_value.dtype} and "
                              f"{e.false_value.dtype}: `{_short(e)}`")
        cond = self.eval(e.condition, _lanes_mask(mask, dt.lanes_of(e.condition.dtype)))
        t = self.eval(e.true_value, mask)
        f = self.eval(e.false_value, mask)
        return np.where(np.broadcast_to(cond, lanes), t, f)

    def e_call(self, e, mask):
        lanes = dt.lanes_of(e.dtype)
        if e.op == "if_then_else":
            cond_e, t_e, f_e = e.args
            cond = self.eval(cond_e, _lanes_mask(mask, dt.lanes_of(cond_e.dtype)))
            if len(cond) == 1:   # a branch: only the taken side runs
                return self.eval(t_e if cond[0] else f_e, mask)
            base = np.ones(lanes, bool) if mask is None else mask
            t = self.eval(t_e, base & cond)
            f = self.eval(f_e, base & ~cond)
            return np.where(cond, t, f)
        if e.op == "likely":
            return self.eval(e.args[0], mask)
        if e.op == "prefetch":        # no load: the address is recorded and bounds-checked
            (target,) = e.args
            mem = self._memory(target.buffer, "prefetch from")
            index = self.eval(target.index)
            self._check_index(target.buffer, mem, index, np.ones(len(index), bool),
                              "prefetch from", e)
            loops = {v.name: int(x[0]) for v, x in self.env.items() if len(x) == 1}
            self.prefetches.append((target.buffer, int(index[0]), loops))
            return np.zeros(1, np.int32)
        fn = INTRINSICS.get(e.op)
        if fn is None:
            raise InterpError(f"the interpreter does not know the intrinsic {e.op!r} "
                              f"(add it to INTRINSICS): `{_short(e)}`")
        args = [self.eval(a, _lanes_mask(mask, dt.lanes_of(a.dtype))) for a in e.args]
        with np.errstate(all="ignore"):
            out = fn(dt.element_of(e.dtype), *args)
        out = np.asarray(out)
        if out.dtype != _np_dtype(e.dtype):
            out = out.astype(_np_dtype(e.dtype))
        return np.broadcast_to(out, lanes).copy()

    def e_ramp(self, e, mask):
        base, stride = self.eval(e.base), self.eval(e.stride)
        if len(base) != 1 or len(stride) != 1:
            raise InterpError(f"ramp base and stride must be scalars: `{_short(e)}`")
        with np.errstate(all="ignore"):
            return base + np.arange(e.lanes, dtype=base.dtype) * stride

    def e_broadcast(self, e, mask):
        value = self.eval(e.value)
        if len(value) != 1:
            raise InterpError(f"broadcast of a vector: `{_short(e)}`")
        return np.repeat(value, e.lanes)

    def e_let(self, e, mask):
        value = self.eval(e.value, _lanes_mask(mask, dt.lanes_of(e.value.dtype)))
        return self._with_binding(e.var, value, lambda: self.eval(e.body, mask))

    def _with_binding(self, var, value, thunk):
        if dt.lanes_of(var.dtype) != len(value):
            raise InterpError(f"`{var.name}` ({var.dtype}) bound to a {len(value)}-lane value")
        had, old = var in self.env, self.env.get(var)
        self.env[var] = value.astype(_np_dtype(var.dtype), copy=False)
        try:
            return thunk()
        finally:
            if had:
                self.env[var] = old
            else:
                del self.env[var]

    def _memory(self, buf, what):
        try:
            return self.mem[buf.data]
        except KeyError:
            raise InterpError(f"{what} buffer {buf.name}, which is neither given in buffers= "
                              "nor allocated") from None

    def _check_index(self, buf, mem, index, active, what, node):
        if not np.issubdtype(index.dtype, np.integer):
            raise InterpError(f"index of {buf.name} is not an integer: `{_short(node)}`")
        idx = index[active]
        bad = (idx < 0) | (idx >= mem.size)
        if bad.any():
            raise InterpError(f"{what} {buf.name}[{int(idx[bad][0])}] is out of bounds "
                              f"({buf.name} has {mem.size} elements): `{_short(node)}`")

    def e_load(self, e, mask):
        mem = self._memory(e.buffer, "load from")
        index = self.eval(e.index, mask)
        active = np.ones(len(index), bool) if mask is None else mask
        self._check_index(e.buffer, mem, index, active, "load from", e)
        out = np.zeros(len(index), dtype=mem.dtype)
        out[active] = mem[index[active]]
        return out

    # -- statements ----------------------------------------------------------------------
    def exec(self, s):
        fn = self.stmt_table.get(type(s))
        if fn is None:
            raise InterpError(f"cannot execute a {type(s).__name__}")
        fn(s)

    def s_seq(self, s):
        for x in s.seq:
            self.exec(x)

    def _loop(self, var, start, extent, body):
        npd = _np_dtype(var.dtype)
        had, old = var in self.env, self.env.get(var)
        try:
            for v in range(start, start + extent):
                self.env[var] = np.array([v], dtype=npd)
                self.exec(body)
        finally:
            if had:
                self.env[var] = old
            else:
                self.env.pop(var, None)

    def s_for(self, s):
        self._loop(s.loop_var, int(self.scalar(s.min)), int(self.scalar(s.extent)), s.body)

    def s_store(self, s):
        mem = self._memory(s.buffer, "store to")
        if dt.element_of(s.value.dtype) != s.buffer.dtype:
            raise InterpError(f"storing a {s.value.dtype} value into {s.buffer.name} "
                              f"({s.buffer.dtype}): `{_short(s)}`")
        index = self.eval(s.index)
        value = self.eval(s.value)
        if len(index) != len(value):
            raise InterpError(f"store of {len(value)} lanes at a {len(index)}-lane index: "
                              f"`{_short(s)}`")
        self._check_index(s.buffer, mem, index, np.ones(len(index), bool), "store to", s)
        for lane in range(len(index)):  # lane order: the last of duplicate addresses wins
            mem[index[lane]] = value[lane]

    def s_allocate(self, s):
        extent = int(self.scalar(s.extent))
        if extent < 0:
            raise InterpError(f"allocation of {s.buffer.name} with negative size {extent}")
        npd = _np_dtype(s.buffer.dtype)
        poison = np.nan if npd.kind == "f" else (True if npd == np.bool_ else 90)
        data = s.buffer.data
        had, old = data in self.mem, self.mem.get(data)
        self.mem[data] = np.full(extent, poison, dtype=npd)
        try:
            self.exec(s.body)
        finally:
            if had:
                self.mem[data] = old
            else:
                del self.mem[data]

    def s_let(self, s):
        self._with_binding(s.var, self.eval(s.value), lambda: self.exec(s.body))

    def s_attr(self, s):
        if s.key == "thread_extent":
            var = s.node.var if isinstance(s.node, IterVar) else s.node
            if not isinstance(var, Var):
                raise InterpError(f"thread_extent on {s.node!r}: expected an IterVar or Var")
            value = s.value if not isinstance(s.value, int) else IntImm("int32", s.value)
            self._loop(var, 0, int(self.scalar(value)), s.body)
        else:
            self.exec(s.body)

    def s_assert(self, s):
        if not self.scalar(s.condition):
            msg = s.message.value if isinstance(s.message, StringImm) else s.message
            raise InterpAssertError(str(msg))
        self.exec(s.body)

    def s_if(self, s):
        if dt.lanes_of(s.condition.dtype) != 1:
            raise InterpError(f"IfThenElse needs a scalar condition: `{_short(s.condition)}`")
        if self.scalar(s.condition):
            self.exec(s.then_case)
        elif s.else_case is not None:
            self.exec(s.else_case)

    def s_evaluate(self, s):
        if not isinstance(s.value, (IntImm, FloatImm, StringImm)):
            self.eval(s.value)


def _setup(buffers, scalars):
    m = _Machine()
    for var, value in (scalars or {}).items():
        m.bind_scalar(var, value)
    for buf, array in (buffers or {}).items():
        m.bind_buffer(buf, array)
    return m


def run(node, buffers: dict | None = None, scalars: dict | None = None) -> list:
    """Run a statement or PrimFunc; the arrays in `buffers` are updated in place. Returns the
    prefetches it made: (buffer, flat index, {loop variable name: value}) each.

    `buffers` maps Buffer -> numpy array (C-contiguous, of the buffer's dtype; its shape binds
    symbolic dimensions of the buffer), `scalars` maps Var -> number.

    Example:
        >>> from kiln.tir import const
        >>> A = Buffer.make("A", "int32", (3,)); i = Var("i")
        >>> a = np.zeros(3, "int32")
        >>> run(For(i, const(0), const(3), "serial", BufferStore(A, i * 2, i)), {A: a}); a
        array([0, 2, 4], dtype=int32)
    """
    m = _setup(buffers, scalars)
    body = node.body if isinstance(node, PrimFunc) else node
    if isinstance(node, PrimFunc):
        for p in node.params:
            if isinstance(p, Buffer) and p.data not in m.mem:
                raise InterpError(f"no array given for parameter buffer {p.name} of {node.name}")
            if isinstance(p, Var) and p not in m.env:
                raise InterpError(f"no value given for scalar parameter {p.name} of {node.name}")
    m.exec(body)
    return m.prefetches


def evaluate(expr, scalars: dict | None = None, buffers: dict | None = None):
    """Value of an expression: a numpy scalar for one lane, a 1-D array for a vector.

    Example:
        >>> from kiln.tir import FloorDiv, Div, const
        >>> x = Var("x")
        >>> int(evaluate(FloorDiv(x, const(2)), {x: -7})), int(evaluate(Div(x, const(2)), {x: -7}))
        (-4, -3)
    """
    value = _setup(buffers, scalars).eval(expr)
    return value[0] if dt.lanes_of(expr.dtype) == 1 else value


def assert_same_effect(before, after, buffers: dict, scalars: dict | None = None,
                       rtol: float = 0.0, atol: float = 0.0) -> None:
    """Run two programs on copies of the same arrays; assert every buffer ends up the same.

    Differential testing of a pass: `assert_same_effect(stmt, my_pass(stmt), {A: a, B: b})`.
    NaN compares equal to NaN; the tolerance defaults to exact (passes must not change values).

    Example:
        >>> from kiln.tir import BufferStore, For, const
        >>> A = Buffer.make("A", "int32", (3,)); i = Var("i")
        >>> s = For(i, const(0), const(3), "serial", BufferStore(A, i, i))
        >>> assert_same_effect(s, s.replace(kind="unrolled"), {A: np.zeros(3, "int32")})
    """
    first = {b: a.copy() for b, a in buffers.items()}
    second = {b: a.copy() for b, a in buffers.items()}
    run(before, first, scalars)
    run(after, second, scalars)
    for buf in buffers:
        name = buf.name
        np.testing.assert_allclose(second[buf], first[buf], rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=f"buffer {name} differs after the transformation")

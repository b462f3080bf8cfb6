"""The core both code generators share: dispatch on node class, the handlers whose logic is the
same in LLVM IR and in C, and the decisions both must make alike (how a cast is classified,
which index is one contiguous access, which KilnValue field carries an argument).

A back-end subclasses BaseFunctionEmitter and BaseModuleEmitter and writes only what its
language spells differently: the `e_<Class>` / `s_<Class>` / `call_<op>` handlers it needs
and the hooks below (`let_value`, `store`, `branch`, `alloc_stack`, ...). Values are opaque
here: an llvm.ir.Value in one back-end, a C expression string in the other.

Example:
    >>> class Printer(BaseFunctionEmitter):
    ...     def e_IntImm(self, e):
    ...         return str(e.value)
    >>> Printer(None, "f", 0).expr(IntImm("int32", 3))
    '3'
"""
from __future__ import annotations

import re
from contextlib import contextmanager, nullcontext

from ..tir import dtype as dt
from ..tir.buffer import Buffer
from ..tir.expr import IntImm, Ramp, StringImm
from .common import CodegenError, ErrorTable, StackPlanner, closure_vars

# Float-only math every back-end implements (as `call_<op>` or through `float_math`).
FLOAT_MATH = frozenset({
    "exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "sigmoid", "floor", "ceil", "trunc",
    "round", "fabs", "sin", "cos", "tan", "tanh", "pow", "fma", "fmod", "erf", "log1p", "expm1",
    "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh"})
# Integer bit operations every back-end implements through `bitwise`.
BITWISE = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right"})


def ident(name: str) -> str:
    """A name made safe as an identifier in both languages.

    Example:
        >>> ident("i.outer")
        'i_outer'
    """
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"


def argument_slot(param) -> str:
    """The KilnValue field that carries an argument: "handle", "float64" or "int64".

    Example:
        >>> argument_slot(Var("n", "int32"))
        'int64'
    """
    if isinstance(param, Buffer) or dt.is_handle(param.dtype):
        return "handle"
    return "float64" if dt.is_float(param.dtype) else "int64"


def dense_base(index):
    """The first element of a stride-1 Ramp index (one contiguous vector access), else None.

    Example:
        >>> print(dense_base(Ramp(IntImm("int32", 8), IntImm("int32", 1), 4)))
        8
    """
    if isinstance(index, Ramp) and isinstance(index.stride, IntImm) and index.stride.value == 1:
        return index.base
    return None


def cast_kind(src: str, dst: str) -> str:
    """How a value of dtype src becomes dst (same lanes), before a language spells it.

    Kinds: "retag" (same bits: the same element, or other signedness), "to_bool" (x != 0;
    NaN is true),
    "ptr_to_int", "int_to_ptr", "double_to_half", "float_extend", "float_truncate",
    "float_to_int", "float_to_uint", "int_to_float", "uint_to_float" (bool counts as unsigned),
    "sign_extend", "zero_extend", "truncate".

    Example:
        >>> cast_kind("uint8x4", "int32x4")
        'zero_extend'
    """
    sb, db = dt.element_of(src), dt.element_of(dst)
    if sb == db or (dt.is_integral(sb) and dt.is_integral(db) and dt.bits_of(sb) == dt.bits_of(db)):
        return "retag"
    if db == "bool":
        return "to_bool"
    if sb == "handle":
        return "ptr_to_int"
    if db == "handle":
        return "int_to_ptr"
    if sb == "float64" and db == "float16":
        return "double_to_half"
    if dt.is_float(sb) and dt.is_float(db):
        return "float_extend" if dt.bits_of(db) > dt.bits_of(sb) else "float_truncate"
    if dt.is_float(sb):
        return "float_to_uint" if dt.is_uint(db) else "float_to_int"
    unsigned = sb == "bool" or dt.is_uint(sb)
    if dt.is_float(db):
        return "uint_to_float" if unsigned else "int_to_float"
    if dt.bits_of(db) > dt.bits_of(sb):
        return "zero_extend" if unsigned else "sign_extend"
    return "truncate"


class BaseModuleEmitter:
    """What every function of one output module shares: the table of failure messages, the
    pool size, whether the code calls the support library (a loop on the pool, a heap
    temporary from the workspace allocator), and unique names.

    A subclass writes `emit_impl(func, params, names)` (the body; returns a handle on it),
    `emit_entry(func, params, impl, wrong_args_code)` and `text()`.

    Example:
        >>> text, uses_runtime = CModuleEmitter.emit([func], ErrorTable())   # doctest: +SKIP
    """

    def __init__(self, num_threads: int, errors: ErrorTable | None = None):
        self.errors = errors or ErrorTable()
        self.num_threads = max(1, num_threads)
        self.uses_runtime = False
        self._names: dict[str, int] = {}

    @classmethod
    def emit(cls, funcs, errors: ErrorTable) -> tuple[str, bool]:
        """The module text of PrimFuncs (checked and lowered) and whether it calls the support
        library (kiln.runtime.support_lib)."""
        from ..runtime import num_threads

        emitter = cls(num_threads(), errors)
        for f in funcs:
            emitter.add(f)
        return emitter.text(), emitter.uses_runtime

    def unique(self, base: str) -> str:
        count = self._names.get(base, 0)
        self._names[base] = count + 1
        return base if count == 0 else f"{base}{count}"

    def add(self, func) -> None:
        """Emit a PrimFunc: its body (buffers as restrict/noalias pointers), then the entry
        that unpacks KilnValue arguments and calls it."""
        params = list(func.params) + list(func.shape_vars)
        # Suffixed by position: parameter names stay unique whatever the user called them.
        names = [f"{ident(p.name)}_{k}" for k, p in enumerate(params)]
        impl = self.emit_impl(func, params, names)
        code = self.errors.code(f"{func.name}: called with the wrong number of arguments "
                                f"(expected {len(params)})")
        self.emit_entry(func, params, impl, code)


class BaseFunctionEmitter:
    """One function body: dispatch, the environment of bound variables, memoized values, and
    the statements and expressions whose logic is the same in every language.

    Handlers are found by name (`e_Add`, `s_For`, `call_exp`) once per emitter class. Values
    are memoized by node within one statement (the IR is hash-consed, so a shared
    subexpression is computed once); each side of an if_then_else gets its own memo, since its
    values do not dominate the code after it.
    """

    # Per class: node class (or intrinsic name) -> the unbound handler.
    _expr_table: dict = {}
    _stmt_table: dict = {}
    _call_table: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._expr_table = {}
        cls._stmt_table = {}
        cls._call_table = {}

    def __init__(self, module, func_name: str, parallel_depth: int):
        self.module = module
        self.func_name = func_name
        self.parallel_depth = parallel_depth
        self.env: dict = {}                  # Var -> value
        self.memo: dict = {}                 # expression -> value, within one statement
        self._let_vars: set = set()
        self.mask = None                     # lanes a vector load may touch (in if_then_else)
        self.heap: list = []                 # live heap temporaries, freed on every exit
        self.planner = StackPlanner()

    def error(self, message: str) -> CodegenError:
        return CodegenError(f"function {self.func_name!r}: {message}")

    # ------------------------------------------------------------------ dispatch
    @classmethod
    def _handler(cls, table: dict, key, name: str):
        method = table.get(key)
        if method is None:
            method = getattr(cls, name, None)
            if method is not None:
                table[key] = method
        return method

    def expr(self, e):
        value = self.memo.get(e)
        if value is None:
            method = self._handler(self._expr_table, type(e), "e_" + type(e).__name__)
            if method is None:
                raise self.error(f"cannot compile expression `{e}` ({type(e).__name__})")
            value = self.memo[e] = method(self, e)
        return value

    def stmt(self, s) -> None:
        method = self._handler(self._stmt_table, type(s), "s_" + type(s).__name__)
        if method is None:
            raise self.error(f"cannot compile statement {type(s).__name__}:\n{s}")
        # A value computed for an earlier statement may not dominate this one (it may sit in
        # a branch), so memoization starts afresh.
        self.memo = {}
        self._let_vars = set()             # variables Let has bound within this statement
        method(self, s)

    @contextmanager
    def scoped(self, var, value):
        """Bind var to value for the body of a with block; the outer binding comes back after."""
        saved = self.env.get(var)
        self.env[var] = value
        try:
            yield value
        finally:
            if saved is None:
                del self.env[var]
            else:
                self.env[var] = saved

    def buffer_pointer(self, buffer):
        ptr = self.env.get(buffer.data)
        if ptr is None:
            raise self.error(f"buffer {buffer.name!r} is neither a parameter nor allocated here")
        return ptr

    def bind_params(self, params, values) -> None:
        """Bind each parameter's variable (a buffer's data pointer, or the scalar itself)."""
        for p, value in zip(params, values):
            self.env[p.data if isinstance(p, Buffer) else p] = value

    # ------------------------------------------------------------------ expressions
    def e_Var(self, e):
        value = self.env.get(e)
        if value is None:
            raise self.error(f"variable `{e.name}` is used but not defined (not a parameter, "
                             f"loop variable or let)")
        return value

    e_SizeVar = e_Var

    def e_StringImm(self, e):
        raise self.error(f"string {e.value!r} can only appear as an assertion message")

    def e_Let(self, e):
        value = self.let_value(e.var, self.expr(e.value))
        if e.var not in self.env and e.var not in self._let_vars:
            self._let_vars.add(e.var)
            with self.scoped(e.var, value):
                return self.expr(e.body)
        # The variable was bound before in this statement: what is memoized under that
        # binding (x, x * x, ...) means something else here.
        saved, self.memo = self.memo, {}
        try:
            with self.scoped(e.var, value):
                return self.expr(e.body)
        finally:
            self.memo = saved

    def e_Cast(self, e):
        return self.cast(self.expr(e.value), e.value.dtype, e.dtype)

    def cast(self, v, src: str, dst: str):
        if src == dst:
            return v
        lanes = dt.lanes_of(dst)
        if dt.lanes_of(src) != lanes:
            if dt.lanes_of(src) != 1:
                raise self.error(f"cannot cast {src} to {dst}: lane counts differ")
            v = self.broadcast(v, src, lanes)
            src = dt.with_lanes(src, lanes)
        return self.convert(v, src, dst, cast_kind(src, dst))

    def e_Broadcast(self, e):
        return self.broadcast(self.expr(e.value), e.value.dtype, e.lanes)

    def e_Call(self, e):
        method = self._handler(self._call_table, e.op, "call_" + e.op)
        if method is not None:
            return method(self, e)
        if e.op in FLOAT_MATH:
            if not dt.is_float(e.dtype):
                raise self.error(f"{e.op} needs floating-point arguments, got `{e}` of type "
                                 f"{e.dtype}")
            return self.float_math(e.op, [self.expr(a) for a in e.args], e.dtype)
        if e.op in BITWISE:
            return self.bitwise(e, [self.expr(a) for a in e.args])
        raise self.error(f"unsupported intrinsic `{e.op}` in `{e}`")

    def call_if_then_else(self, e):
        cond, t, f = e.args
        c = self.expr(cond)
        if dt.lanes_of(cond.dtype) > 1:
            return self._masked_choice(c, t, f, e.dtype)
        return self.branch_value(c, t, f, e.dtype)

    def _masked_choice(self, c, t, f, dtype: str):
        """Vector if_then_else: each side's loads touch only the lanes that side chooses."""
        outer, saved = self.mask, self.memo
        values = []
        for branch, lanes in ((t, c), (f, self.mask_not(c, dtype))):
            self.mask = lanes if outer is None else self.mask_and(outer, lanes, dtype)
            self.memo = {}
            values.append(self.expr(branch))
        self.mask, self.memo = outer, saved
        return self.select(c, values[0], values[1], dtype)

    # ------------------------------------------------------------------ statements
    def s_SeqStmt(self, s):
        for x in s.seq:
            self.stmt(x)

    def s_AttrStmt(self, s):
        self.stmt(s.body)

    def s_Evaluate(self, s):
        if not isinstance(s.value, IntImm):      # a constant statement does nothing
            self.discard(self.expr(s.value))

    def s_LetStmt(self, s):
        with self.scoped(s.var, self.let_value(s.var, self.expr(s.value))):
            self.stmt(s.body)

    def s_BufferStore(self, s):
        value = self.expr(s.value)
        if dt.lanes_of(s.value.dtype) != dt.lanes_of(s.index.dtype):
            raise self.error(f"store of {s.value.dtype} value at a {s.index.dtype} index:\n{s}")
        self.store(s.buffer, s.index, value)

    def s_IfThenElse(self, s):
        if dt.lanes_of(s.condition.dtype) != 1:
            raise self.error(f"if statement on a vector condition `{s.condition}`")
        self.branch(self.expr(s.condition), s.then_case, s.else_case)

    def s_AssertStmt(self, s):
        message = s.message.value if isinstance(s.message, StringImm) else str(s.message)
        code = self.status_of(f"assertion `{s.condition}` failed: {message}")
        self.fail_unless(self.expr(s.condition), code)
        self.stmt(s.body)

    def status_of(self, failure: str):
        """The status (a value) a function returns when `failure` happens."""
        return self.status(self.module.errors.code(f"{self.func_name}: {failure}"))

    def s_Allocate(self, s):
        buf = s.buffer
        with self.block():
            if isinstance(s.extent, IntImm) and self.planner.on_stack(s.extent.value, buf.dtype):
                with self.scoped(buf.data, self.alloc_stack(buf, max(1, s.extent.value))):
                    self.stmt(s.body)
                return
            self.module.uses_runtime = True
            ptr = self.alloc_heap(buf, s.extent)
            self.heap.append(ptr)
            with self.scoped(buf.data, ptr):
                self.stmt(s.body)
            self.heap.pop()
            self.free(ptr)

    def s_For(self, s):
        var = s.loop_var
        if not dt.is_int(var.dtype):
            raise self.error(f"loop variable `{var.name}` has type {var.dtype}; loops count in "
                             f"signed integers")
        lo = self.cast(self.expr(s.min), s.min.dtype, var.dtype)
        extent = self.cast(self.expr(s.extent), s.extent.dtype, var.dtype)
        if s.kind == "parallel" and self.parallel_depth == 0:
            self.parallel_for(s, lo, extent)
        else:
            self.serial_loop(var, lo, self.loop_end(lo, extent, var.dtype), s.body, s.kind)

    def closure(self, loop) -> list:
        """(variable, value here) for what a parallel loop's body needs from outside."""
        self.module.uses_runtime = True
        captured = []
        for var in closure_vars(loop):
            value = self.env.get(var)
            if value is None:
                raise self.error(f"variable `{var.name}` is used in a parallel loop but not "
                                 f"defined")
            captured.append((var, value))
        return captured

    # ------------------------------------------------------------------ hooks
    def let_value(self, var, value):
        """What a Let binds var to (C names a temporary; LLVM values are SSA already)."""
        return value

    def discard(self, value) -> None:
        """An expression evaluated as a statement, for its effects."""

    def block(self):
        """A lexical scope around an allocation (C braces; nothing in LLVM)."""
        return nullcontext()

    # Each back-end writes: broadcast(v, dtype, lanes), convert(v, src, dst, kind),
    # select(mask, t, f, dtype), mask_not(c, dtype), mask_and(a, b, dtype),
    # branch_value(c, t, f, dtype), float_math(op, args, dtype), bitwise(e, args),
    # store(buffer, index, value), branch(cond, then, else), status(code),
    # fail_unless(ok, status), alloc_stack(buffer, count), alloc_heap(buffer, extent),
    # free(ptr), loop_end(lo, extent, dtype), serial_loop(var, lo, hi, body, kind),
    # parallel_for(loop, lo, extent).

"""Loop IR as C source, with the same functions, calling convention, closures and failure
paths as the LLVM back-end (see kiln/codegen/llvm/function.py for the layout).

Every intermediate value is a typed temporary (`float t3 = a + b;`), so C's integer promotions
never change a result: an int8 sum wraps exactly as numpy's does, a _Float16 product is rounded
at its assignment (-fexcess-precision=standard).
"""
from __future__ import annotations

import re

from ...tir import dtype as dt
from ...tir.buffer import Buffer
from ...tir.expr import (EQ, GE, GT, LE, LT, NE, Broadcast, BufferLoad, FloatImm, IntImm, Ramp,
                         StringImm)
from ...tir.stmt import BufferStore
from ...tir.function import PrimFunc
from ..common import (HEAP_ALIGN, CodegenError, ErrorTable, StackPlanner, closure_vars,
                      symbol_of, walk)
from .types import (PRELUDE, CTypes, float_literal, int_literal, int_of_width, mask_dtype,
                    memory_dtype)

_CMP = {EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}
# Float math: name -> libm function for double (float adds "f"); half is computed in float.
_MATH = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log10": "log10",
         "sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "trunc": "trunc", "round": "rint",
         "fabs": "fabs", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh", "pow": "pow",
         "fma": "fma", "erf": "erf", "log1p": "log1p", "expm1": "expm1", "atan": "atan",
         "asin": "asin", "acos": "acos", "fmod": "fmod"}
_BINARY_OPS = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "shift_left": "<<",
               "shift_right": ">>"}


def _ident(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"


class CModuleEmitter:
    """Emits PrimFuncs into one C translation unit.

    Example:
        >>> m = CModuleEmitter(num_threads=2)
        >>> m.add(func)           # doctest: +SKIP
        >>> source = m.text()     # doctest: +SKIP
    """

    def __init__(self, num_threads: int, errors: ErrorTable | None = None):
        self.types = CTypes()
        self.errors = errors or ErrorTable()
        self.num_threads = max(1, num_threads)
        self.functions: list[str] = []
        self.uses_parallel = False
        self._names: dict[str, int] = {}

    def unique(self, base: str) -> str:
        count = self._names.get(base, 0)
        self._names[base] = count + 1
        return base if count == 0 else f"{base}{count}"

    def text(self) -> str:
        messages = "\n".join(f"/* status {k + 1}: {m.replace('*/', '* /')} */"
                             for k, m in enumerate(self.errors.messages))
        return "\n".join([PRELUDE, self.types.text(), "", *self.functions, messages, ""])

    def add(self, func: PrimFunc) -> None:
        params = list(func.params) + list(func.shape_vars)
        impl = CFunction(self, func.name, f"{symbol_of(func.name)}__impl", parallel_depth=0)
        decls = []
        for k, p in enumerate(params):
            name = f"{_ident(p.name)}_{k}"
            if isinstance(p, Buffer):
                decls.append(f"{self.types.memory_ctype(p.dtype)}* restrict {name}")
                impl.env[p.data] = (name, "handle")
            else:
                decls.append(f"{self.types.ctype(p.dtype)} {name}")
                impl.env[p] = (name, p.dtype)
        impl.run(func.body)
        impl.finish(f"static int32_t {impl.c_name}({', '.join(decls) or 'void'})")
        self._entry(func, params, impl.c_name)

    def _entry(self, func, params, impl_name: str) -> None:
        code = self.errors.code(f"{func.name}: called with the wrong number of arguments "
                                f"(expected {len(params)})")
        args = []
        for k, p in enumerate(params):
            if isinstance(p, Buffer):
                args.append(f"({self.types.memory_ctype(p.dtype)}*)args[{k}].v_handle")
            elif dt.is_handle(p.dtype):
                args.append(f"args[{k}].v_handle")
            elif dt.is_bool(p.dtype):
                args.append(f"args[{k}].v_int64 != 0")
            elif dt.is_float(p.dtype):
                args.append(f"({self.types.ctype(p.dtype)})args[{k}].v_float64")
            else:
                args.append(f"({self.types.ctype(p.dtype)})args[{k}].v_int64")
        self.functions.append(
            f"int32_t {symbol_of(func.name)}(KilnValue* args, int32_t num_args) {{\n"
            f"  if (num_args != {len(params)}) return {code};\n"
            f"  return {impl_name}({', '.join(args)});\n}}\n")


class CFunction:
    """One C function: statements and expressions, as typed temporaries."""

    def __init__(self, module: CModuleEmitter, func_name: str, c_name: str, parallel_depth: int):
        self.module = module
        self.types = module.types
        self.func_name = func_name
        self.c_name = c_name
        self.parallel_depth = parallel_depth
        self.lines: list[str] = []
        self.depth = 1
        self.env: dict = {}                  # Var -> (C name, dtype)
        self.memo: dict = {}
        self.mask: str | None = None
        self.heap: list[str] = []
        self.planner = StackPlanner()
        self._count = 0

    def error(self, message: str) -> CodegenError:
        return CodegenError(f"function {self.func_name!r}: {message}")

    # ------------------------------------------------------------------ output
    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def tmp(self, dtype: str, value: str, hint: str = "t") -> str:
        name = f"{hint}{self._count}"
        self._count += 1
        self.line(f"{self.types.ctype(dtype)} {name} = {value};")
        return name

    def declare(self, dtype: str, hint: str = "t") -> str:
        name = f"{hint}{self._count}"
        self._count += 1
        self.line(f"{self.types.ctype(dtype)} {name};")
        return name

    def open(self, header: str) -> None:
        self.line(header + " {")
        self.depth += 1

    def close(self, trailer: str = "}") -> None:
        self.depth -= 1
        self.line(trailer)

    def run(self, body) -> None:
        self.stmt(body)
        self.line("return 0;")

    def finish(self, signature: str) -> None:
        self.module.functions.append(signature + " {\n" + "\n".join(self.lines) + "\n}\n")

    # ------------------------------------------------------------------ expressions
    def expr(self, e) -> str:
        value = self.memo.get(e)
        if value is None:
            method = getattr(self, "e_" + type(e).__name__, None)
            if method is None:
                raise self.error(f"cannot compile expression `{e}` ({type(e).__name__})")
            value = method(e)
            self.memo[e] = value
        return value

    def e_IntImm(self, e):
        return int_literal(e.value, e.dtype)

    def e_FloatImm(self, e):
        return float_literal(e.value, e.dtype)

    def e_Var(self, e):
        found = self.env.get(e)
        if found is None:
            raise self.error(f"variable `{e.name}` is used but not defined (not a parameter, "
                             f"loop variable or let)")
        return found[0]

    e_SizeVar = e_Var

    def e_StringImm(self, e):
        raise self.error(f"string {e.value!r} can only appear as an assertion message")

    def e_Let(self, e):
        name = self.tmp(e.var.dtype, self.expr(e.value), _ident(e.var.name) + "_")
        saved = self.env.get(e.var)
        self.env[e.var] = (name, e.var.dtype)
        try:
            return self.expr(e.body)
        finally:
            if saved is None:
                del self.env[e.var]
            else:
                self.env[e.var] = saved

    def e_Cast(self, e):
        return self.cast(self.expr(e.value), e.value.dtype, e.dtype)

    def cast(self, v: str, src: str, dst: str) -> str:
        if src == dst:
            return v
        lanes = dt.lanes_of(dst)
        if dt.lanes_of(src) != lanes:
            v = self.broadcast(v, src, lanes)
            src = dt.with_lanes(src, lanes)
        if lanes == 1:
            if dt.is_bool(dst):
                return self.tmp(dst, f"{v} != 0")
            return self.tmp(dst, f"({self.types.ctype(dst)}){v}")
        if dt.is_bool(dst):
            return self.to_mask(f"{v} != 0", src)
        if dt.is_bool(src):
            v = f"{v} & 1"
        return self.tmp(dst, f"__builtin_convertvector({v}, {self.types.ctype(dst)})")

    def to_mask(self, comparison: str, operand_dtype: str) -> str:
        """A vector comparison as an int32 lane mask (GCC gives a mask of the operand width)."""
        lanes = dt.lanes_of(operand_dtype)
        width = int_of_width(operand_dtype)
        raw = self.tmp(width, comparison)
        if dt.element_of(width) == "int32":
            return raw
        return self.tmp(mask_dtype(lanes), f"__builtin_convertvector({raw}, "
                                            f"{self.types.ctype(mask_dtype(lanes))})")

    def broadcast(self, v: str, dtype: str, lanes: int) -> str:
        if dt.is_bool(dtype):
            v = f"({v} ? -1 : 0)"
        vec = dt.with_lanes(dtype, lanes)
        ctype = self.types.ctype(vec)
        return f"(({ctype}){{{', '.join([v] * lanes)}}})" if _is_literal(v) else \
            self.tmp(vec, f"({ctype}){{{', '.join([v] * lanes)}}}")

    def e_Broadcast(self, e):
        return self.broadcast(self.expr(e.value), e.value.dtype, e.lanes)

    def e_Ramp(self, e):
        base, stride = self.expr(e.base), self.expr(e.stride)
        ctype = self.types.ctype(e.dtype)
        if isinstance(e.stride, (IntImm, FloatImm)):
            steps = [self.expr(type(e.stride)(e.stride.dtype, e.stride.value * k))
                     for k in range(1, e.lanes)]
        else:
            steps = [f"{stride} * {k}" for k in range(1, e.lanes)]
        elems = [base] + [f"{base} + {step}" for step in steps]
        return self.tmp(e.dtype, f"({ctype}){{{', '.join(elems)}}}")

    # arithmetic ----------------------------------------------------------------
    def _binary(self, e, op: str) -> str:
        return self.tmp(e.dtype, f"{self.expr(e.a)} {op} {self.expr(e.b)}")

    def e_Add(self, e):
        return self._binary(e, "+")

    def e_Sub(self, e):
        return self._binary(e, "-")

    def e_Mul(self, e):
        return self._binary(e, "*")

    def e_Div(self, e):
        return self._binary(e, "/")

    def e_Mod(self, e):
        if dt.is_float(e.dtype):
            return self.math("fmod", [self.expr(e.a), self.expr(e.b)], e.dtype)
        return self._binary(e, "%")

    def _floor(self, e, which: str) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        if dt.is_float(e.dtype):
            q = self.math("floor", [self.tmp(e.dtype, f"{a} / {b}")], e.dtype)
            return q if which == "div" else self.tmp(e.dtype, f"{a} - {q} * {b}")
        if dt.is_uint(e.dtype) or dt.is_bool(e.dtype):
            return self.tmp(e.dtype, f"{a} {'/' if which == 'div' else '%'} {b}")
        q = self.tmp(e.dtype, f"{a} / {b}")
        r = self.tmp(e.dtype, f"{a} % {b}")
        # Adjust when the remainder is non-zero and its sign differs from the divisor's.
        adjust = self.tmp(e.dtype if dt.lanes_of(e.dtype) > 1 else "bool",
                          f"({r} != 0) & (({r} ^ {b}) < 0)")
        if dt.lanes_of(e.dtype) > 1:          # adjust is a lane mask: 0 or -1
            return self.tmp(e.dtype, f"{q} + {adjust}" if which == "div" else f"{r} + ({adjust} & {b})")
        return self.tmp(e.dtype, f"{q} - {adjust}" if which == "div" else f"{adjust} ? {r} + {b} : {r}")

    def e_FloorDiv(self, e):
        return self._floor(e, "div")

    def e_FloorMod(self, e):
        return self._floor(e, "mod")

    def _minmax(self, e, op: str) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        keep = f"{a} {op}= {b}"
        if dt.is_float(e.dtype):
            # numpy's semantics: (a <= b or a is NaN) ? a : b, so NaN from either side wins.
            keep = f"({keep}) | ({a} != {a})"
        if dt.lanes_of(e.dtype) == 1:
            return self.tmp(e.dtype, f"({keep}) ? {a} : {b}")
        if dt.is_bool(e.dtype):
            return self.tmp(e.dtype, f"{a} {'&' if op == '<' else '|'} {b}")
        return self.select(self.to_mask(keep, e.dtype), a, b, e.dtype)

    def e_Min(self, e):
        return self._minmax(e, "<")

    def e_Max(self, e):
        return self._minmax(e, ">")

    # logic ---------------------------------------------------------------------
    def _compare(self, e):
        a, b = self.expr(e.a), self.expr(e.b)
        text = f"{a} {_CMP[type(e)]} {b}"
        if dt.lanes_of(e.dtype) == 1:
            return self.tmp("bool", text)
        return self.to_mask(text, e.a.dtype)

    e_EQ = e_NE = e_LT = e_LE = e_GT = e_GE = _compare

    def e_And(self, e):
        return self._binary(e, "&&" if dt.lanes_of(e.dtype) == 1 else "&")

    def e_Or(self, e):
        return self._binary(e, "||" if dt.lanes_of(e.dtype) == 1 else "|")

    def e_Not(self, e):
        return self.tmp(e.dtype, f"{'!' if dt.lanes_of(e.dtype) == 1 else '~'}{self.expr(e.a)}")

    def e_Select(self, e):
        c, t, f = (self.expr(x) for x in (e.condition, e.true_value, e.false_value))
        if dt.lanes_of(e.condition.dtype) == 1:
            return self.tmp(e.dtype, f"{c} ? {t} : {f}")
        return self.select(c, t, f, e.dtype)

    def select(self, mask: str, t: str, f: str, dtype: str) -> str:
        """Lane-wise choice by bit operations (C has no vector ?: ), on same-width integers."""
        ity = self.types.ctype(int_of_width(dtype))
        vty = self.types.ctype(dtype)
        m = mask
        if dt.element_of(int_of_width(dtype)) != "int32":
            m = self.tmp(int_of_width(dtype), f"__builtin_convertvector({mask}, {ity})")
        return self.tmp(dtype, f"({vty})((({ity}){t} & {m}) | (({ity}){f} & ~{m}))")

    # memory --------------------------------------------------------------------
    def pointer(self, buffer) -> str:
        found = self.env.get(buffer.data)
        if found is None:
            raise self.error(f"buffer {buffer.name!r} is neither a parameter nor allocated here")
        return found[0]

    def e_BufferLoad(self, e):
        ptr = self.pointer(e.buffer)
        lanes = dt.lanes_of(e.index.dtype)
        mem = dt.with_lanes(memory_dtype(e.buffer.dtype), lanes)
        if lanes == 1:
            raw = f"{ptr}[{self.expr(e.index)}]"
            return self.tmp("bool", f"{raw} != 0") if dt.is_bool(e.buffer.dtype) else \
                self.tmp(e.dtype, raw)
        vty = self.types.ctype(mem)
        value = self.declare(mem)
        contiguous = isinstance(e.index, Ramp) and isinstance(e.index.stride, IntImm) \
            and e.index.stride.value == 1
        if contiguous and self.mask is None:
            self.line(f"memcpy(&{value}, {ptr} + {self.expr(e.index.base)}, sizeof({vty}));")
        else:
            index = self.expr(e.index)
            self.line(f"{value} = ({vty}){{0}};")
            guard = f"if ({self.mask}[k]) " if self.mask is not None else ""
            self.line(f"for (int k = 0; k < {lanes}; ++k) {guard}{value}[k] = {ptr}[{index}[k]];")
        if dt.is_bool(e.buffer.dtype):
            return self.to_mask(f"{value} != 0", mem)
        return value

    # calls ---------------------------------------------------------------------
    def e_Call(self, e):
        method = getattr(self, "call_" + e.op, None)
        if method is not None:
            return method(e)
        args = [self.expr(a) for a in e.args]
        if e.op in _MATH or e.op in ("rsqrt", "sigmoid"):
            if not dt.is_float(e.dtype):
                raise self.error(f"{e.op} needs floating-point arguments, got `{e}` of type {e.dtype}")
            if e.op == "rsqrt":
                root = self.math("sqrt", args, e.dtype)
                return self.tmp(e.dtype, f"{self.expr(_one(e.dtype))} / {root}")
            if e.op == "sigmoid":
                one = self.expr(_one(e.dtype))
                ex = self.math("exp", [self.tmp(e.dtype, f"-{args[0]}")], e.dtype)
                return self.tmp(e.dtype, f"{one} / ({one} + {ex})")
            return self.math(_MATH[e.op], args, e.dtype)
        if e.op in _BINARY_OPS:
            return self.tmp(e.dtype, f"{args[0]} {_BINARY_OPS[e.op]} {args[1]}")
        raise self.error(f"unsupported intrinsic `{e.op}` in `{e}`")

    def math(self, fn: str, args: list[str], dtype: str) -> str:
        """A libm function (per lane for vectors; half computed in float)."""
        base = dt.element_of(dtype)
        name = fn if base == "float64" else fn + "f"
        lanes = dt.lanes_of(dtype)
        if lanes == 1:
            if base == "float16":
                return self.tmp(dtype, f"(_Float16){name}({', '.join(f'(float){a}' for a in args)})")
            return self.tmp(dtype, f"{name}({', '.join(args)})")
        result = self.declare(dtype)
        cast = "(_Float16)" if base == "float16" else ""
        lane_args = ", ".join(f"{a}[k]" for a in args)
        self.line(f"for (int k = 0; k < {lanes}; ++k) {result}[k] = {cast}{name}({lane_args});")
        return result

    def call_popcount(self, e):
        a = self.expr(e.args[0])
        bits = dt.bits_of(e.dtype)
        fn, cast = ("__builtin_popcountll", "uint64_t") if bits == 64 else \
            ("__builtin_popcount", f"uint{bits}_t")
        if dt.lanes_of(e.dtype) == 1:
            return self.tmp(e.dtype, f"{fn}(({cast}){a})")
        result = self.declare(e.dtype)
        self.line(f"for (int k = 0; k < {dt.lanes_of(e.dtype)}; ++k) {result}[k] = {fn}(({cast}){a}[k]);")
        return result

    def call_bitwise_not(self, e):
        return self.tmp(e.dtype, f"~{self.expr(e.args[0])}")

    def call_reinterpret(self, e):
        src = e.args[0].dtype
        if dt.bits_of(src) * dt.lanes_of(src) != dt.bits_of(e.dtype) * dt.lanes_of(e.dtype):
            raise self.error(f"reinterpret `{e}` changes the size from {src} to {e.dtype}")
        value = self.expr(e.args[0])
        if dt.lanes_of(e.dtype) > 1:
            return self.tmp(e.dtype, f"({self.types.ctype(e.dtype)}){value}")
        result = self.declare(e.dtype)
        self.line(f"memcpy(&{result}, &{value}, sizeof({result}));")
        return result

    def call_fma(self, e):
        return self.math("fma", [self.expr(a) for a in e.args], e.dtype)

    def call_likely(self, e):
        c = self.expr(e.args[0])
        return self.tmp("bool", f"__builtin_expect({c}, 1)") if dt.lanes_of(e.dtype) == 1 else c

    def call_if_then_else(self, e):
        cond, t, f = e.args
        c = self.expr(cond)
        if dt.lanes_of(cond.dtype) > 1:
            return self._masked_choice(c, t, f, e.dtype)
        result = self.declare(e.dtype)
        saved = self.memo
        for header, branch in ((f"if ({c})", t), ("else", f)):
            self.open(header)
            self.memo = dict(saved)
            self.line(f"{result} = {self.expr(branch)};")
            self.close()
        self.memo = saved
        return result

    def _masked_choice(self, c: str, t, f, dtype: str) -> str:
        outer, saved = self.mask, self.memo
        values = []
        for lanes in (c, self.tmp(mask_dtype(dt.lanes_of(dtype)), f"~{c}")):
            self.mask = lanes if outer is None else self.tmp(mask_dtype(dt.lanes_of(dtype)),
                                                             f"{outer} & {lanes}")
            self.memo = {}
            values.append(self.expr(t if not values else f))
        self.mask, self.memo = outer, saved
        return self.select(c, values[0], values[1], dtype)

    # ------------------------------------------------------------------ statements
    def stmt(self, s) -> None:
        method = getattr(self, "s_" + type(s).__name__, None)
        if method is None:
            raise self.error(f"cannot compile statement {type(s).__name__}:\n{s}")
        method(s)

    def s_SeqStmt(self, s):
        for x in s.seq:
            self.stmt(x)

    def s_AttrStmt(self, s):
        self.stmt(s.body)

    def s_Evaluate(self, s):
        if not isinstance(s.value, IntImm):
            self.memo = {}
            self.line(f"(void){self.expr(s.value)};")

    def s_LetStmt(self, s):
        self.memo = {}
        name = self.tmp(s.var.dtype, self.expr(s.value), _ident(s.var.name) + "_")
        self.env[s.var] = (name, s.var.dtype)
        self.stmt(s.body)
        del self.env[s.var]

    def s_BufferStore(self, s):
        self.memo = {}
        value = self.expr(s.value)
        ptr = self.pointer(s.buffer)
        lanes = dt.lanes_of(s.index.dtype)
        if dt.lanes_of(s.value.dtype) != lanes:
            raise self.error(f"store of {s.value.dtype} value at a {s.index.dtype} index:\n{s}")
        if lanes == 1:
            self.line(f"{ptr}[{self.expr(s.index)}] = {value};")
            return
        mem = dt.with_lanes(memory_dtype(s.buffer.dtype), lanes)
        if dt.is_bool(s.buffer.dtype):
            value = self.tmp(mem, f"__builtin_convertvector({value} & 1, {self.types.ctype(mem)})")
        if isinstance(s.index, Ramp) and isinstance(s.index.stride, IntImm) and s.index.stride.value == 1:
            self.line(f"memcpy({ptr} + {self.expr(s.index.base)}, &{value}, sizeof({value}));")
        else:
            index = self.expr(s.index)
            self.line(f"for (int k = 0; k < {lanes}; ++k) {ptr}[{index}[k]] = {value}[k];")

    def s_IfThenElse(self, s):
        self.memo = {}
        if dt.lanes_of(s.condition.dtype) != 1:
            raise self.error(f"if statement on a vector condition `{s.condition}`")
        self.open(f"if ({self.expr(s.condition)})")
        self.stmt(s.then_case)
        if s.else_case is not None:
            self.close("} else {")
            self.depth += 1
            self.stmt(s.else_case)
        self.close()

    def s_AssertStmt(self, s):
        self.memo = {}
        message = s.message.value if isinstance(s.message, StringImm) else str(s.message)
        code = self.module.errors.code(f"{self.func_name}: assertion `{s.condition}` failed: {message}")
        self.fail_unless(self.expr(s.condition), str(code))
        self.stmt(s.body)

    def fail_unless(self, ok: str, code: str) -> None:
        self.open(f"if (__builtin_expect(!({ok}), 0))")
        for ptr in reversed(self.heap):
            self.line(f"free({ptr});")
        self.line(f"return {code};")
        self.close()

    def s_Allocate(self, s):
        self.memo = {}
        buf = s.buffer
        elem = self.types.ctype(memory_dtype(buf.dtype)) if dt.lanes_of(buf.dtype) == 1 else \
            self.types.ctype(buf.dtype)
        name = f"{_ident(buf.name)}_{self._count}"
        self._count += 1
        self.open("")
        if isinstance(s.extent, IntImm) and self.planner.on_stack(s.extent.value, buf.dtype):
            self.line(f"{elem} {name}[{max(1, s.extent.value)}] __attribute__((aligned({HEAP_ALIGN})));")
            self.env[buf.data] = (name, "handle")
            self.stmt(s.body)
        else:
            extent = self.expr(s.extent)
            nbytes = dt.bytes_of(buf.dtype) * dt.lanes_of(buf.dtype)
            size = self.tmp("uint64", f"((uint64_t){extent} * {nbytes} + {HEAP_ALIGN - 1}) & "
                                      f"~(uint64_t){HEAP_ALIGN - 1}")
            self.line(f"{elem}* {name} = ({elem}*)aligned_alloc({HEAP_ALIGN}, "
                      f"{size} > {HEAP_ALIGN} ? {size} : {HEAP_ALIGN});")
            code = self.module.errors.code(f"{self.func_name}: out of memory allocating {buf.name!r}")
            self.fail_unless(f"{name} != NULL", str(code))
            self.heap.append(name)
            self.env[buf.data] = (name, "handle")
            self.stmt(s.body)
            self.heap.pop()
            self.line(f"free({name});")
        del self.env[buf.data]
        self.close()

    def s_For(self, s):
        self.memo = {}
        var = s.loop_var
        if not dt.is_int(var.dtype):
            raise self.error(f"loop variable `{var.name}` has type {var.dtype}; loops count in "
                             f"signed integers")
        lo = self.cast(self.expr(s.min), s.min.dtype, var.dtype)
        extent = self.cast(self.expr(s.extent), s.extent.dtype, var.dtype)
        if s.kind == "parallel" and self.parallel_depth == 0:
            self.parallel_for(s, lo, extent)
            return
        hi = self.tmp(var.dtype, f"{lo} + {extent}")
        self.serial_loop(var, lo, hi, s.body)

    def serial_loop(self, var, lo: str, hi: str, body) -> None:
        name = f"{_ident(var.name)}_{self._count}"
        self._count += 1
        ctype = self.types.ctype(var.dtype)
        self.open(f"for ({ctype} {name} = {lo}; {name} < {hi}; ++{name})")
        self.env[var] = (name, var.dtype)
        self.stmt(body)
        del self.env[var]
        self.close()

    def parallel_for(self, s, lo: str, extent: str) -> None:
        module = self.module
        module.uses_parallel = True
        ltype = self.types.ctype(s.loop_var.dtype)
        captured = closure_vars(s)
        fields = []
        for k, var in enumerate(captured):
            found = self.env.get(var)
            if found is None:
                raise self.error(f"variable `{var.name}` is used in a parallel loop but not defined")
            ctype = "void*" if found[1] == "handle" else self.types.ctype(found[1])
            fields.append((f"f{k}", ctype, found[0], found[1], var))
        buffers = _buffers_in(s)
        base = module.unique(f"{self.func_name}__par")
        struct = f"struct {base}_closure"
        body = CFunction(module, self.func_name, f"{base}_body", self.parallel_depth + 1)
        params = []
        for name, ctype, _, dtype, var in fields:
            pname = f"{_ident(var.name)}_{name}"
            if var in buffers:
                ptype = f"{self.types.memory_ctype(buffers[var].dtype)}* restrict"
            else:
                ptype = ctype
            params.append(f"{ptype} {pname}")
            body.env[var] = (pname, dtype)
        body.serial_loop(s.loop_var, "lo", "hi", s.body)
        body.line("return 0;")
        body.finish(f"static int32_t {body.c_name}({', '.join(params + [f'{ltype} lo', f'{ltype} hi'])})")
        members = "".join(f"{ctype} {name}; " for name, ctype, *_ in fields)
        casts = ", ".join(f"({p.rsplit(' ', 1)[0]})c->{name}" for p, (name, *_) in zip(params, fields))
        module.functions.append(
            f"{struct} {{ {members}{ltype} lo; {ltype} extent; }};\n"
            f"static int32_t {base}(int32_t task, int32_t ntasks, void* closure) {{\n"
            f"  {struct}* c = ({struct}*)closure;\n"
            f"  {ltype} chunk = (c->extent + ntasks - 1) / ntasks;\n"
            f"  {ltype} begin = ({ltype})task * chunk;\n"
            f"  {ltype} end = begin + chunk < c->extent ? begin + chunk : c->extent;\n"
            f"  return {base}_body({casts + ', ' if casts else ''}c->lo + begin, c->lo + end);\n}}\n")
        closure = f"closure{self._count}"
        self._count += 1
        inits = "".join(f".{name} = {value}, " for name, _, value, *_ in fields)
        self.open(f"if ({extent} > 0)")
        self.line(f"{struct} {closure} = {{ {inits}.lo = {lo}, .extent = {extent} }};")
        ntasks = f"{extent} < {module.num_threads} ? (int32_t){extent} : 0"
        rc = self.tmp("int32", f"kiln_parallel_launch({base}, &{closure}, {ntasks})", "rc")
        self.fail_unless(f"{rc} == 0", rc)
        self.close()



def _one(dtype: str):
    one = FloatImm(dt.element_of(dtype), 1.0)
    return one if dt.lanes_of(dtype) == 1 else Broadcast(one, dt.lanes_of(dtype))


def _buffers_in(loop) -> dict:
    """Buffer data variables used in a loop, mapped to their buffers."""
    found: dict = {}

    def visit(n):
        if isinstance(n, (BufferLoad, BufferStore)):
            found.setdefault(n.buffer.data, n.buffer)

    walk(loop.body, visit)
    return found


def _is_literal(text: str) -> bool:
    return not re.match(r"^[A-Za-z_]\w*$", text) or text in ("NAN", "INFINITY")

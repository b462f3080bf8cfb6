"""Loop IR as C source, with the same functions, calling convention, closures and failure
paths as the LLVM back-end (see kiln/codegen/llvm/function.py for the layout). What each
construct means is written once in kiln/codegen/emitter.py; this file spells it in C.

Every intermediate value is a typed temporary (`float t3 = a + b;`), so C's integer promotions
never change a result: an int8 sum wraps exactly as numpy's does, a _Float16 product is rounded
at its assignment (-fexcess-precision=standard).
"""
from __future__ import annotations

import re
from contextlib import contextmanager

from ...tir import dtype as dt
from ...tir.buffer import Buffer
from ...tir.expr import (EQ, GE, GT, LE, LT, NE, Add, Broadcast, BufferLoad, Div, FloatImm,
                         IntImm, Mul, Sub)
from ...tir.function import PrimFunc
from ...tir.stmt import BufferStore
from ..common import HEAP_ALIGN, ErrorTable, symbol_of, walk
from ..emitter import (BaseFunctionEmitter, BaseModuleEmitter, argument_slot, dense_base,
                       ident)
from .types import (PRELUDE, CTypes, float_literal, int_literal, int_of_width, mask_dtype,
                    memory_dtype)

_CMP = {EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}
_ARITH = {Add: "+", Sub: "-", Mul: "*", Div: "/"}
# Float math: name -> libm function for double (float adds "f"); half is computed in float.
_MATH = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log10": "log10",
         "sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "trunc": "trunc", "round": "rint",
         "fabs": "fabs", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh", "pow": "pow",
         "erf": "erf", "log1p": "log1p", "expm1": "expm1", "atan": "atan", "asin": "asin",
         "acos": "acos", "fmod": "fmod", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh",
         "acosh": "acosh", "atanh": "atanh"}
_BINARY_OPS = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "shift_left": "<<",
               "shift_right": ">>"}
# KilnValue field of each argument slot (see emitter.argument_slot).
_SLOT_FIELD = {"handle": "v_handle", "float64": "v_float64", "int64": "v_int64"}


class CModuleEmitter(BaseModuleEmitter):
    """Emits PrimFuncs into one C translation unit.

    Example:
        >>> m = CModuleEmitter(num_threads=2)
        >>> m.add(func)           # doctest: +SKIP
        >>> source = m.text()     # doctest: +SKIP
    """

    def __init__(self, num_threads: int, errors: ErrorTable | None = None):
        super().__init__(num_threads, errors)
        self.types = CTypes()
        self.functions: list[str] = []

    def text(self) -> str:
        messages = "\n".join(f"/* status {k + 1}: {m.replace('*/', '* /')} */"
                             for k, m in enumerate(self.errors.messages))
        return "\n".join([PRELUDE, self.types.text(), "", *self.functions, messages, ""])

    def emit_impl(self, func: PrimFunc, params, names) -> str:
        impl = CFunction(self, func.name, f"{symbol_of(func.name)}__impl", parallel_depth=0)
        decls = [f"{self.types.memory_ctype(p.dtype)}* restrict {name}" if isinstance(p, Buffer)
                 else f"{self.types.ctype(p.dtype)} {name}" for p, name in zip(params, names)]
        impl.bind_params(params, names)
        impl.run(func.body)
        impl.finish(f"static int32_t {impl.c_name}({', '.join(decls) or 'void'})")
        return impl.c_name

    def emit_entry(self, func, params, impl_name: str, wrong_args_code: int) -> None:
        args = []
        for k, p in enumerate(params):
            value = f"args[{k}].{_SLOT_FIELD[argument_slot(p)]}"
            if isinstance(p, Buffer):
                args.append(f"({self.types.memory_ctype(p.dtype)}*){value}")
            elif dt.is_handle(p.dtype):
                args.append(value)
            elif dt.is_bool(p.dtype):
                args.append(f"{value} != 0")
            else:
                args.append(f"({self.types.ctype(p.dtype)}){value}")
        self.functions.append(
            f"int32_t {symbol_of(func.name)}(KilnValue* args, int32_t num_args) {{\n"
            f"  if (num_args != {len(params)}) return {wrong_args_code};\n"
            f"  return {impl_name}({', '.join(args)});\n}}\n")


class CFunction(BaseFunctionEmitter):
    """One C function: statements and expressions, as typed temporaries (values are C names
    or literals)."""

    def __init__(self, module: CModuleEmitter, func_name: str, c_name: str, parallel_depth: int):
        super().__init__(module, func_name, parallel_depth)
        self.types = module.types
        self.c_name = c_name
        self.lines: list[str] = []
        self.depth = 1
        self._count = 0

    # ------------------------------------------------------------------ output
    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def fresh(self, hint: str) -> str:
        name = f"{hint}{self._count}"
        self._count += 1
        return name

    def tmp(self, dtype: str, value: str, hint: str = "t") -> str:
        name = self.fresh(hint)
        self.line(f"{self.types.ctype(dtype)} {name} = {value};")
        return name

    def declare(self, dtype: str, hint: str = "t") -> str:
        name = self.fresh(hint)
        self.line(f"{self.types.ctype(dtype)} {name};")
        return name

    def open(self, header: str) -> None:
        self.line(header + " {")
        self.depth += 1

    def close(self, trailer: str = "}") -> None:
        self.depth -= 1
        self.line(trailer)

    @contextmanager
    def block(self):
        self.open("")
        yield
        self.close()

    def run(self, body) -> None:
        self.stmt(body)
        self.line("return 0;")

    def finish(self, signature: str) -> None:
        self.module.functions.append(signature + " {\n" + "\n".join(self.lines) + "\n}\n")

    # ------------------------------------------------------------------ expressions
    def e_IntImm(self, e):
        return int_literal(e.value, e.dtype)

    def e_FloatImm(self, e):
        return float_literal(e.value, e.dtype)

    def let_value(self, var, value: str) -> str:
        return self.tmp(var.dtype, value, ident(var.name) + "_")

    def convert(self, v: str, src: str, dst: str, kind: str) -> str:
        if dt.lanes_of(dst) == 1:
            if kind == "to_bool":
                return self.tmp(dst, f"{v} != 0")
            return self.tmp(dst, f"({self.types.ctype(dst)}){v}")
        if kind == "to_bool":
            return self.to_mask(f"{v} != 0", src)
        if dt.is_bool(src):
            v = f"{v} & 1"                     # a lane mask is 0 or -1
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

    def _arith(self, e):
        return self._binary(e, _ARITH[type(e)])

    e_Add = e_Sub = e_Mul = e_Div = _arith

    def e_Mod(self, e):
        if dt.is_float(e.dtype):
            return self.libm("fmod", [self.expr(e.a), self.expr(e.b)], e.dtype)
        return self._binary(e, "%")

    def _floor(self, e, which: str) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        if dt.is_float(e.dtype):
            q = self.libm("floor", [self.tmp(e.dtype, f"{a} / {b}")], e.dtype)
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
    def e_BufferLoad(self, e):
        ptr = self.buffer_pointer(e.buffer)
        lanes = dt.lanes_of(e.index.dtype)
        mem = dt.with_lanes(memory_dtype(e.buffer.dtype), lanes)
        if lanes == 1:
            raw = f"{ptr}[{self.expr(e.index)}]"
            return self.tmp("bool", f"{raw} != 0") if dt.is_bool(e.buffer.dtype) else \
                self.tmp(e.dtype, raw)
        vty = self.types.ctype(mem)
        value = self.declare(mem)
        first = dense_base(e.index)
        if first is not None and self.mask is None:
            self.line(f"memcpy(&{value}, {ptr} + {self.expr(first)}, sizeof({vty}));")
        else:
            index = self.expr(e.index)
            self.line(f"{value} = ({vty}){{0}};")
            guard = f"if ({self.mask}[k]) " if self.mask is not None else ""
            self.line(f"for (int k = 0; k < {lanes}; ++k) {guard}{value}[k] = {ptr}[{index}[k]];")
        if dt.is_bool(e.buffer.dtype):
            return self.to_mask(f"{value} != 0", mem)
        return value

    # calls ---------------------------------------------------------------------
    def float_math(self, op: str, args: list[str], dtype: str) -> str:
        if op == "rsqrt":
            root = self.libm("sqrt", args, dtype)
            return self.tmp(dtype, f"{self.expr(_one(dtype))} / {root}")
        if op == "sigmoid":
            one = self.expr(_one(dtype))
            ex = self.libm("exp", [self.tmp(dtype, f"-{args[0]}")], dtype)
            return self.tmp(dtype, f"{one} / ({one} + {ex})")
        return self.libm(_MATH[op], args, dtype)

    def bitwise(self, e, args: list[str]) -> str:
        return self.tmp(e.dtype, f"{args[0]} {_BINARY_OPS[e.op]} {args[1]}")

    def libm(self, fn: str, args: list[str], dtype: str) -> str:
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
        return self.libm("fma", [self.expr(a) for a in e.args], e.dtype)

    def call_prefetch(self, e):
        # read, locality 2 (L2 and outer levels): as the LLVM back-end's llvm.prefetch
        (target,) = e.args
        ptr = self.buffer_pointer(target.buffer)
        self.line(f"__builtin_prefetch({ptr} + {self.expr(target.index)}, 0, 2);")
        return "0"

    def call_likely(self, e):
        c = self.expr(e.args[0])
        return self.tmp("bool", f"__builtin_expect({c}, 1)") if dt.lanes_of(e.dtype) == 1 else c

    def branch_value(self, c: str, t, f, dtype: str) -> str:
        """Scalar if_then_else: only the chosen side is evaluated."""
        result = self.declare(dtype)
        saved = self.memo
        for header, branch in ((f"if ({c})", t), ("else", f)):
            self.open(header)
            self.memo = dict(saved)
            self.line(f"{result} = {self.expr(branch)};")
            self.close()
        self.memo = saved
        return result

    def mask_not(self, c: str, dtype: str) -> str:
        return self.tmp(mask_dtype(dt.lanes_of(dtype)), f"~{c}")

    def mask_and(self, a: str, b: str, dtype: str) -> str:
        return self.tmp(mask_dtype(dt.lanes_of(dtype)), f"{a} & {b}")

    # ------------------------------------------------------------------ statements
    def discard(self, value: str) -> None:
        self.line(f"(void){value};")

    def store(self, buffer, index, value: str) -> None:
        ptr = self.buffer_pointer(buffer)
        lanes = dt.lanes_of(index.dtype)
        if lanes == 1:
            self.line(f"{ptr}[{self.expr(index)}] = {value};")
            return
        mem = dt.with_lanes(memory_dtype(buffer.dtype), lanes)
        if dt.is_bool(buffer.dtype):
            value = self.tmp(mem, f"__builtin_convertvector({value} & 1, {self.types.ctype(mem)})")
        first = dense_base(index)
        if first is not None:
            self.line(f"memcpy({ptr} + {self.expr(first)}, &{value}, sizeof({value}));")
        else:
            offsets = self.expr(index)
            self.line(f"for (int k = 0; k < {lanes}; ++k) {ptr}[{offsets}[k]] = {value}[k];")

    def branch(self, cond: str, then_case, else_case) -> None:
        self.open(f"if ({cond})")
        self.stmt(then_case)
        if else_case is not None:
            self.close("} else {")
            self.depth += 1
            self.stmt(else_case)
        self.close()

    def status(self, code: int) -> str:
        return str(code)

    def fail_unless(self, ok: str, status: str) -> None:
        self.open(f"if (__builtin_expect(!({ok}), 0))")
        for ptr in reversed(self.heap):
            self.free(ptr)
        self.line(f"return {status};")
        self.close()

    def _element_ctype(self, buf) -> str:
        if dt.lanes_of(buf.dtype) == 1:
            return self.types.ctype(memory_dtype(buf.dtype))
        return self.types.ctype(buf.dtype)

    def alloc_stack(self, buf, count: int) -> str:
        elem = self._element_ctype(buf)
        name = self.fresh(ident(buf.name) + "_")
        self.line(f"{elem} {name}[{count}] __attribute__((aligned({HEAP_ALIGN})));")
        return name

    def alloc_heap(self, buf, extent) -> str:
        elem = self._element_ctype(buf)
        name = self.fresh(ident(buf.name) + "_")
        count = self.expr(extent)
        nbytes = dt.bytes_of(buf.dtype) * dt.lanes_of(buf.dtype)
        self.line(f"{elem}* {name} = ({elem}*)kiln_workspace_alloc((uint64_t){count} * {nbytes});")
        oom = self.status_of(f"out of memory allocating {buf.name!r}")
        self.fail_unless(f"{name} != NULL", oom)
        return name

    def free(self, ptr: str) -> None:
        self.line(f"kiln_workspace_free({ptr});")

    def loop_end(self, lo: str, extent: str, dtype: str) -> str:
        return self.tmp(dtype, f"{lo} + {extent}")

    def serial_loop(self, var, lo: str, hi: str, body, kind: str = "serial") -> None:
        name = self.fresh(ident(var.name) + "_")
        ctype = self.types.ctype(var.dtype)
        self.open(f"for ({ctype} {name} = {lo}; {name} < {hi}; ++{name})")
        with self.scoped(var, name):
            self.stmt(body)
        self.close()

    def parallel_for(self, s, lo: str, extent: str) -> None:
        module = self.module
        ltype = self.types.ctype(s.loop_var.dtype)
        buffers = _buffers_in(s)
        fields = []                # (member, its C type, value here, variable)
        for k, (var, value) in enumerate(self.closure(s)):
            handle = var in buffers or dt.is_handle(var.dtype)
            fields.append((f"f{k}", "void*" if handle else self.types.ctype(var.dtype), value, var))
        base = module.unique(f"{self.func_name}__par")
        struct = f"struct {base}_closure"
        body = CFunction(module, self.func_name, f"{base}_body", self.parallel_depth + 1)
        params = []
        for member, ctype, _, var in fields:
            pname = f"{ident(var.name)}_{member}"
            if var in buffers:
                ptype = f"{self.types.memory_ctype(buffers[var].dtype)}* restrict"
            else:
                ptype = ctype
            params.append(f"{ptype} {pname}")
            body.env[var] = pname
        body.serial_loop(s.loop_var, "lo", "hi", s.body)
        body.line("return 0;")
        body.finish(f"static int32_t {body.c_name}({', '.join(params + [f'{ltype} lo', f'{ltype} hi'])})")
        members = "".join(f"{ctype} {member}; " for member, ctype, *_ in fields)
        casts = ", ".join(f"({p.rsplit(' ', 1)[0]})c->{member}" for p, (member, *_) in zip(params, fields))
        module.functions.append(
            f"{struct} {{ {members}{ltype} lo; {ltype} extent; }};\n"
            f"static int32_t {base}(int32_t task, int32_t ntasks, void* closure) {{\n"
            f"  {struct}* c = ({struct}*)closure;\n"
            f"  {ltype} chunk = (c->extent + ntasks - 1) / ntasks;\n"
            f"  {ltype} begin = ({ltype})task * chunk;\n"
            f"  {ltype} end = begin + chunk < c->extent ? begin + chunk : c->extent;\n"
            f"  return {base}_body({casts + ', ' if casts else ''}c->lo + begin, c->lo + end);\n}}\n")
        closure = self.fresh("closure")
        inits = "".join(f".{member} = {value}, " for member, _, value, _ in fields)
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

"""Expressions of the loop IR as LLVM IR: the `e_<Class>` and `call_<op>` handlers and the
expression hooks of the shared core (kiln/codegen/emitter.py), which owns dispatch and the
memoization of values within a statement.
"""
from __future__ import annotations

from ...tir import dtype as dt
from ...tir.expr import EQ, GE, GT, LE, LT, NE, Add, Div, FloatImm, IntImm, Mod, Mul, Ramp, Sub
from ..emitter import BaseFunctionEmitter, dense_base
from .ir import FunctionBuilder, Value
from .types import (constant, element_type, lanes_of_type, llvm_type, mangle, memory_type,
                    scalar_constant, with_lanes_type, zero)

_FLOAT_TYPES = ("half", "float", "double")
# Ramp loads with these constant strides become one contiguous load and a shuffle when the
# loaded span is at most this many elements (64 float32 = four zmm registers).
STRIDED_LOAD_STRIDES = (2, 3, 4)
MAX_STRIDED_LOAD_WIDTH = 64
# node -> (integer op, float op); -> (float op, unsigned op, signed op)
_ARITH = {Add: ("add", "fadd contract"), Sub: ("sub", "fsub contract"),
          Mul: ("mul", "fmul contract")}
_DIVISION = {Div: ("fdiv", "udiv", "sdiv"), Mod: ("frem", "urem", "srem")}
_ICMP = {EQ: "eq", NE: "ne", LT: "lt", LE: "le", GT: "gt", GE: "ge"}
_FCMP = {EQ: "oeq", NE: "une", LT: "olt", LE: "ole", GT: "ogt", GE: "oge"}
# Float math with an LLVM intrinsic (LLVM scalarizes vector forms it cannot do natively).
_LLVM_MATH = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log10": "log10",
              "sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "trunc": "trunc",
              "round": "roundeven", "fabs": "fabs", "sin": "sin", "cos": "cos", "tan": "tan",
              "tanh": "tanh", "pow": "pow"}
# Float math only libm has: name -> (float symbol, double symbol).
_LIBM = {"erf": ("erff", "erf"), "log1p": ("log1pf", "log1p"), "expm1": ("expm1f", "expm1"),
         "atan": ("atanf", "atan"), "asin": ("asinf", "asin"), "acos": ("acosf", "acos"),
         "sinh": ("sinhf", "sinh"), "cosh": ("coshf", "cosh"), "asinh": ("asinhf", "asinh"),
         "acosh": ("acoshf", "acosh"), "atanh": ("atanhf", "atanh")}
_BITWISE = {"bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor", "shift_left": "shl"}
# Conversions that are one instruction (see emitter.cast_kind).
_CASTS = {"ptr_to_int": "ptrtoint", "int_to_ptr": "inttoptr", "float_extend": "fpext",
          "float_truncate": "fptrunc", "float_to_int": "fptosi", "float_to_uint": "fptoui",
          "int_to_float": "sitofp", "uint_to_float": "uitofp", "sign_extend": "sext",
          "zero_extend": "zext", "truncate": "trunc"}


def _is_float(ty: str) -> bool:
    return element_type(ty) in _FLOAT_TYPES


class ExprEmitter(BaseFunctionEmitter):
    """Base of FunctionEmitter: turns expressions into Values in `self.fb`."""

    fb: FunctionBuilder

    # ------------------------------------------------------------------ leaves
    def e_IntImm(self, e):
        return Value(scalar_constant(e.value, e.dtype), llvm_type(e.dtype))

    e_FloatImm = e_IntImm

    # ------------------------------------------------------------------ casts
    def convert(self, v: Value, src: str, dst: str, kind: str) -> Value:
        ty = llvm_type(dst)
        if kind == "retag":
            return Value(v.ref, ty)            # int8 <-> uint8 and the like
        if kind == "to_bool":
            compare = "fcmp une" if dt.is_float(src) else "icmp ne"
            return self.fb.inst(f"{compare} {v.typed()}, {zero(v.ty)}", ty)
        if kind == "double_to_half":
            return self._double_to_half(v, ty)
        return self.fb.inst(f"{_CASTS[kind]} {v.typed()} to {ty}", ty)

    def _double_to_half(self, v: Value, ty: str) -> Value:
        """double -> half without a libcall (x86 converts to half from float only), correctly
        rounded: round to float with round-to-odd (truncate, then set the last bit if inexact),
        and round-to-odd at more than twice the target precision cannot double-round."""
        fb = self.fb
        lanes = lanes_of_type(v.ty)
        fty, ity, cty = (with_lanes_type(t, lanes) for t in ("float", "i32", "i1"))
        f = fb.inst(f"fptrunc {v.typed()} to {fty}", fty)
        back = fb.inst(f"fpext {f.typed()} to {v.ty}", v.ty)
        inexact = fb.inst(f"fcmp une {back.typed()}, {v.ref}", cty)
        too_big = fb.inst(f"fcmp ogt {self.call_intrinsic('fabs', [back]).typed()}, "
                          f"{self.call_intrinsic('fabs', [v]).ref}", cty)
        bits = fb.inst(f"bitcast {f.typed()} to {ity}", ity)
        smaller = fb.inst(f"sub {bits.typed()}, {constant(1, dt.with_lanes('int32', lanes))}", ity)
        bits = fb.inst(f"select {too_big.typed()}, {smaller.typed()}, {bits.typed()}", ity)
        odd = fb.inst(f"or {bits.typed()}, {constant(1, dt.with_lanes('int32', lanes))}", ity)
        bits = fb.inst(f"select {inexact.typed()}, {odd.typed()}, {bits.typed()}", ity)
        f = fb.inst(f"bitcast {bits.typed()} to {fty}", fty)
        return fb.inst(f"fptrunc {f.typed()} to {ty}", ty)

    # ------------------------------------------------------------------ arithmetic
    def _operands(self, e):
        a, b = self.expr(e.a), self.expr(e.b)
        if a.ty != b.ty:
            raise self.error(f"operands of `{e}` have types {e.a.dtype} and {e.b.dtype}")
        return a, b

    def _int_flags(self, dtype: str) -> str:
        # Index arithmetic is int32/int64; overflow there is undefined (as in C), which lets
        # LLVM widen induction variables and prove accesses consecutive.
        return " nsw" if dt.element_of(dtype) in ("int32", "int64") else ""

    def _arith(self, e):
        a, b = self._operands(e)
        int_op, float_op = _ARITH[type(e)]
        if _is_float(a.ty):
            return self.fb.inst(f"{float_op} {a.typed()}, {b.ref}", a.ty)
        return self.fb.inst(f"{int_op}{self._int_flags(e.dtype)} {a.typed()}, {b.ref}", a.ty)

    e_Add = e_Sub = e_Mul = _arith

    def _division(self, e):
        a, b = self._operands(e)
        float_op, unsigned_op, signed_op = _DIVISION[type(e)]
        if _is_float(a.ty):
            op = float_op
        else:
            op = unsigned_op if self._unsigned(e.a.dtype) else signed_op
        return self.fb.inst(f"{op} {a.typed()}, {b.ref}", a.ty)

    e_Div = e_Mod = _division

    @staticmethod
    def _unsigned(dtype: str) -> bool:
        return dt.is_uint(dtype) or dt.is_bool(dtype)

    def _floor_parts(self, e):
        """Truncated quotient and remainder, and whether floor rounding must adjust them."""
        a, b = self._operands(e)
        q = self.fb.inst(f"sdiv {a.typed()}, {b.ref}", a.ty)
        r = self.fb.inst(f"srem {a.typed()}, {b.ref}", a.ty)
        cond_ty = with_lanes_type("i1", lanes_of_type(a.ty))
        nonzero = self.fb.inst(f"icmp ne {r.typed()}, {zero(a.ty)}", cond_ty)
        sign = self.fb.inst(f"xor {r.typed()}, {b.ref}", a.ty)
        differ = self.fb.inst(f"icmp slt {sign.typed()}, {zero(a.ty)}", cond_ty)
        adjust = self.fb.inst(f"and {nonzero.typed()}, {differ.ref}", cond_ty)
        return a, b, q, r, adjust

    def e_FloorDiv(self, e):
        if dt.is_float(e.dtype):
            a, b = self._operands(e)
            return self.call_intrinsic("floor", [self.fb.inst(f"fdiv {a.typed()}, {b.ref}", a.ty)])
        if self._unsigned(e.dtype):
            a, b = self._operands(e)
            return self.fb.inst(f"udiv {a.typed()}, {b.ref}", a.ty)
        a, b, q, r, adjust = self._floor_parts(e)
        one = constant(1, e.dtype)
        less = self.fb.inst(f"sub {q.typed()}, {one}", a.ty)
        return self.fb.inst(f"select {adjust.typed()}, {less.typed()}, {q.typed()}", a.ty)

    def e_FloorMod(self, e):
        if dt.is_float(e.dtype):
            a, b = self._operands(e)
            q = self.call_intrinsic("floor", [self.fb.inst(f"fdiv {a.typed()}, {b.ref}", a.ty)])
            prod = self.fb.inst(f"fmul {q.typed()}, {b.ref}", a.ty)
            return self.fb.inst(f"fsub {a.typed()}, {prod.ref}", a.ty)
        if self._unsigned(e.dtype):
            a, b = self._operands(e)
            return self.fb.inst(f"urem {a.typed()}, {b.ref}", a.ty)
        a, b, q, r, adjust = self._floor_parts(e)
        more = self.fb.inst(f"add {r.typed()}, {b.ref}", a.ty)
        return self.fb.inst(f"select {adjust.typed()}, {more.typed()}, {r.typed()}", a.ty)

    def _minmax(self, e, which: str):
        a, b = self._operands(e)
        if _is_float(a.ty):
            # numpy's semantics: (a <= b or a is NaN) ? a : b, so NaN from either side wins.
            cond_ty = with_lanes_type("i1", lanes_of_type(a.ty))
            pred = "ole" if which == "min" else "oge"
            keep = self.fb.inst(f"fcmp {pred} {a.typed()}, {b.ref}", cond_ty)
            nan = self.fb.inst(f"fcmp uno {a.typed()}, {a.ref}", cond_ty)
            keep = self.fb.inst(f"or {keep.typed()}, {nan.ref}", cond_ty)
            return self.fb.inst(f"select {keep.typed()}, {a.typed()}, {b.typed()}", a.ty)
        if element_type(a.ty) == "i1":
            op = "and" if which == "min" else "or"
            return self.fb.inst(f"{op} {a.typed()}, {b.ref}", a.ty)
        sign = "u" if self._unsigned(e.dtype) else "s"
        return self.call_intrinsic(f"{sign}{which}", [a, b])

    def e_Min(self, e):
        return self._minmax(e, "min")

    def e_Max(self, e):
        return self._minmax(e, "max")

    # ------------------------------------------------------------------ logic
    def _compare(self, e):
        a, b = self._operands(e)
        ty = llvm_type(e.dtype)
        if _is_float(a.ty):
            return self.fb.inst(f"fcmp {_FCMP[type(e)]} {a.typed()}, {b.ref}", ty)
        pred = _ICMP[type(e)]
        if pred not in ("eq", "ne"):
            pred = ("u" if self._unsigned(e.a.dtype) else "s") + pred
        return self.fb.inst(f"icmp {pred} {a.typed()}, {b.ref}", ty)

    e_EQ = e_NE = e_LT = e_LE = e_GT = e_GE = _compare

    def e_And(self, e):
        a, b = self._operands(e)
        return self.fb.inst(f"and {a.typed()}, {b.ref}", a.ty)

    def e_Or(self, e):
        a, b = self._operands(e)
        return self.fb.inst(f"or {a.typed()}, {b.ref}", a.ty)

    def e_Not(self, e):
        a = self.expr(e.a)
        return self.fb.inst(f"xor {a.typed()}, {constant(1, e.dtype)}", a.ty)

    def e_Select(self, e):
        c, t, f = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)
        return self.select(c, t, f, e.dtype)

    def select(self, c: Value, t: Value, f: Value, dtype: str) -> Value:
        return self.fb.inst(f"select {c.typed()}, {t.typed()}, {f.typed()}", t.ty)

    # ------------------------------------------------------------------ vectors
    def broadcast(self, v: Value, dtype: str, lanes: int) -> Value:
        vty = f"<{lanes} x {v.ty}>"
        if v.is_const:
            return Value(f"splat ({v.typed()})", vty)
        one = self.fb.inst(f"insertelement <{lanes} x {v.ty}> poison, {v.typed()}, i64 0", vty)
        return self.fb.inst(f"shufflevector {one.typed()}, {vty} poison, "
                            f"<{lanes} x i32> zeroinitializer", vty)

    def e_Ramp(self, e):
        base, stride = self.expr(e.base), self.expr(e.stride)
        elem = dt.element_of(e.dtype)
        vty = llvm_type(e.dtype)
        if isinstance(e.base, (IntImm, FloatImm)) and isinstance(e.stride, (IntImm, FloatImm)):
            items = ", ".join(f"{base.ty} {scalar_constant(e.base.value + k * e.stride.value, elem)}"
                              for k in range(e.lanes))
            return Value(f"<{items}>", vty)
        if isinstance(e.stride, (IntImm, FloatImm)):
            offsets = Value("<" + ", ".join(
                f"{base.ty} {scalar_constant(k * e.stride.value, elem)}"
                for k in range(e.lanes)) + ">", vty)
        else:
            iota = Value("<" + ", ".join(f"{base.ty} {scalar_constant(k, elem)}"
                                         for k in range(e.lanes)) + ">", vty)
            op = "fmul" if _is_float(base.ty) else "mul" + self._int_flags(elem)
            strides = self.broadcast(stride, e.stride.dtype, e.lanes)
            offsets = self.fb.inst(f"{op} {strides.typed()}, {iota.ref}", vty)
        op = "fadd" if _is_float(base.ty) else "add" + self._int_flags(elem)
        bases = self.broadcast(base, e.base.dtype, e.lanes)
        return self.fb.inst(f"{op} {bases.typed()}, {offsets.ref}", vty)

    # ------------------------------------------------------------------ memory
    def address(self, buffer, index) -> tuple[Value, str, int]:
        """(pointer or vector of pointers, element type, lanes) of buffer[index]."""
        base = self.buffer_pointer(buffer)
        elem = memory_type(buffer.dtype)
        lanes = dt.lanes_of(index.dtype)
        first = index if lanes == 1 else dense_base(index)
        if first is not None:             # one pointer to `lanes` consecutive elements
            idx, pty = self.expr(first), "ptr"
        else:
            idx, pty = self.expr(index), f"<{lanes} x ptr>"
        ptr = self.fb.inst(f"getelementptr {elem}, ptr {base.ref}, {idx.typed()}", pty, "p")
        return ptr, elem, lanes

    def e_BufferLoad(self, e):
        strided = self._strided_load(e)
        if strided is not None:
            return strided
        ptr, elem, lanes = self.address(e.buffer, e.index)
        align = max(1, dt.bytes_of(e.buffer.dtype))
        mty = with_lanes_type(elem, lanes)
        mask = self.mask.typed() if self.mask is not None else f"<{lanes} x i1> splat (i1 true)"
        passthru = f"{mty} zeroinitializer" if self.mask is not None else f"{mty} poison"
        if ptr.ty == "ptr" and (lanes == 1 or self.mask is None):
            raw = self.fb.inst(f"load {mty}, ptr {ptr.ref}, align {align}", mty, "ld")
        elif ptr.ty == "ptr":
            # Lanes outside the mask are not touched (a padded tail may end at a page boundary).
            raw = self._masked_load(ptr, elem, lanes, align, self.mask)
        else:
            fn = self.fb.module.intrinsic(f"llvm.masked.gather.{mangle(mty)}.v{lanes}p0", mty,
                                          [ptr.ty, f"<{lanes} x i1>", mty])
            raw = self.fb.inst(f"call {mty} {fn}({ptr.ty} align {align} {ptr.ref}, {mask}, "
                               f"{passthru})", mty, "ld")
        if dt.is_bool(e.buffer.dtype):
            return self.fb.inst(f"icmp ne {raw.typed()}, {zero(mty)}", llvm_type(e.dtype))
        return raw

    def _masked_load(self, ptr, elem, lanes, align, mask):
        """llvm.masked.load of `lanes` elements under `mask` (a Value; lanes off it read as
        zero), widened to a power of two lanes (the extra ones masked off) when `lanes` is
        not one: LLVM 22's X86 back-end, with loop strength reduction, miscompiled a 9-lane
        masked load in a loop (tests/codegen/test_codegen_llvm_masked_load.py)."""
        mty = with_lanes_type(elem, lanes)
        wide = 1 << (lanes - 1).bit_length()
        wty = with_lanes_type(elem, wide)
        wmask = mask.typed()
        if wide != lanes:
            widen = ", ".join(f"i32 {min(k, lanes)}" for k in range(wide))
            wmask = self.fb.inst(f"shufflevector {mask.typed()}, <{lanes} x i1> zeroinitializer, "
                                 f"<{wide} x i32> <{widen}>", f"<{wide} x i1>", "m").typed()
        fn = self.fb.module.intrinsic(f"llvm.masked.load.{mangle(wty)}.p0", wty,
                                      ["ptr", f"<{wide} x i1>", wty])
        raw = self.fb.inst(f"call {wty} {fn}(ptr align {align} {ptr.ref}, {wmask}, "
                           f"{wty} zeroinitializer)", wty, "ld")
        if wide == lanes:
            return raw
        picks = ", ".join(f"i32 {k}" for k in range(lanes))
        return self.fb.inst(f"shufflevector {raw.typed()}, {wty} poison, <{lanes} x i32> "
                            f"<{picks}>", mty, "ld")

    def _strided_load(self, e):
        """buffer[ramp(b, s, n)] with a small constant stride s as one contiguous masked
        load of the (n-1)*s+1 elements it spans and a shuffle picking every s-th: a gather
        costs about one cycle per lane, this a load and a permute (stride-2 convolutions
        and pooling). Lanes past the span are masked off, so nothing outside it is read."""
        index = e.index
        if (self.mask is not None or dt.is_bool(e.buffer.dtype) or not isinstance(index, Ramp)
                or not isinstance(index.stride, IntImm)
                or index.stride.value not in STRIDED_LOAD_STRIDES):
            return None
        lanes, stride = index.lanes, index.stride.value
        width = lanes * stride
        if width > MAX_STRIDED_LOAD_WIDTH:
            return None
        span = (lanes - 1) * stride + 1
        base = self.buffer_pointer(e.buffer)
        elem = memory_type(e.buffer.dtype)
        idx = self.expr(index.base)
        ptr = self.fb.inst(f"getelementptr {elem}, ptr {base.ref}, {idx.typed()}", "ptr", "p")
        wty = with_lanes_type(elem, width)
        bits = ", ".join("i1 true" if k < span else "i1 false" for k in range(width))
        fn = self.fb.module.intrinsic(f"llvm.masked.load.{mangle(wty)}.p0", wty,
                                      ["ptr", f"<{width} x i1>", wty])
        align = max(1, dt.bytes_of(e.buffer.dtype))
        wide = self.fb.inst(f"call {wty} {fn}(ptr align {align} {ptr.ref}, <{width} x i1> "
                            f"<{bits}>, {wty} poison)", wty, "ld")
        picks = ", ".join(f"i32 {k * stride}" for k in range(lanes))
        return self.fb.inst(f"shufflevector {wide.typed()}, {wty} poison, <{lanes} x i32> "
                            f"<{picks}>", with_lanes_type(elem, lanes))

    # ------------------------------------------------------------------ calls
    def bitwise(self, e, args: list[Value]) -> Value:
        a, b = args
        op = _BITWISE.get(e.op) or ("lshr" if self._unsigned(e.args[0].dtype) else "ashr")
        return self.fb.inst(f"{op} {a.typed()}, {b.ref}", a.ty)

    def float_math(self, op: str, args: list[Value], dtype: str) -> Value:
        ty = args[0].ty
        if op == "rsqrt":
            root = self.call_intrinsic("sqrt", args)
            return self.fb.inst(f"fdiv {self._one(ty)}, {root.ref}", ty)
        if op == "sigmoid":
            neg = self.fb.inst(f"fneg {args[0].typed()}", ty)
            e = self.call_intrinsic("exp", [neg])
            den = self.fb.inst(f"fadd {self._one(ty)}, {e.ref}", ty)
            return self.fb.inst(f"fdiv {self._one(ty)}, {den.ref}", ty)
        if op in _LLVM_MATH:
            return self.call_intrinsic(_LLVM_MATH[op], args)
        return self.call_libm(_LIBM[op], args)

    def _one(self, ty: str) -> str:
        scalar = element_type(ty)
        text = scalar_constant(1.0, {"half": "float16", "float": "float32", "double": "float64"}[scalar])
        one = f"{scalar} {text}"
        return f"{ty} splat ({one})" if ty.startswith("<") else one

    def call_intrinsic(self, name: str, args: list[Value]) -> Value:
        ty = args[0].ty
        fn = self.fb.module.intrinsic(f"llvm.{name}.{mangle(ty)}", ty, [a.ty for a in args])
        return self.fb.inst(f"call {ty} {fn}({', '.join(a.typed() for a in args)})", ty)

    def call_libm(self, symbols: tuple[str, str], args: list[Value]) -> Value:
        """A libm function per lane; half is computed in float."""
        ty = args[0].ty
        scalar = element_type(ty)
        lanes = lanes_of_type(ty)
        work = "double" if scalar == "double" else "float"
        name = symbols[1] if work == "double" else symbols[0]
        fn = self.fb.module.declare(name, work, [work] * len(args), "nounwind")
        result = Value("poison", ty)
        for lane in range(lanes):
            lane_args = []
            for a in args:
                x = a if lanes == 1 else self.fb.inst(f"extractelement {a.typed()}, i64 {lane}", scalar)
                if scalar == "half":
                    x = self.fb.inst(f"fpext {x.typed()} to float", "float")
                lane_args.append(x)
            r = self.fb.inst(f"call {work} {fn}({', '.join(x.typed() for x in lane_args)})", work)
            if scalar == "half":
                r = self.fb.inst(f"fptrunc {r.typed()} to half", "half")
            if lanes == 1:
                return r
            result = self.fb.inst(f"insertelement {result.typed()}, {r.typed()}, i64 {lane}", ty)
        return result

    def call_fma(self, e):
        return self.call_intrinsic("fma", [self.expr(a) for a in e.args])

    def call_llvm_intrin(self, e):
        name = e.args[0].value
        args = [self.expr(a) for a in e.args[1:]]
        ty = llvm_type(e.dtype)
        fn = self.fb.module.intrinsic(name, ty, [a.ty for a in args])
        return self.fb.inst(f"call {ty} {fn}({', '.join(a.typed() for a in args)})", ty)

    def call_prefetch(self, e):
        # llvm.prefetch(address, rw = read, locality = 2 (L2 and outer levels), data cache)
        (target,) = e.args
        ptr, _, _ = self.address(target.buffer, target.index)
        fn = self.fb.module.intrinsic("llvm.prefetch.p0", "void", ["ptr", "i32", "i32", "i32"])
        self.fb.do(f"call void {fn}(ptr {ptr.ref}, i32 0, i32 2, i32 1)")
        return Value("0", "i32")

    def call_fmod(self, e):
        a, b = (self.expr(x) for x in e.args)
        if not _is_float(a.ty):
            raise self.error(f"fmod needs floating-point arguments, got `{e}`")
        return self.fb.inst(f"frem {a.typed()}, {b.ref}", a.ty)

    def call_popcount(self, e):
        return self.call_intrinsic("ctpop", [self.expr(e.args[0])])

    def call_bitwise_not(self, e):
        a = self.expr(e.args[0])
        return self.fb.inst(f"xor {a.typed()}, {constant(-1, e.dtype)}", a.ty)

    def call_reinterpret(self, e):
        v = self.expr(e.args[0])
        ty = llvm_type(e.dtype)
        if dt.bits_of(e.dtype) * dt.lanes_of(e.dtype) != \
                dt.bits_of(e.args[0].dtype) * dt.lanes_of(e.args[0].dtype):
            raise self.error(f"reinterpret `{e}` changes the size from {e.args[0].dtype} to {e.dtype}")
        return self.fb.inst(f"bitcast {v.typed()} to {ty}", ty)

    # A bitcast may change the lane count (four uint8 as one int32); the sizes are checked.
    call_bitcast = call_reinterpret

    def call_likely(self, e):
        c = self.expr(e.args[0])
        if c.ty != "i1":
            return c
        fn = self.fb.module.intrinsic("llvm.expect.i1", "i1", ["i1", "i1"])
        return self.fb.inst(f"call i1 {fn}(i1 {c.ref}, i1 true)", "i1")

    def branch_value(self, c: Value, t, f, dtype: str) -> Value:
        """Scalar if_then_else: only the chosen side is evaluated."""
        fb = self.fb
        then_l, else_l, end_l = fb.new_label("ite_then"), fb.new_label("ite_else"), fb.new_label("ite_end")
        fb.cbr(c, then_l, else_l)
        saved = self.memo
        fb.start(then_l)
        self.memo = dict(saved)
        tv = self.expr(t)
        then_end = fb.cur.label
        fb.br(end_l)
        fb.start(else_l)
        self.memo = dict(saved)
        fv = self.expr(f)
        else_end = fb.cur.label
        fb.br(end_l)
        fb.start(end_l)
        self.memo = saved
        return fb.inst(f"phi {tv.ty} [ {tv.ref}, %{then_end} ], [ {fv.ref}, %{else_end} ]", tv.ty)

    def mask_not(self, c: Value, dtype: str) -> Value:
        return self.fb.inst(f"xor {c.typed()}, splat (i1 true)", c.ty)

    def mask_and(self, a: Value, b: Value, dtype: str) -> Value:
        return self.fb.inst(f"and {a.typed()}, {b.ref}", a.ty)

"""Expressions of the loop IR as LLVM IR: a table from node class to emitter method, and one
from intrinsic name to emitter method.

Values of one statement are memoized by node (the IR is hash-consed, so a shared subexpression
is computed once); a branch of `if_then_else` gets its own memo, since its values do not
dominate the code after the branch.
"""
from __future__ import annotations

from ...tir import dtype as dt
from ...tir.expr import EQ, GE, GT, LE, LT, NE, FloatImm, IntImm, Ramp
from ..common import CodegenError
from .ir import FunctionBuilder, Value
from .types import (constant, element_type, lanes_of_type, llvm_type, mangle, memory_type,
                    scalar_constant, with_lanes_type, zero)

_FLOAT_TYPES = ("half", "float", "double")
_ICMP = {EQ: "eq", NE: "ne", LT: "lt", LE: "le", GT: "gt", GE: "ge"}
_FCMP = {EQ: "oeq", NE: "une", LT: "olt", LE: "ole", GT: "ogt", GE: "oge"}
# Float math with an LLVM intrinsic (LLVM scalarizes vector forms it cannot do natively).
_LLVM_MATH = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log10": "log10",
              "sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "trunc": "trunc",
              "round": "roundeven", "fabs": "fabs", "sin": "sin", "cos": "cos", "tan": "tan",
              "tanh": "tanh", "pow": "pow", "fma": "fma"}
# Float math only libm has: name -> (float symbol, double symbol).
_LIBM = {"erf": ("erff", "erf"), "log1p": ("log1pf", "log1p"), "expm1": ("expm1f", "expm1"),
         "atan": ("atanf", "atan"), "asin": ("asinf", "asin"), "acos": ("acosf", "acos")}
_BITWISE = {"bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor", "shift_left": "shl"}


def _is_float(ty: str) -> bool:
    return element_type(ty) in _FLOAT_TYPES


class ExprEmitter:
    """Mixin of FunctionEmitter: turns expressions into Values in `self.fb`."""

    fb: FunctionBuilder

    def _init_expr(self):
        self.env: dict = {}
        self.memo: dict = {}
        self.mask: Value | None = None     # lanes a vector load may touch (inside if_then_else)
        self._expr_table: dict = {}

    def error(self, message: str) -> CodegenError:
        return CodegenError(f"function {self.func_name!r}: {message}")

    # ------------------------------------------------------------------ dispatch
    def expr(self, e) -> Value:
        value = self.memo.get(e)
        if value is None:
            method = self._expr_table.get(type(e))
            if method is None:
                method = getattr(self, "e_" + type(e).__name__, None)
                if method is None:
                    raise self.error(f"cannot compile expression `{e}` ({type(e).__name__})")
                self._expr_table[type(e)] = method
            value = method(e)
            self.memo[e] = value
        return value

    # ------------------------------------------------------------------ leaves
    def e_IntImm(self, e):
        return Value(scalar_constant(e.value, e.dtype), llvm_type(e.dtype))

    def e_FloatImm(self, e):
        return Value(scalar_constant(e.value, e.dtype), llvm_type(e.dtype))

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
        value = self.expr(e.value)
        saved = self.env.get(e.var)
        self.env[e.var] = value
        try:
            return self.expr(e.body)
        finally:
            if saved is None:
                del self.env[e.var]
            else:
                self.env[e.var] = saved

    # ------------------------------------------------------------------ casts
    def e_Cast(self, e):
        return self.cast(self.expr(e.value), e.value.dtype, e.dtype)

    def cast(self, v: Value, src: str, dst: str) -> Value:
        if src == dst:
            return v
        lanes = dt.lanes_of(dst)
        if dt.lanes_of(src) != lanes:
            if dt.lanes_of(src) != 1:
                raise self.error(f"cannot cast {src} to {dst}: lane counts differ")
            v = self.broadcast(v, lanes)
            src = dt.with_lanes(src, lanes)
        ty = llvm_type(dst)
        if v.ty == ty:
            return Value(v.ref, ty)            # int8 <-> uint8 and the like
        sb, db = dt.element_of(src), dt.element_of(dst)
        if db == "bool":
            if dt.is_float(sb):
                return self.fb.inst(f"fcmp une {v.typed()}, {zero(v.ty)}", ty)
            return self.fb.inst(f"icmp ne {v.typed()}, {zero(v.ty)}", ty)
        if sb == "handle" or db == "handle":
            op = "ptrtoint" if sb == "handle" else "inttoptr"
            return self.fb.inst(f"{op} {v.typed()} to {ty}", ty)
        unsigned = sb == "bool" or dt.is_uint(sb)
        if sb == "float64" and db == "float16":
            return self._double_to_half(v, ty)
        if dt.is_float(sb) and dt.is_float(db):
            op = "fpext" if dt.bits_of(db) > dt.bits_of(sb) else "fptrunc"
        elif dt.is_float(sb):
            op = "fptoui" if dt.is_uint(db) else "fptosi"
        elif dt.is_float(db):
            op = "uitofp" if unsigned else "sitofp"
        elif dt.bits_of(db) > dt.bits_of(sb):
            op = "zext" if unsigned else "sext"
        else:
            op = "trunc"
        return self.fb.inst(f"{op} {v.typed()} to {ty}", ty)

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

    def _arith(self, e, int_op: str, float_op: str):
        a, b = self._operands(e)
        if _is_float(a.ty):
            return self.fb.inst(f"{float_op} {a.typed()}, {b.ref}", a.ty)
        return self.fb.inst(f"{int_op}{self._int_flags(e.dtype)} {a.typed()}, {b.ref}", a.ty)

    def e_Add(self, e):
        return self._arith(e, "add", "fadd contract")

    def e_Sub(self, e):
        return self._arith(e, "sub", "fsub contract")

    def e_Mul(self, e):
        return self._arith(e, "mul", "fmul contract")

    def e_Div(self, e):
        a, b = self._operands(e)
        if _is_float(a.ty):
            return self.fb.inst(f"fdiv {a.typed()}, {b.ref}", a.ty)
        op = "udiv" if self._unsigned(e.a.dtype) else "sdiv"
        return self.fb.inst(f"{op} {a.typed()}, {b.ref}", a.ty)

    def e_Mod(self, e):
        a, b = self._operands(e)
        if _is_float(a.ty):
            return self.fb.inst(f"frem {a.typed()}, {b.ref}", a.ty)
        op = "urem" if self._unsigned(e.a.dtype) else "srem"
        return self.fb.inst(f"{op} {a.typed()}, {b.ref}", a.ty)

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
        return self.fb.inst(f"select {c.typed()}, {t.typed()}, {f.typed()}", t.ty)

    # ------------------------------------------------------------------ vectors
    def broadcast(self, v: Value, lanes: int) -> Value:
        vty = f"<{lanes} x {v.ty}>"
        if v.is_const:
            return Value(f"splat ({v.typed()})", vty)
        one = self.fb.inst(f"insertelement <{lanes} x {v.ty}> poison, {v.typed()}, i64 0", vty)
        return self.fb.inst(f"shufflevector {one.typed()}, {vty} poison, "
                            f"<{lanes} x i32> zeroinitializer", vty)

    def e_Broadcast(self, e):
        return self.broadcast(self.expr(e.value), e.lanes)

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
            offsets = self.fb.inst(f"{op} {self.broadcast(stride, e.lanes).typed()}, {iota.ref}", vty)
        op = "fadd" if _is_float(base.ty) else "add" + self._int_flags(elem)
        return self.fb.inst(f"{op} {self.broadcast(base, e.lanes).typed()}, {offsets.ref}", vty)

    # ------------------------------------------------------------------ memory
    def buffer_pointer(self, buffer) -> Value:
        ptr = self.env.get(buffer.data)
        if ptr is None:
            raise self.error(f"buffer {buffer.name!r} is neither a parameter nor allocated here")
        return ptr

    def address(self, buffer, index) -> tuple[Value, str, int]:
        """(pointer or vector of pointers, element type, lanes) of buffer[index]."""
        base = self.buffer_pointer(buffer)
        elem = memory_type(buffer.dtype)
        lanes = dt.lanes_of(index.dtype)
        if lanes == 1:
            idx = self.expr(index)
            return self.fb.inst(f"getelementptr {elem}, ptr {base.ref}, {idx.typed()}", "ptr", "p"), elem, 1
        if isinstance(index, Ramp) and isinstance(index.stride, IntImm) and index.stride.value == 1:
            idx = self.expr(index.base)
            return self.fb.inst(f"getelementptr {elem}, ptr {base.ref}, {idx.typed()}", "ptr", "p"), elem, lanes
        idx = self.expr(index)
        pty = f"<{lanes} x ptr>"
        return self.fb.inst(f"getelementptr {elem}, ptr {base.ref}, {idx.typed()}", pty, "p"), elem, lanes

    def e_BufferLoad(self, e):
        ptr, elem, lanes = self.address(e.buffer, e.index)
        align = max(1, dt.bytes_of(e.buffer.dtype))
        mty = with_lanes_type(elem, lanes)
        mask = self.mask.typed() if self.mask is not None else f"<{lanes} x i1> splat (i1 true)"
        passthru = f"{mty} zeroinitializer" if self.mask is not None else f"{mty} poison"
        if ptr.ty == "ptr" and (lanes == 1 or self.mask is None):
            raw = self.fb.inst(f"load {mty}, ptr {ptr.ref}, align {align}", mty, "ld")
        elif ptr.ty == "ptr":
            # Lanes outside the mask are not touched (a padded tail may end at a page boundary).
            fn = self.fb.module.intrinsic(f"llvm.masked.load.{mangle(mty)}.p0", mty,
                                          ["ptr", f"<{lanes} x i1>", mty])
            raw = self.fb.inst(f"call {mty} {fn}(ptr align {align} {ptr.ref}, {mask}, {passthru})",
                               mty, "ld")
        else:
            fn = self.fb.module.intrinsic(f"llvm.masked.gather.{mangle(mty)}.v{lanes}p0", mty,
                                          [ptr.ty, f"<{lanes} x i1>", mty])
            raw = self.fb.inst(f"call {mty} {fn}({ptr.ty} align {align} {ptr.ref}, {mask}, "
                               f"{passthru})", mty, "ld")
        if dt.is_bool(e.buffer.dtype):
            return self.fb.inst(f"icmp ne {raw.typed()}, {zero(mty)}", llvm_type(e.dtype))
        return raw

    # ------------------------------------------------------------------ calls
    def e_Call(self, e):
        method = getattr(self, "call_" + e.op, None)
        if method is not None:
            return method(e)
        if e.op in _LLVM_MATH or e.op in _LIBM or e.op in ("rsqrt", "sigmoid"):
            if not dt.is_float(e.dtype):
                raise self.error(f"{e.op} needs floating-point arguments, got `{e}` of type {e.dtype}")
            args = [self.expr(a) for a in e.args]
            return self.float_math(e.op, args)
        if e.op in _BITWISE or e.op == "shift_right":
            a, b = (self.expr(x) for x in e.args)
            op = _BITWISE.get(e.op) or ("lshr" if self._unsigned(e.args[0].dtype) else "ashr")
            return self.fb.inst(f"{op} {a.typed()}, {b.ref}", a.ty)
        raise self.error(f"unsupported intrinsic `{e.op}` in `{e}`")

    def float_math(self, op: str, args: list[Value]) -> Value:
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

    def call_likely(self, e):
        c = self.expr(e.args[0])
        if c.ty != "i1":
            return c
        fn = self.fb.module.intrinsic("llvm.expect.i1", "i1", ["i1", "i1"])
        return self.fb.inst(f"call i1 {fn}(i1 {c.ref}, i1 true)", "i1")

    def call_if_then_else(self, e):
        cond, t, f = e.args
        if dt.lanes_of(cond.dtype) > 1:
            return self._masked_choice(cond, t, f)
        c = self.expr(cond)
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

    def _masked_choice(self, cond, t, f):
        """Vector if_then_else: each side's loads touch only the lanes that side chooses."""
        c = self.expr(cond)
        outer = self.mask
        not_c = self.fb.inst(f"xor {c.typed()}, splat (i1 true)", c.ty)
        saved = self.memo
        values = []
        for branch, lanes in ((t, c), (f, not_c)):
            self.mask = lanes if outer is None else self.fb.inst(
                f"and {outer.typed()}, {lanes.ref}", c.ty)
            self.memo = {}
            values.append(self.expr(branch))
        self.mask, self.memo = outer, saved
        tv, fv = values
        return self.fb.inst(f"select {c.typed()}, {tv.typed()}, {fv.typed()}", tv.ty)

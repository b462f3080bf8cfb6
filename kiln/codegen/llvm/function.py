"""Statements of the loop IR as LLVM IR, and the functions one PrimFunc becomes:

    i32 @name(ptr %args, i32 %num_args)      the kiln calling convention: unpacks KilnValues
    i32 @name__impl(ptr noalias %A, ...)     the body; buffers are noalias parameters
    i32 @name__parN(i32, i32, ptr)           one per parallel loop: a task of the thread pool
    i32 @name__parN_body(ptr noalias ..., lo, hi)   that task's chunk of iterations

Every function returns 0, or the code of the check that failed (see common.ErrorTable) after
freeing the heap temporaries it holds. What the statements mean is written once in
kiln/codegen/emitter.py; this file spells it in LLVM IR.
"""
from __future__ import annotations

from ...tir import dtype as dt
from ...tir.buffer import Buffer
from ..common import HEAP_ALIGN, ErrorTable, symbol_of
from ..emitter import BaseModuleEmitter, argument_slot, ident
from .expr import ExprEmitter
from .ir import FunctionBuilder, ModuleBuilder, Value
from .types import llvm_type, mangle, memory_type

_LAUNCH = "kiln_parallel_launch"
_WORKSPACE_ALLOC, _WORKSPACE_FREE = "kiln_workspace_alloc", "kiln_workspace_free"
_LOOP_HINTS = {"unrolled": "llvm.loop.unroll.enable", "vectorized": "llvm.loop.vectorize.enable"}


class ModuleEmitter(BaseModuleEmitter):
    """Emits PrimFuncs into one LLVM module.

    Example:
        >>> m = ModuleEmitter(num_threads=2)
        >>> m.add(func)                    # doctest: +SKIP
        >>> ir_text = m.text()             # doctest: +SKIP
    """

    def __init__(self, num_threads: int, errors: ErrorTable | None = None):
        super().__init__(num_threads, errors)
        self.builder = ModuleBuilder()
        self._unlikely: str | None = None

    def text(self) -> str:
        return self.builder.text()

    def unlikely_weights(self) -> str:
        if self._unlikely is None:
            self._unlikely = self.builder.meta('!"branch_weights", i32 1048575, i32 1')
        return self._unlikely

    def emit_impl(self, func, params, names) -> FunctionBuilder:
        impl_params = [("ptr", name, "noalias") if isinstance(p, Buffer)
                       else (llvm_type(p.dtype), name, "")
                       for p, name in zip(params, names)]
        impl = FunctionBuilder(self.builder, f"{symbol_of(func.name)}__impl", "i32", impl_params,
                               "internal")
        body = FunctionEmitter(self, func.name, impl, parallel_depth=0)
        body.bind_params(params, impl.params)
        body.run(func.body)
        return impl

    def emit_entry(self, func, params, impl: FunctionBuilder, wrong_args_code: int) -> None:
        fb = FunctionBuilder(self.builder, symbol_of(func.name), "i32",
                             [("ptr", "args", "noalias"), ("i32", "num_args", "")])
        casts = FunctionEmitter(self, func.name, fb, parallel_depth=0)
        ok = fb.inst(f"icmp eq i32 %num_args, {len(params)}", "i1")
        fb.cbr(ok, "unpack", "bad_args", f", !prof {self.unlikely_weights()}")
        fb.start("bad_args")
        fb.ret(Value(str(wrong_args_code), "i32"))
        fb.start("unpack")
        values = []
        for k, p in enumerate(params):
            slot = fb.inst(f"getelementptr i64, ptr %args, i64 {k}", "ptr", "slot")
            kind = argument_slot(p)
            if kind == "handle":
                values.append(fb.inst(f"load ptr, ptr {slot.ref}, align 8", "ptr", "arg"))
            elif kind == "float64":
                raw = fb.inst(f"load double, ptr {slot.ref}, align 8", "double", "arg")
                values.append(casts.cast(raw, "float64", p.dtype))
            else:
                raw = fb.inst(f"load i64, ptr {slot.ref}, align 8", "i64", "arg")
                ty = llvm_type(p.dtype)
                if ty == "i1":
                    values.append(fb.inst(f"icmp ne i64 {raw.ref}, 0", "i1", "arg"))
                elif ty != "i64":
                    values.append(fb.inst(f"trunc i64 {raw.ref} to {ty}", ty, "arg"))
                else:
                    values.append(raw)
        rc = fb.inst(f'call i32 @"{impl.name}"({", ".join(v.typed() for v in values)})', "i32")
        fb.ret(rc)
        fb.finish()


class FunctionEmitter(ExprEmitter):
    """Emits one function body: statements here, expressions in ExprEmitter."""

    def __init__(self, module: ModuleEmitter, func_name: str, fb: FunctionBuilder,
                 parallel_depth: int):
        super().__init__(module, func_name, parallel_depth)
        self.fb = fb

    def run(self, body) -> None:
        self.stmt(body)
        self.fb.ret(Value("0", "i32"))
        self.fb.finish()

    # ------------------------------------------------------------------ statements
    def store(self, buffer, index, value: Value) -> None:
        ptr, elem, lanes = self.address(buffer, index)
        if dt.is_bool(buffer.dtype):
            mty = f"<{lanes} x i8>" if lanes > 1 else "i8"
            value = self.fb.inst(f"zext {value.typed()} to {mty}", mty)
        align = max(1, dt.bytes_of(buffer.dtype))
        if ptr.ty == "ptr":
            self.fb.do(f"store {value.typed()}, ptr {ptr.ref}, align {align}")
        else:
            fn = self.fb.module.intrinsic(f"llvm.masked.scatter.{mangle(value.ty)}.v{lanes}p0",
                                          "void", [value.ty, ptr.ty, f"<{lanes} x i1>"])
            self.fb.do(f"call void {fn}({value.typed()}, {ptr.ty} align {align} {ptr.ref}, "
                       f"<{lanes} x i1> splat (i1 true))")

    def branch(self, cond: Value, then_case, else_case) -> None:
        fb = self.fb
        then_l, end_l = fb.new_label("if_then"), fb.new_label("if_end")
        else_l = fb.new_label("if_else") if else_case is not None else end_l
        fb.cbr(cond, then_l, else_l)
        fb.start(then_l)
        self.stmt(then_case)
        fb.br(end_l)
        if else_case is not None:
            fb.start(else_l)
            self.stmt(else_case)
            fb.br(end_l)
        fb.start(end_l)

    # ------------------------------------------------------------------ failure paths
    def status(self, code: int) -> Value:
        return Value(str(code), "i32")

    def fail_unless(self, ok: Value, status: Value) -> None:
        """Continue when ok holds; otherwise free the heap temporaries and return status."""
        fb = self.fb
        ok_l, bad_l = fb.new_label("ok"), fb.new_label("fail")
        fb.cbr(ok, ok_l, bad_l, f", !prof {self.module.unlikely_weights()}")
        fb.start(bad_l)
        for ptr in reversed(self.heap):
            fb.do(f"call void {self._free()}({ptr.typed()})")
        fb.ret(status)
        fb.start(ok_l)

    def _free(self) -> str:
        return self.fb.module.declare(_WORKSPACE_FREE, "void", ["ptr"], "nounwind")

    # ------------------------------------------------------------------ allocation
    def alloc_stack(self, buf, count: int) -> Value:
        return self.fb.alloca(f"[{count} x {memory_type(buf.dtype)}]", HEAP_ALIGN, ident(buf.name))

    def alloc_heap(self, buf, extent) -> Value:
        fb = self.fb
        count = self.cast(self.expr(extent), extent.dtype, "int64")
        nbytes = dt.bytes_of(buf.dtype) * dt.lanes_of(buf.dtype)
        size = fb.inst(f"mul i64 {count.ref}, {nbytes}", "i64")
        alloc = fb.module.declare(_WORKSPACE_ALLOC, "ptr", ["i64"], "nounwind")
        ptr = fb.inst(f"call ptr {alloc}(i64 {size.ref})", "ptr", ident(buf.name))
        ok = fb.inst(f"icmp ne ptr {ptr.ref}, null", "i1")
        self.fail_unless(ok, self.status_of(f"out of memory allocating {buf.name!r}"))
        return ptr

    def free(self, ptr: Value) -> None:
        self.fb.do(f"call void {self._free()}(ptr {ptr.ref})")

    # ------------------------------------------------------------------ loops
    def loop_end(self, lo: Value, extent: Value, dtype: str) -> Value:
        if lo.ref == "0":
            return extent
        return self.fb.inst(f"add nsw {lo.typed()}, {extent.ref}", llvm_type(dtype))

    def serial_loop(self, var, lo: Value, hi: Value, body, kind: str = "serial") -> None:
        fb = self.fb
        ty = llvm_type(var.dtype)
        pre = fb.cur.label
        head, body_l, exit_l = fb.new_label("for_head"), fb.new_label("for_body"), fb.new_label("for_end")
        fb.br(head)
        header = fb.start(head)
        i = fb.tmp(ident(var.name))
        cond = fb.inst(f"icmp slt {ty} {i}, {hi.ref}", "i1")
        fb.cbr(cond, body_l, exit_l)
        fb.start(body_l)
        with self.scoped(var, Value(i, ty)):
            self.stmt(body)
        nxt = fb.inst(f"add nsw {ty} {i}, 1", ty)
        latch = fb.cur.label
        meta = ""
        if kind in _LOOP_HINTS:
            hint_node = fb.module.meta(f'!"{_LOOP_HINTS[kind]}"')
            meta = f", !llvm.loop {fb.module.meta(hint_node, distinct_self=True)}"
        fb.br(head, meta)
        header.lines.insert(0, f"  {i} = phi {ty} [ {lo.ref}, %{pre} ], [ {nxt.ref}, %{latch} ]")
        fb.start(exit_l)

    def parallel_for(self, s, lo: Value, extent: Value) -> None:
        """Outline the loop into a task of the thread pool and launch it over a closure."""
        fb = self.fb
        ty = llvm_type(s.loop_var.dtype)
        captured = self.closure(s)
        values = [v for _, v in captured] + [lo, extent]
        layout = "{ " + ", ".join(v.ty for v in values) + " }"
        closure = fb.alloca(layout, 16, "closure")
        for k, v in enumerate(values):
            slot = fb.inst(f"getelementptr inbounds {layout}, ptr {closure.ref}, i32 0, i32 {k}", "ptr")
            fb.do(f"store {v.typed()}, ptr {slot.ref}")
        task = self._emit_task(s, [var for var, _ in captured], values, layout)
        run_l, done_l = fb.new_label("par_run"), fb.new_label("par_done")
        nonempty = fb.inst(f"icmp sgt {extent.typed()}, 0", "i1")
        fb.cbr(nonempty, run_l, done_l)
        fb.start(run_l)
        # Fewer iterations than threads: one task each; otherwise one task per pool thread.
        few = fb.inst(f"icmp slt {extent.typed()}, {self.module.num_threads}", "i1")
        count = extent if ty == "i32" else fb.inst(f"trunc {extent.typed()} to i32", "i32")
        ntasks = fb.inst(f"select i1 {few.ref}, i32 {count.ref}, i32 0", "i32")
        launch = fb.module.declare(_LAUNCH, "i32", ["ptr", "ptr", "i32"])
        rc = fb.inst(f'call i32 {launch}(ptr @"{task}", ptr {closure.ref}, i32 {ntasks.ref})', "i32")
        ok = fb.inst(f"icmp eq i32 {rc.ref}, 0", "i1")
        self.fail_unless(ok, rc)
        fb.br(done_l)
        fb.start(done_l)

    def _emit_task(self, s, captured, values, layout) -> str:
        builder = self.fb.module
        ty = llvm_type(s.loop_var.dtype)
        base = self.module.unique(f"{self.func_name}__par")
        params = [(v.ty, f"{ident(var.name)}_{k}", "noalias" if v.ty == "ptr" else "")
                  for k, (var, v) in enumerate(zip(captured, values))]
        body_fb = FunctionBuilder(builder, f"{base}_body", "i32",
                                  params + [(ty, "lo", ""), (ty, "hi", "")], "internal")
        child = FunctionEmitter(self.module, self.func_name, body_fb, self.parallel_depth + 1)
        child.env = dict(zip(captured, body_fb.params))
        child.serial_loop(s.loop_var, body_fb.params[-2], body_fb.params[-1], s.body)
        child.fb.ret(Value("0", "i32"))
        body_fb.finish()

        fb = FunctionBuilder(builder, base, "i32", [("i32", "task", ""), ("i32", "ntasks", ""),
                                                    ("ptr", "closure", "")], "internal")
        fields = []
        for k, v in enumerate(values):
            slot = fb.inst(f"getelementptr inbounds {layout}, ptr %closure, i32 0, i32 {k}", "ptr")
            fields.append(fb.inst(f"load {v.ty}, ptr {slot.ref}", v.ty))
        lo, extent = fields[-2], fields[-1]
        task, ntasks = Value("%task", "i32"), Value("%ntasks", "i32")
        if ty != "i32":
            task = fb.inst(f"sext i32 %task to {ty}", ty)
            ntasks = fb.inst(f"sext i32 %ntasks to {ty}", ty)
        # Contiguous chunks of ceil(extent / ntasks) iterations.
        chunk = fb.inst(f"add nsw {extent.typed()}, {ntasks.ref}", ty)
        chunk = fb.inst(f"sub nsw {ty} {chunk.ref}, 1", ty)
        chunk = fb.inst(f"sdiv {ty} {chunk.ref}, {ntasks.ref}", ty)
        begin = fb.inst(f"mul nsw {task.typed()}, {chunk.ref}", ty)
        end = fb.inst(f"add nsw {begin.typed()}, {chunk.ref}", ty)
        smin = builder.intrinsic(f"llvm.smin.{'i32' if ty == 'i32' else 'i64'}", ty, [ty, ty])
        end = fb.inst(f"call {ty} {smin}({end.typed()}, {extent.typed()})", ty)
        begin = fb.inst(f"add nsw {lo.typed()}, {begin.ref}", ty)
        end = fb.inst(f"add nsw {lo.typed()}, {end.ref}", ty)
        args = ", ".join(v.typed() for v in fields[:-2] + [begin, end])
        rc = fb.inst(f'call i32 @"{body_fb.name}"({args})', "i32")
        fb.ret(rc)
        fb.finish()
        return base

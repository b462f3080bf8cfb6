"""Readable text for expressions, statements and functions (how people debug a compiler)."""
from __future__ import annotations

from . import dtype as dt
from .buffer import Buffer
from .expr import (Add, And, BinaryOp, Broadcast, BufferLoad, Call, Cast, CmpOp, CommReducer,
                   Div, FloatImm, FloorDiv, FloorMod, IntImm, IterVar, Let, Max, Min, Mod, Mul,
                   Not, Or, ProducerLoad, Ramp, Range, Reduce, Select, StringImm, Sub, Var)
from .function import PrimFunc
from .stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For, IfThenElse,
                   LetStmt, SeqStmt, Stmt, ThreadAllReduce)

_PREC = {Or: 1, And: 2, CmpOp: 3, Add: 4, Sub: 4, Mul: 5, Div: 5, Mod: 5}


class Printer:
    """Prints loop-IR nodes as text, naming variables consistently across calls: one Printer
    for a whole picture (kiln.viz) gives its pieces the names print(func) shows. to_text
    prints one node with a fresh Printer.

    Example:
        >>> from kiln.tir import Var
        >>> i, p = Var("i"), Printer()
        >>> p.expr(i + 1), p.expr(i * 2)
        ('i + 1', 'i*2')
    """

    def __init__(self):
        self.names: dict = {}
        self.used: dict = {}
        self.lines: list[str] = []

    # ------------------------------------------------------------------ names
    def name(self, v) -> str:
        n = self.names.get(v)
        if n is None:
            base = v.name or "v"
            count = self.used.get(base, 0)
            n = base if count == 0 else f"{base}_{count}"
            self.used[base] = count + 1
            self.names[v] = n
        return n

    # ------------------------------------------------------------------ expressions
    def expr(self, e, parent_prec=0) -> str:
        if isinstance(e, IntImm):
            if e.dtype == "bool":
                return "True" if e.value else "False"
            return str(e.value) if e.dtype in ("int32",) else f"{e.value}i{e.dtype[3:]}" \
                if dt.is_int(e.dtype) else f"{e.dtype}({e.value})"
        if isinstance(e, FloatImm):
            suffix = "f" if e.dtype == "float32" else f"f{dt.bits_of(e.dtype)}"
            return f"{e.value!r}{suffix}"
        if isinstance(e, StringImm):
            return repr(e.value)
        if isinstance(e, Var):
            return self.name(e)
        if isinstance(e, Cast):
            return f"{e.dtype}({self.expr(e.value)})"
        if isinstance(e, (FloorDiv, FloorMod, Min, Max)):
            return f"{e.symbol}({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, BinaryOp):
            prec = _PREC.get(type(e)) or _PREC.get(CmpOp if isinstance(e, CmpOp) else None, 3)
            text = f"{self.expr(e.a, prec)} {e.symbol} {self.expr(e.b, prec + 1)}"
            if isinstance(e, Mul):
                text = f"{self.expr(e.a, prec)}*{self.expr(e.b, prec + 1)}"
            return f"({text})" if prec < parent_prec else text
        if isinstance(e, Not):
            return f"!{self.expr(e.a, 9)}"
        if isinstance(e, Select):
            return (f"select({self.expr(e.condition)}, {self.expr(e.true_value)}, "
                    f"{self.expr(e.false_value)})")
        if isinstance(e, Call):
            return f"{e.op}({', '.join(self.expr(a) for a in e.args)})"
        if isinstance(e, Ramp):
            return f"ramp({self.expr(e.base)}, {self.expr(e.stride)}, {e.lanes})"
        if isinstance(e, Broadcast):
            return f"x{e.lanes}({self.expr(e.value)})"
        if isinstance(e, Let):
            return f"(let {self.name(e.var)} = {self.expr(e.value)} in {self.expr(e.body)})"
        if isinstance(e, ProducerLoad):
            return f"{e.producer.name}[{', '.join(self.expr(i) for i in e.indices)}]"
        if isinstance(e, BufferLoad):
            return f"{self.name(e.buffer.data)}[{self.expr(e.index)}]"
        if isinstance(e, Reduce):
            axes = ", ".join(self.itervar(a) for a in e.axis)
            src = ", ".join(self.expr(s) for s in e.source)
            text = f"reduce({self.reducer(e.combiner)}, source=[{src}], axis=[{axes}]"
            if not (isinstance(e.condition, IntImm) and e.condition.value):
                text += f", where={self.expr(e.condition)}"
            if len(e.source) > 1:
                text += f", value_index={e.value_index}"
            return text + ")"
        if isinstance(e, IterVar):
            return self.itervar(e)
        if isinstance(e, Range):
            return f"range(min={self.expr(e.min)}, ext={self.expr(e.extent)})"
        if isinstance(e, CommReducer):
            return self.reducer(e)
        if isinstance(e, Buffer):
            return self.buffer_decl(e)
        return repr(type(e).__name__)

    def itervar(self, iv) -> str:
        dom = "" if iv.dom is None else f", [{self.expr(iv.dom.min)}, {self.expr(iv.dom.min + iv.dom.extent) if False else self.expr(iv.dom.extent)})"
        return f"iter_var({self.name(iv.var)}{dom})"

    def reducer(self, c) -> str:
        lhs = ", ".join(self.name(v) for v in c.lhs)
        rhs = ", ".join(self.name(v) for v in c.rhs)
        res = ", ".join(self.expr(r) for r in c.result)
        ident = ", ".join(self.expr(i) for i in c.identity)
        return f"comm_reducer(({lhs}), ({rhs}) => ({res}), identity=({ident}))"

    def buffer_decl(self, b) -> str:
        shape = ", ".join(self.expr(s) for s in b.shape)
        scope = "" if b.scope == "global" else f", scope={b.scope!r}"
        return f"{self.name(b.data)}: Buffer({b.dtype}, [{shape}]{scope})"

    # ------------------------------------------------------------------ statements
    def emit(self, indent, text):
        self.lines.append("  " * indent + text)

    def stmt(self, s, indent):
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x, indent)
        elif isinstance(s, For):
            kind = "" if s.kind == "serial" else f" {s.kind}"
            if s.thread_tag:
                kind += f" thread={s.thread_tag!r}"
            ann = "".join(f" {k}={_annotation(k, v)}" for k, v in s.annotations)
            if isinstance(s.min, IntImm) and s.min.value == 0:
                bounds = self.expr(s.extent)
            elif isinstance(s.extent, IntImm):
                from .op import add
                bounds = f"{self.expr(s.min)}, {self.expr(add(s.min, s.extent))}"
            else:
                bounds = f"start={self.expr(s.min)}, extent={self.expr(s.extent)}"
            self.emit(indent, f"for {self.name(s.loop_var)} in range({bounds}){kind}{ann}:")
            self.stmt(s.body, indent + 1)
        elif isinstance(s, BufferStore):
            self.emit(indent, f"{self.name(s.buffer.data)}[{self.expr(s.index)}] = {self.expr(s.value)}")
        elif isinstance(s, Allocate):
            b = s.buffer
            scope = "" if b.scope == "global" else f", scope={b.scope!r}"
            self.emit(indent, f"{self.name(b.data)} = allocate({b.dtype}, [{self.expr(s.extent)}]{scope})")
            self.stmt(s.body, indent)
        elif isinstance(s, LetStmt):
            self.emit(indent, f"{self.name(s.var)}: {s.var.dtype} = {self.expr(s.value)}")
            self.stmt(s.body, indent)
        elif isinstance(s, AttrStmt):
            node = s.node
            target = self.expr(node) if node is not None else ""
            self.emit(indent, f"attr [{target}] {s.key} = {self.expr(s.value) if not isinstance(s.value, (int, str)) else s.value}")
            self.stmt(s.body, indent)
        elif isinstance(s, AssertStmt):
            self.emit(indent, f"assert {self.expr(s.condition)}, {s.message!r}")
            self.stmt(s.body, indent)
        elif isinstance(s, IfThenElse):
            self.emit(indent, f"if {self.expr(s.condition)}:")
            self.stmt(s.then_case, indent + 1)
            if s.else_case is not None:
                self.emit(indent, "else:")
                self.stmt(s.else_case, indent + 1)
        elif isinstance(s, Evaluate):
            self.emit(indent, self.expr(s.value))
        elif isinstance(s, ThreadAllReduce):
            results = ", ".join(self.name(v) for v in s.results)
            values = ", ".join(self.expr(v) for v in s.values)
            threads = ", ".join(self.name(v) for v in s.threads)
            self.emit(indent, f"{results} = thread_allreduce({self.reducer(s.combiner)}, "
                              f"[{values}], threads=[{threads}])")
            self.stmt(s.body, indent)
        else:
            self.emit(indent, f"<{type(s).__name__}>")

    def func(self, f: PrimFunc):
        params = []
        for p in f.params:
            if isinstance(p, Buffer):
                params.append(self.buffer_decl(p))
            else:
                params.append(f"{self.name(p)}: {p.dtype}")
        self.emit(0, f"def {f.name}({', '.join(params)}):")
        if f.shape_vars:
            self.emit(1, "# symbolic sizes: " + ", ".join(
                f"{self.name(v)}: {v.dtype}" for v in f.shape_vars))
        self.stmt(f.body, 1)


def to_text(node) -> str:
    """Text of any IR node.

    Example:
        >>> from kiln.tir import Var
        >>> i = Var("i")
        >>> to_text(i * 4 + 1)
        'i*4 + 1'
    """
    p = Printer()
    if isinstance(node, PrimFunc):
        p.func(node)
        return "\n".join(p.lines)
    if isinstance(node, Stmt):
        p.stmt(node, 0)
        return "\n".join(p.lines)
    return p.expr(node)


def _annotation(key, value) -> str:
    if key == "prefetch":       # ((buffer, iterations ahead), ...): inject_prefetch's key
        return "(" + ", ".join(f"{buf.name}+{ahead}" for buf, ahead in value) + ")"
    return str(value)

"""A small textual LLVM IR builder: a module of declarations, functions and metadata, and
functions made of basic blocks.

Text is the cheapest way to build IR from Python and keeps full control of flags, attributes and
intrinsics; llvmlite parses and verifies it before anything runs.
"""
from __future__ import annotations

from typing import NamedTuple


class Value(NamedTuple):
    """An SSA value or constant: its text (`%t3`, `0x3FF0000000000000`) and its LLVM type."""

    ref: str
    ty: str

    def typed(self) -> str:
        return f"{self.ty} {self.ref}"

    @property
    def is_const(self) -> bool:
        return not self.ref.startswith(("%", "@"))


class Block:
    __slots__ = ("label", "lines", "terminated")

    def __init__(self, label: str):
        self.label = label
        self.lines: list[str] = []
        self.terminated = False


class ModuleBuilder:
    """Collects functions, intrinsic declarations and metadata of one LLVM module.

    Example:
        >>> m = ModuleBuilder()
        >>> m.declare("llvm.sqrt.f32", "float", ["float"])
        '@"llvm.sqrt.f32"'
    """

    def __init__(self):
        self.functions: list[str] = []
        self.declarations: dict[str, str] = {}
        self.metadata: list[str] = []

    def declare(self, name: str, ret: str, args: list[str], attrs: str = "") -> str:
        if name not in self.declarations:
            self.declarations[name] = f'declare {ret} @"{name}"({", ".join(args)}) {attrs}'.rstrip()
        return f'@"{name}"'

    def intrinsic(self, name: str, ret: str, args: list[str]) -> str:
        """Declare an LLVM intrinsic (its name already carries the overload suffix)."""
        return self.declare(name, ret, args)

    def meta(self, body: str, distinct_self: bool = False) -> str:
        """Add a metadata node; with distinct_self its first operand is itself (loop IDs)."""
        ident = f"!{len(self.metadata)}"
        if distinct_self:
            self.metadata.append(f"{ident} = distinct !{{{ident}, {body}}}")
        else:
            self.metadata.append(f"{ident} = !{{{body}}}")
        return ident

    def text(self) -> str:
        parts = list(self.declarations.values()) + [""] + self.functions + self.metadata
        return "\n".join(parts) + "\n"


class FunctionBuilder:
    """Basic blocks and instructions of one function; allocas gather in the entry block.

    Example:
        >>> fb = FunctionBuilder(ModuleBuilder(), "f", "i32", [("i32", "x", "")])
        >>> fb.inst("add i32 %x, 1", "i32")
        Value(ref='%t.0', ty='i32')
    """

    def __init__(self, module: ModuleBuilder, name: str, ret: str,
                 params: list[tuple[str, str, str]], linkage: str = "", attrs: str = "nounwind"):
        self.module = module
        self.name = name
        self.header = (f'define {linkage + " " if linkage else ""}{ret} @"{name}"('
                       + ", ".join(f"{ty}{' ' + a if a else ''} %{n}" for ty, n, a in params)
                       + f") {attrs} {{")
        self.params = [Value(f"%{n}", ty) for ty, n, _ in params]
        self.entry = Block("entry")
        self.allocas: list[str] = []
        self.blocks = [self.entry]
        self.cur = self.entry
        self._count = 0
        self._labels: dict[str, int] = {}

    # ------------------------------------------------------------------ naming
    def tmp(self, hint: str = "t") -> str:
        # Temporaries are hint.N, labels hint.LN, parameters have no dot: names never clash.
        name = f"%{hint}.{self._count}"
        self._count += 1
        return name

    def new_label(self, hint: str) -> str:
        count = self._labels.get(hint, 0)
        self._labels[hint] = count + 1
        return f"{hint}.L{count}"

    # ------------------------------------------------------------------ instructions
    def inst(self, text: str, ty: str, hint: str = "t") -> Value:
        name = self.tmp(hint)
        self.cur.lines.append(f"  {name} = {text}")
        return Value(name, ty)

    def do(self, text: str) -> None:
        self.cur.lines.append(f"  {text}")

    def alloca(self, ty: str, align: int, hint: str = "buf") -> Value:
        name = self.tmp(hint)
        self.allocas.append(f"  {name} = alloca {ty}, align {align}")
        return Value(name, "ptr")

    # ------------------------------------------------------------------ control flow
    def start(self, label: str) -> Block:
        block = Block(label)
        self.blocks.append(block)
        self.cur = block
        return block

    def br(self, label: str, meta: str = "") -> None:
        self._terminate(f"br label %{label}{meta}")

    def cbr(self, cond: Value, if_true: str, if_false: str, meta: str = "") -> None:
        self._terminate(f"br i1 {cond.ref}, label %{if_true}, label %{if_false}{meta}")

    def ret(self, value: Value) -> None:
        self._terminate(f"ret {value.typed()}")

    def _terminate(self, text: str) -> None:
        if self.cur.terminated:
            raise AssertionError(f"block {self.cur.label} of {self.name} is already terminated")
        self.cur.lines.append(f"  {text}")
        self.cur.terminated = True

    # ------------------------------------------------------------------ output
    def finish(self) -> None:
        out = [self.header]
        for block in self.blocks:
            out.append(f"{block.label}:")
            if block is self.entry:
                out.extend(self.allocas)
            out.extend(block.lines)
        out.append("}")
        self.module.functions.append("\n".join(out))

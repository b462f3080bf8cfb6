"""What both back-ends share before and around emission: checks on the input, signatures,
the front half of a build, closures of parallel loops, the stack-or-heap decision for
temporaries and the table of assertion messages. (Emission itself shares emitter.py.)

The back-ends differ only where LLVM IR and C differ; every decision about *what* to emit is
made here or in emitter.py so that both make it the same way.
"""
from __future__ import annotations

import json
from typing import NamedTuple

from ..arith.size_bounds import size_bounds
from ..tir import dtype as dt
from ..tir.buffer import Buffer
from ..tir.expr import BufferLoad, IntImm, Let, PrimExpr, ProducerLoad, Reduce, Var
from ..tir.function import PrimFunc
from ..tir.functor import free_vars
from ..tir.node import Node
from ..tir.size_text import size_text
from ..tir.stmt import Allocate, AttrStmt, BufferStore, For, LetStmt, Stmt
from .intrinsics import lower_intrinsics
from ..runtime.load import SYMBOL_PREFIX  # the runtime finds kernels by this prefix

# A temporary goes on the stack when its size is a constant of at most STACK_ALLOC_MAX bytes and
# the function's stack temporaries stay under STACK_BUDGET (pool threads have small stacks).
STACK_ALLOC_MAX = 64 * 1024
STACK_BUDGET = 512 * 1024
HEAP_ALIGN = 64     # also what kiln_workspace_alloc (runtime/workspace.c) aligns heap temporaries to


def symbol_of(name: str) -> str:
    """The native symbol of a PrimFunc: prefixed, so that users may name functions freely
    (`main`, `exp`, `free`) without shadowing libc, libm or the kiln runtime."""
    return SYMBOL_PREFIX + name


class CodegenError(ValueError):
    """A PrimFunc the code generators cannot compile; the message names the function."""


def cross_address(target):
    """The get_address of a Module compiled for another instruction set (a cross target): its
    functions exist only in the exported library, so asking for one here is a CodegenError
    that says where the code runs.

    Example:
        >>> cross_address(Target("rasp4b"))("f")           # doctest: +SKIP
        Traceback (most recent call last):
        CodegenError: f is compiled for aarch64-linux-gnu ...
    """
    def address(name):
        raise CodegenError(f"{name} is compiled for {target.mtriple} ({target}), which cannot "
                           f"run in this process: export the model (export_library) and run it "
                           f"there with kiln's C runtime")
    return address


def wrap_int(value, bits: int, signed: bool) -> int:
    """An integer reduced to `bits` bits, read as signed or unsigned (how a constant of that
    width is written).

    Example:
        >>> wrap_int(255, 8, signed=True)
        -1
    """
    value = int(value) & ((1 << bits) - 1)
    if signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


# ---------------------------------------------------------------------------- error table
class ErrorTable:
    """Messages of failed checks, numbered from 1: a generated function returns the number.

    Example:
        >>> t = ErrorTable()
        >>> t.code("f: assert n > 0")
        1
    """

    def __init__(self):
        self.messages: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, message: str) -> int:
        code = self._codes.get(message)
        if code is None:
            self.messages.append(message)
            code = self._codes[message] = len(self.messages)
        return code

    @staticmethod
    def from_messages(messages) -> "ErrorTable":
        """A table holding `messages` as codes 1, 2, ... (as to_json / messages list them).

        Example:
            >>> ErrorTable.from_messages(["f: n > 0"]).message(1)
            'f: n > 0'
        """
        table = ErrorTable()
        table.messages = list(messages)
        for k, m in enumerate(table.messages):
            table._codes.setdefault(m, k + 1)
        return table

    def message(self, code: int) -> str | None:
        return self.messages[code - 1] if 0 < code <= len(self.messages) else None

    def to_json(self) -> str:
        return json.dumps({str(k + 1): m for k, m in enumerate(self.messages)}, indent=1)


# ---------------------------------------------------------------------------- signatures
def function_info(func: PrimFunc):
    """The runtime's description of a PrimFunc's calling convention.

    Example:
        >>> function_info(f).params[0].kind   # doctest: +SKIP
        'buffer'
    """
    from ..runtime import FunctionInfo, ParamInfo

    params = []
    for p in func.params:
        if isinstance(p, Buffer):
            shape = tuple(_extent_info(func, p, e) for e in p.shape)
            params.append(ParamInfo(p.name, "buffer", p.dtype, shape))
        else:
            params.append(ParamInfo(p.name, "scalar", p.dtype))
    shape_vars = tuple((v.name, v.dtype) for v in func.shape_vars)
    # the compiled ranges of the sizes it takes, as buffer extents or as integer arguments
    sizes = list(func.shape_vars) + [p for p in func.params if isinstance(p, Var)]
    bounds = {v.name: size_bounds(v) for v in sizes if size_bounds(v) is not None}
    try:
        checks = tuple(size_text(c) for c in func.attr("size_checks", ()))
    except ValueError as err:
        raise CodegenError(f"function {func.name!r}: a size check: {err}") from None
    try:
        return FunctionInfo(func.name, tuple(params), shape_vars, bounds,
                            tuple(str(c) for c in checks))
    except ValueError as err:
        raise CodegenError(f"function {func.name!r}: {err}") from None


def _extent_info(func, buffer, extent):
    if isinstance(extent, IntImm):
        return extent.value
    if isinstance(extent, Var) and any(extent is v for v in func.shape_vars):
        return extent.name
    # An expression of the shape vars (a concatenation's past + new length): checked by the
    # runtime once the variables are bound from other extents.
    free = [v for v in free_vars(extent) if not any(v is s for s in func.shape_vars)]
    if not free:
        try:
            return size_text(extent)
        except ValueError:
            pass
    raise CodegenError(f"function {func.name!r}: buffer {buffer.name!r} has extent `{extent}`; "
                       f"parameter extents must be constants, variables listed in shape_vars "
                       f"or + - * // % min max of them")


# ---------------------------------------------------------------------------- front half
class Prepared(NamedTuple):
    """PrimFuncs ready for a back-end to emit, with what the runtime Module needs."""

    funcs: list            # checked, intrinsics lowered for the target
    infos: dict            # function name -> kiln.runtime.FunctionInfo
    errors: ErrorTable     # filled by emission: status code -> message


def prepare(funcs, target) -> Prepared:
    """The front half of every CPU build: validate, lower intrinsics, describe signatures.

    Example:
        >>> prep = prepare([f], Target("llvm"))   # doctest: +SKIP
        >>> list(prep.infos)                      # doctest: +SKIP
        ['f']
    """
    for f in funcs:
        check_function(f, target)
    lowered = [lower_intrinsics(f, target) for f in funcs]
    return Prepared(lowered, {f.name: function_info(f) for f in funcs}, ErrorTable())


# ---------------------------------------------------------------------------- input checks
def check_function(func: PrimFunc, target) -> None:
    """Reject what a CPU back-end cannot compile, naming the function and the construct.

    Example:
        >>> check_function(f, Target("llvm"))   # doctest: +SKIP
    """
    if not isinstance(func, PrimFunc):
        raise CodegenError(f"expected a kiln.tir.PrimFunc, got {type(func).__name__}")
    if not func.name.isidentifier():
        raise CodegenError(f"function name {func.name!r} is not an identifier")
    names = set()
    for p in list(func.params) + list(func.shape_vars):
        if not isinstance(p, (Buffer, Var)):
            raise CodegenError(f"function {func.name!r}: parameter {p!r} is neither a Buffer nor a Var")
        if p.name in names:
            raise CodegenError(f"function {func.name!r}: two parameters are named {p.name!r}")
        names.add(p.name)
    for v in func.shape_vars:
        if v.dtype not in ("int32", "int64"):
            raise CodegenError(f"function {func.name!r}: shape var {v.name!r} is {v.dtype}; "
                               f"symbolic sizes are int32 or int64")
    problems: list[str] = []
    bound: list[str] = []

    def visit(node):
        if isinstance(node, For) and node.kind == "thread_binding":
            bound.append(f"loop '{node.loop_var.name}' is bound to {node.thread_tag}")
        elif isinstance(node, (ProducerLoad, Reduce)):
            problems.append(f"`{node}` is tensor-expression IR; lower the schedule first")
        elif isinstance(node, (BufferLoad, BufferStore)):
            if not dt.is_integral(node.index.dtype):
                problems.append(f"buffer {node.buffer.name!r} is indexed by `{node.index}` of "
                                f"type {node.index.dtype}; indices are integers")
        elif isinstance(node, Allocate) and not dt.is_integral(node.extent.dtype):
            problems.append(f"allocation of {node.buffer.name!r} has extent of type "
                            f"{node.extent.dtype}")

    walk(func.body, visit)
    if bound:
        from ..te.schedule import ScheduleError
        raise ScheduleError(f"function {func.name!r}: {'; '.join(dict.fromkeys(bound))}, but "
                            f"target {target} has no GPU threads; build it for 'cuda' or "
                            "'opencl', or remove the bind")
    if problems:
        raise CodegenError(f"function {func.name!r} cannot be compiled for {target}: "
                           + "; ".join(dict.fromkeys(problems)))


# Code generators ignore an AttrStmt's annotation (node, value) and emit only its body.
_ATTR_FIELDS = ("body",)


def walk(node, fn) -> None:
    """Pre-order walk over statements and expressions (each shared node once), calling fn.

    Example:
        >>> walk(func.body, print)   # doctest: +SKIP
    """
    seen: set = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen or not isinstance(n, Node) or isinstance(n, (Var, Buffer)):
            continue
        seen.add(n)
        fn(n)
        for name in _ATTR_FIELDS if isinstance(n, AttrStmt) else n._fields:
            value = getattr(n, name)
            if isinstance(value, (PrimExpr, Stmt)):
                stack.append(value)
            elif isinstance(value, tuple):
                stack.extend(v for v in value if isinstance(v, (PrimExpr, Stmt)))


# ---------------------------------------------------------------------------- closures
def closure_vars(loop: For) -> list[Var]:
    """Variables a parallel loop's body needs from outside: scalars and buffer data pointers.

    The loop variable and anything bound inside (loops, lets, allocations) are excluded;
    the order is the first use, so the generated closure layout is deterministic.

    Example:
        >>> [v.name for v in closure_vars(loop)]   # doctest: +SKIP
        ['A', 'B', 'n']
    """
    used: dict[Var, None] = {}
    bound: set = {loop.loop_var}

    def visit(n):
        if isinstance(n, (BufferLoad, BufferStore)):
            used.setdefault(n.buffer.data, None)
        elif isinstance(n, For):
            bound.add(n.loop_var)
        elif isinstance(n, (Let, LetStmt)):
            bound.add(n.var)
        elif isinstance(n, Allocate):
            bound.add(n.buffer.data)
        for name in _ATTR_FIELDS if isinstance(n, AttrStmt) else n._fields:
            value = getattr(n, name)
            if isinstance(value, Var) and name not in _BINDING_FIELDS:
                used.setdefault(value, None)
            elif isinstance(value, tuple):
                for v in value:
                    if isinstance(v, Var):
                        used.setdefault(v, None)

    walk(loop.body, visit)
    return [v for v in used if v not in bound]


_BINDING_FIELDS = ("loop_var", "var")


# ---------------------------------------------------------------------------- allocations
class StackPlanner:
    """Decides, per function, whether each Allocate lives on the stack or the heap.

    Example:
        >>> StackPlanner().on_stack(256, "float32")
        True
    """

    def __init__(self, budget: int = STACK_BUDGET):
        self.left = budget

    def on_stack(self, extent, dtype: str) -> bool:
        if not isinstance(extent, (int, IntImm)):
            return False
        nbytes = max(int(extent), 1) * dt.bytes_of(dtype) * dt.lanes_of(dtype)
        if nbytes > STACK_ALLOC_MAX or nbytes > self.left:
            return False
        self.left -= nbytes
        return True



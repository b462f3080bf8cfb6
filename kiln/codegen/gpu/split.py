"""Host / device split: a lowered GPU function → device kernels + the host's launch plan.

Every `thread_extent` attribute chain (made by kiln.tir.transform.bind_threads) is a kernel;
what surrounds the kernels is host code: a sequence of launches, lets, loops, device
workspace allocations and asserts, written as a JSON-able plan that kiln.runtime.gpu runs
without the compiler. A kernel's parameters are the buffers it touches and the scalars it
reads (shape variables, the host's lets and loop counters); a host let that a kernel reads is
recomputed inside the kernel when it depends only on the kernel's own parameters, so that the
host never has to evaluate a value of float type.

Plan grammar (lists, so that json round-trips it):
    op   := ["launch", kernel, [grid x, y, z], [block x, y, z], [arg ...]]
          | ["let", name, expr, [op ...]]       | ["for", name, min, extent, [op ...]]
          | ["alloc", name, dtype, count, [op ...]] | ["assert", expr, message]
          | ["if", expr, [op ...], [op ...]]
    arg  := ["buffer", name] | ["scalar", name, dtype]
    expr := int | ["var", name] | [operator, expr, ...]   (operators: kiln.runtime.gpu.plan)
"""
from __future__ import annotations

from typing import NamedTuple

from ...tir import dtype as dt
from ...tir.buffer import Buffer
from ...tir.expr import (EQ, GE, GT, LE, LT, NE, Add, And, BufferLoad, Cast, Div, FloorDiv,
                         FloorMod, IntImm, Max, Min, Mod, Mul, Not, Or, Select, Sub, Var)
from ...tir.function import PrimFunc
from ...tir.functor import free_vars, post_order_visit
from ...tir.stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For,
                         IfThenElse, LetStmt, SeqStmt)
from ...tir.transform.bind_threads import LAUNCH_TAGS, THREAD_EXTENT
from ..common import CodegenError

_BINARY = {Add: "add", Sub: "sub", Mul: "mul", FloorDiv: "floordiv", FloorMod: "floormod",
           Div: "div", Mod: "mod", Min: "min", Max: "max", LT: "lt", LE: "le", GT: "gt",
           GE: "ge", EQ: "eq", NE: "ne", And: "and", Or: "or"}


class Kernel(NamedTuple):
    """One device kernel: its name, parameters (Buffers and Vars, in order), body, and the
    launch extents per tag (tag -> PrimExpr over the host's variables)."""

    name: str
    params: tuple
    body: object
    launch: dict

    @property
    def threads_per_block(self) -> int:
        threads = 1
        for tag, extent in self.launch.items():
            if tag.startswith("threadIdx"):
                threads *= extent.value
        return threads


class Split(NamedTuple):
    kernels: list
    plan: list


def split_host_device(func: PrimFunc) -> Split:
    """The kernels of a lowered GPU function and the host plan that launches them.

    Example:
        >>> split = split_host_device(kiln.lower(s, [A, B], target="cuda"))  # doctest: +SKIP
        >>> [k.name for k in split.kernels]                                  # doctest: +SKIP
        ['add_kernel0']
    """
    return _Splitter(func).run()


class _Splitter:
    def __init__(self, func):
        self.func = func
        self.kernels: list = []
        self.names: dict = {}            # Var / buffer data var -> host name
        self.host_lets: dict = {}        # Var -> value, for lets of the host
        for p in list(func.params) + list(func.shape_vars):
            self.names[p.data if isinstance(p, Buffer) else p] = p.name

    def run(self) -> Split:
        return Split(self.kernels, self.stmts(self.func.body))

    # ------------------------------------------------------------------ host statements
    def stmts(self, s) -> list:
        if isinstance(s, SeqStmt):
            return [op for x in s.seq for op in self.stmts(x)]
        if isinstance(s, AttrStmt) and s.key == THREAD_EXTENT:
            return [self.kernel(s)]
        if isinstance(s, AttrStmt):
            return self.stmts(s.body)
        if isinstance(s, LetStmt):
            name = self.bind(s.var)
            self.host_lets[s.var] = s.value
            return [["let", name, self.expr(s.value), self.stmts(s.body)]]
        if isinstance(s, For):
            if s.kind == "thread_binding":
                raise CodegenError(f"function {self.func.name!r}: loop '{s.loop_var.name}' is "
                                   f"bound to {s.thread_tag} outside any kernel; bind an outer "
                                   "loop of its stage to blockIdx or threadIdx")
            name = self.bind(s.loop_var)
            return [["for", name, self.expr(s.min), self.expr(s.extent), self.stmts(s.body)]]
        if isinstance(s, Allocate):
            if s.buffer.scope != "global":
                raise CodegenError(f"function {self.func.name!r}: buffer {s.buffer.name!r} "
                                   f"({s.buffer.scope}) is allocated outside any kernel; compute "
                                   "its stage inside the thread-bound loops of its consumer")
            name = self.bind(s.buffer.data, s.buffer.name)
            return [["alloc", name, dt.element_of(s.buffer.dtype), self.expr(s.extent),
                     self.stmts(s.body)]]
        if isinstance(s, AssertStmt):
            message = getattr(s.message, "value", str(s.message))
            return [["assert", self.expr(s.condition), message]] + self.stmts(s.body)
        if isinstance(s, IfThenElse):
            other = [] if s.else_case is None else self.stmts(s.else_case)
            return [["if", self.expr(s.condition), self.stmts(s.then_case), other]]
        if isinstance(s, Evaluate) and isinstance(s.value, IntImm):
            return []
        written = _written(s)
        what = f"buffer {written!r} is written" if written else "a statement runs"
        raise CodegenError(f"function {self.func.name!r}: {what} outside any GPU kernel; bind "
                           f"the outer loops of its stage to blockIdx / threadIdx "
                           f"(s[T].bind(axis, te.thread_axis(\"blockIdx.x\")))")

    def bind(self, key, hint: str | None = None) -> str:
        base = hint or key.name
        name, k = base, 0
        taken = set(self.names.values())
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        self.names[key] = name
        return name

    def expr(self, e):
        if isinstance(e, IntImm):
            return int(e.value)
        if isinstance(e, Var):
            name = self.names.get(e)
            if name is None:
                raise CodegenError(f"function {self.func.name!r}: host code reads `{e.name}`, "
                                   "which it does not define")
            return ["var", name]
        if isinstance(e, Cast) and dt.is_integral(e.dtype):
            return self.expr(e.value)
        if type(e) in _BINARY and dt.is_integral(e.a.dtype):
            return [_BINARY[type(e)], self.expr(e.a), self.expr(e.b)]
        if isinstance(e, Not):
            return ["not", self.expr(e.a)]
        if isinstance(e, Select):
            return ["select", self.expr(e.condition), self.expr(e.true_value),
                    self.expr(e.false_value)]
        if getattr(e, "op", None) == "likely":
            return self.expr(e.args[0])
        raise CodegenError(f"function {self.func.name!r}: host code cannot compute `{e}`; only "
                           "integer arithmetic on sizes runs outside a kernel")

    # ------------------------------------------------------------------ kernels
    def kernel(self, attr) -> list:
        launch, body = {}, attr
        while isinstance(body, AttrStmt) and body.key == THREAD_EXTENT:
            launch[body.node.name] = (body.node, body.value)
            body = body.body
        name = f"{self.func.name}_kernel{len(self.kernels)}"
        body = self._sink_lets(body)
        buffers, scalars = _parameters(body, {v for v, _ in launch.values()})
        for b in buffers:
            if b.data not in self.names:
                raise CodegenError(f"kernel {name!r}: buffer {b.name!r} is neither an argument "
                                   "nor allocated")
        for v in scalars:
            if v not in self.names:
                raise CodegenError(f"kernel {name!r}: reads `{v.name}`, which the host does "
                                   "not define")
        kernel_body = body
        for tag in reversed(LAUNCH_TAGS):
            if tag in launch:
                var, extent = launch[tag]
                kernel_body = AttrStmt(var, THREAD_EXTENT, extent, kernel_body)
        params = tuple(buffers) + tuple(scalars)
        self.kernels.append(Kernel(name, params, kernel_body, {t: e for t, (_, e) in launch.items()}))
        grid = [self.expr(launch[t][1]) if t in launch else 1 for t in LAUNCH_TAGS[:3]]
        block = [self.expr(launch[t][1]) if t in launch else 1 for t in LAUNCH_TAGS[3:]]
        args = [["buffer", self.names[b.data]] for b in buffers] + \
               [["scalar", self.names[v], v.dtype] for v in scalars]
        return ["launch", name, grid, block, args]

    def _sink_lets(self, body):
        """Recompute inside the kernel the host lets it reads (their values are integer
        arithmetic on what the host passes anyway, or would be a float the host cannot
        compute)."""
        while True:
            wanted = [v for v in free_vars(body) if v in self.host_lets]
            if not wanted:
                return body
            for v in wanted:
                body = LetStmt(v, self.host_lets[v], body)


def _parameters(body, thread_vars):
    buffers, allocated = {}, set()

    def fn(n):
        if isinstance(n, (BufferLoad, BufferStore)):
            buffers.setdefault(n.buffer.data, n.buffer)
        elif isinstance(n, Allocate):
            allocated.add(n.buffer.data)

    post_order_visit(body, fn)
    bufs = [b for d, b in buffers.items() if d not in allocated]
    data_vars = {b.data for b in buffers.values()}
    scalars = [v for v in free_vars(body)
               if v not in thread_vars and v not in data_vars and not dt.is_handle(v.dtype)]
    return bufs, scalars


def _written(s):
    found = []
    post_order_visit(s, lambda n: found.append(n.buffer.name) if isinstance(n, BufferStore) else None)
    return found[0] if found else None

"""Turn loops bound to GPU block / thread indices into kernels over those indices.

A kernel is the subtree under an outermost loop bound to blockIdx or threadIdx. Inside it,
every loop bound to a tag stands for the same hardware index, whatever stage it came from (a
shared-memory stage's copy loop bound to threadIdx.x, nested in its consumer's threadIdx.x
loop, is that thread's share of a cooperative fetch), so each such loop is removed and its
variable replaced by one variable per tag; the kernel is wrapped in one
AttrStmt(var, "thread_extent", extent) per tag, outermost blockIdx.x first. Loops bound to
vthreads stay (kiln.tir.transform.virtual_thread interleaves them).

Before:
    for i.outer in range(4):          # bound to blockIdx.x
      for i.inner in range(64):       # bound to threadIdx.x
        B[i.outer*64 + i.inner] = A[i.outer*64 + i.inner]
After:
    // attr [blockIdx.x] thread_extent = 4
    // attr [threadIdx.x] thread_extent = 64
    B[blockIdx.x*64 + threadIdx.x] = A[blockIdx.x*64 + threadIdx.x]
"""
from __future__ import annotations

from ..expr import IntImm, Var
from ..function import PrimFunc
from ..functor import IRMutator, substitute
from ..op import IRError
from ..stmt import AttrStmt, For, Stmt

THREAD_EXTENT = "thread_extent"
# Launch dimensions in the order a kernel's attributes nest (and a launch lists them).
LAUNCH_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z")


class ThreadBindingError(IRError):
    """Loops bound to GPU threads that no kernel can launch: extents that disagree, a bound
    loop of symbolic extent on threadIdx."""


def is_launch_loop(s) -> bool:
    return isinstance(s, For) and s.kind == "thread_binding" and s.thread_tag in LAUNCH_TAGS


def bind_threads(func):
    """Make a kernel of every outermost nest of loops bound to blockIdx / threadIdx.

    Example:
        >>> f = bind_threads(kiln.lower(s, [A, B]))   # doctest: +SKIP
        >>> print(f)                                   # attr [threadIdx.x] thread_extent = 64 ...
    """
    body = func.body if isinstance(func, PrimFunc) else func
    out = _Kernels().visit(body)
    return func.with_body(out) if isinstance(func, PrimFunc) else out


class _Kernels(IRMutator):
    def visit_For(self, s):
        if not is_launch_loop(s):
            return self.generic_visit(s)
        extents: dict = {}
        _collect(s, extents)
        tag_vars = {tag: Var(tag, "int32") for tag in extents}
        body = _Replace(tag_vars).visit(s)
        for tag in reversed(LAUNCH_TAGS):
            if tag in extents:
                body = AttrStmt(tag_vars[tag], THREAD_EXTENT, extents[tag][0][1], body)
        return body


def _collect(s, extents: dict) -> None:
    """tag -> [(loop variable name, extent)] of every launch loop under s; extents checked."""
    def visit(n):
        if isinstance(n, For):
            if is_launch_loop(n):
                seen = extents.setdefault(n.thread_tag, [])
                ext = n.extent
                if n.thread_tag.startswith("threadIdx") and not isinstance(ext, IntImm):
                    raise ThreadBindingError(
                        f"loop '{n.loop_var.name}' is bound to {n.thread_tag} with extent "
                        f"`{ext}`, which is not a constant; split it by a constant factor "
                        "and bind the inner loop")
                if seen and not _same(seen[0][1], ext):
                    raise ThreadBindingError(
                        f"{n.thread_tag} is bound twice in one kernel with different extents: "
                        f"loop '{seen[0][0]}' ({seen[0][1]}) and loop '{n.loop_var.name}' "
                        f"({ext}); split both by the same factor")
                seen.append((n.loop_var.name, ext))
            visit(n.body)
        else:
            for child in child_stmts(n):
                visit(child)

    visit(s)


def child_stmts(s) -> list:
    """The statements directly inside statement s.

    Example:
        >>> child_stmts(SeqStmt((a, b)))   # doctest: +SKIP
        [a, b]
    """
    out = []
    for name in s._fields:
        value = getattr(s, name)
        if isinstance(value, Stmt):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in value if isinstance(v, Stmt))
    return out


def _same(a, b) -> bool:
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return a.value == b.value
    return a is b or str(a) == str(b)


class _Replace(IRMutator):
    def __init__(self, tag_vars):
        super().__init__()
        self.tag_vars = tag_vars

    def visit_For(self, s):
        if not is_launch_loop(s):
            return self.generic_visit(s)
        body = substitute(s.body, {s.loop_var: self.tag_vars[s.thread_tag]})
        return self.visit(body)

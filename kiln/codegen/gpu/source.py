"""Device kernels as C-family source: what CUDA C and OpenCL C share with the C back-end.

Expressions are the C back-end's (typed temporaries, exact literals, numpy's floor division
and NaN-propagating min/max: kiln/codegen/c/source.py); a language subclass spells only its
own words: the kernel signature, thread indices, the barrier, address-space qualifiers and
the math library's names. GPU threads are scalar, so a kernel has no vector types (the GPU
pipeline made vector loops unrolled ones); shared buffers are declared once at the top of the
kernel, local ones where they are allocated (registers, when their indices fold to constants).
"""
from __future__ import annotations

from ...tir import dtype as dt
from ...tir.buffer import Buffer
from ...tir.expr import IntImm
from ...tir.transform.bind_threads import THREAD_EXTENT
from ..c.source import CFunction, CModuleEmitter
from ..c.types import memory_dtype
from ..common import ErrorTable
from ..emitter import ident


class DeviceModuleEmitter(CModuleEmitter):
    """All kernels of one device module in one source text.

    A language subclass sets PRELUDE and KERNEL_FUNCTION (its DeviceFunction subclass).

    Example:
        >>> text = CudaModuleEmitter.emit_kernels(split.kernels)   # doctest: +SKIP
    """

    PRELUDE = ""
    KERNEL_FUNCTION: type = None

    def __init__(self, errors: ErrorTable | None = None):
        super().__init__(1, errors)

    @classmethod
    def emit_kernels(cls, kernels) -> str:
        emitter = cls()
        for k in kernels:
            emitter.add_kernel(k)
        return emitter.text()

    def text(self) -> str:
        return "\n".join([self.PRELUDE, self.types.text(), "", *self.functions])

    def add_kernel(self, kernel) -> None:
        fn = self.KERNEL_FUNCTION(self, kernel.name)
        names = [f"{ident(p.name)}_{k}" for k, p in enumerate(kernel.params)]
        fn.bind_params(kernel.params, names)
        decls = [fn.buffer_param(p, n) if isinstance(p, Buffer) else
                 f"{self.types.ctype(p.dtype)} {n}" for p, n in zip(kernel.params, names)]
        fn.stmt(kernel.body)
        fn.finish(fn.signature(kernel.name, decls, kernel.threads_per_block))


class DeviceFunction(CFunction):
    """One kernel body. Subclasses write `thread_index(tag)`, `barrier()`, `signature(...)`,
    `buffer_param(buffer, name)`, `shared_decl(ctype, name, count)` and `libm_name(fn, dtype)`.
    """

    def __init__(self, module: DeviceModuleEmitter, name: str):
        super().__init__(module, name, name, parallel_depth=1)
        self.shared_decls: list[str] = []

    # ------------------------------------------------------------------ output
    def finish(self, signature: str) -> None:
        decls = ["  " + d for d in self.shared_decls]
        self.module.functions.append(signature + " {\n" + "\n".join(decls + self.lines) + "\n}\n")

    # ------------------------------------------------------------------ statements
    def s_AttrStmt(self, s):
        if s.key == THREAD_EXTENT:
            index = self.tmp("int32", self.thread_index(s.node.name), ident(s.node.name) + "_")
            with self.scoped(s.node, index):
                self.stmt(s.body)
            return
        self.stmt(s.body)

    def s_Allocate(self, s):
        buf = s.buffer
        if not isinstance(s.extent, IntImm):
            raise self.error(f"buffer {buf.name!r} ({buf.scope}) has size `{s.extent}`; a "
                             "kernel's buffers need a constant size (compute the stage at a "
                             "loop where its region is bounded)")
        count = max(1, s.extent.value)
        ctype = self.types.ctype(memory_dtype(buf.dtype))
        name = self.fresh(ident(buf.name) + "_")
        if buf.scope == "shared":
            self.shared_decls.append(self.shared_decl(ctype, name, count))
        elif buf.scope == "local":
            self.line(f"{ctype} {name}[{count}];")
        elif "." in buf.scope:
            raise self.error(f"buffer {buf.name!r} is in scope '{buf.scope}', an accelerator's "
                             "memory; a GPU kernel's buffers are 'shared' or 'local'")
        else:
            raise self.error(f"buffer {buf.name!r} is allocated in global memory inside a "
                             "kernel; give its stage the scope 'shared' or 'local'")
        with self.scoped(buf.data, name):
            self.stmt(s.body)

    def s_AssertStmt(self, s):
        raise self.error(f"assertion `{s.condition}` inside a kernel; kernels cannot fail")

    def serial_loop(self, var, lo: str, hi: str, body, kind: str = "serial") -> None:
        if kind == "unrolled":
            self.line("#pragma unroll")
        super().serial_loop(var, lo, hi, body, kind)

    def parallel_for(self, s, lo, extent):
        raise self.error(f"loop '{s.loop_var.name}' is parallel inside a kernel; bind it to "
                         "GPU threads instead")

    # ------------------------------------------------------------------ expressions
    def call_thread_barrier(self, e):            # the intrinsic kiln.tir.transform.thread_sync.BARRIER
        self.line(self.barrier())
        return "0"

    def call_likely(self, e):
        return self.expr(e.args[0])

    def call_prefetch(self, e):
        return "0"

    def libm(self, fn: str, args: list[str], dtype: str) -> str:
        if dt.lanes_of(dtype) != 1 or dt.element_of(dtype) == "float16":
            raise self.error(f"{fn} of {dtype}: kernels compute float32 and float64 scalars")
        return self.tmp(dtype, f"{self.libm_name(fn, dtype)}({', '.join(args)})")

    def alloc_heap(self, buf, extent):
        raise self.error(f"buffer {buf.name!r} of size `{extent}` inside a kernel")


"""The lowering pipeline: one registry of loop-IR passes, run in order by kiln.lower."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class LoopPass:
    name: str
    fn: Callable

    def __call__(self, func):
        return self.fn(func)


_REGISTRY: dict = {}


def register_pass(name: str):
    """Register a PrimFunc → PrimFunc pass under a name (used by pipelines and instruments)."""
    def deco(fn):
        _REGISTRY[name] = LoopPass(name, fn)
        return fn
    return deco


def get_pass(name: str) -> LoopPass:
    _ensure_registered()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no loop pass named {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


# common_subexpr runs last: every pass before it reasons about explicit index arithmetic
# (bounds, conditions, ramps), which its let-variables would hide, and none after it has to
# see through them; serial_small_parallel only counts stores and loop extents, so it goes
# either way, and runs first so that it sees the statements as the schedule made them.
DEFAULT_ORDER = ("simplify", "loop_partition", "vectorize", "unroll", "inject_prefetch",
                 "simplify", "storage_rewrite", "remove_no_op", "serial_small_parallel",
                 "common_subexpr")


def _ensure_registered():
    if _REGISTRY:
        return
    from ..tir.transform.bind_threads import bind_threads
    from ..tir.transform.common_subexpr import common_subexpr
    from ..tir.transform.thread_allreduce import lower_thread_allreduce
    from ..tir.transform.thread_sync import thread_sync
    from ..tir.transform.virtual_thread import inject_virtual_thread
    from ..tir.transform.inject_prefetch import inject_prefetch
    from ..tir.transform.loop_partition import loop_partition
    from ..tir.transform.remove_no_op import remove_no_op
    from ..tir.transform.serial_small_parallel import serial_small_parallel
    from ..tir.transform.single_iteration import single_iteration_loops
    from ..tir.transform.simplify import simplify
    from ..tir.transform.storage_rewrite import storage_rewrite
    from ..tir.transform.unroll import unroll, unroll_vector_loops
    from ..tir.transform.vectorize import vectorize
    for name, fn in (("simplify", simplify), ("loop_partition", loop_partition),
                     ("vectorize", vectorize), ("unroll", unroll),
                     ("inject_prefetch", inject_prefetch),
                     ("storage_rewrite", storage_rewrite), ("remove_no_op", remove_no_op),
                     ("serial_small_parallel", serial_small_parallel),
                     ("single_iteration_loops", single_iteration_loops),
                     ("common_subexpr", common_subexpr),
                     ("unroll_vector_loops", unroll_vector_loops),
                     ("bind_threads", bind_threads),
                     ("lower_thread_allreduce", lower_thread_allreduce),
                     ("inject_virtual_thread", inject_virtual_thread),
                     ("thread_sync", thread_sync)):
        _REGISTRY[name] = LoopPass(name, fn)


# GPU kernels: vector loops become unrolled scalar code (a GPU thread is scalar; its
# parallelism comes from the thread binding), loops of at most one iteration branches (so
# that register arrays keep constant indices), then loops bound to threads become kernels,
# cross-thread reductions shared-memory trees, virtual threads are interleaved and barriers
# placed.
GPU_ORDER = ("simplify", "loop_partition", "unroll_vector_loops", "unroll", "simplify",
             "single_iteration_loops", "storage_rewrite", "remove_no_op", "bind_threads",
             "lower_thread_allreduce", "inject_virtual_thread", "thread_sync", "simplify",
             "common_subexpr")


# VDLA: loops stay loops (its code generator runs them and emits instructions, interleaving
# the virtual threads' instructions itself; vectors are its buffers' entries).
VDLA_ORDER = ("simplify",)


def default_pipeline(target=None) -> list:
    """The lowering passes for a target (the CPU's when None).

    Example:
        >>> [p.name for p in default_pipeline("cuda")][-3:]
        ['thread_sync', 'simplify', 'common_subexpr']
    """
    from ..target import as_target
    target = None if target is None else as_target(target)
    order = DEFAULT_ORDER if target is None else \
        {"vdla": VDLA_ORDER}.get(target.kind, GPU_ORDER if target.is_gpu else DEFAULT_ORDER)
    return [get_pass(n) for n in order]


class PassInstrument:
    """Hooks around every pass; subclass, or use PrintIR / TimePasses."""

    def before(self, name, func):
        pass

    def after(self, name, func, seconds):
        pass


class PrintIR(PassInstrument):
    """Print the loop program after the named passes (all when names is empty)."""

    def __init__(self, *names, file=None):
        self.names = set(names)
        self.file = file or sys.stdout

    def after(self, name, func, seconds):
        if not self.names or name in self.names:
            print(f"# after {name}:\n{func}", file=self.file)


class TimePasses(PassInstrument):
    def __init__(self):
        self.times: list = []

    def after(self, name, func, seconds):
        self.times.append((name, seconds))

    def report(self) -> str:
        return "\n".join(f"{n:>16}: {t * 1e3:8.2f} ms" for n, t in self.times)

"""Where a compile spends its time: phases timed while a CompileTimings is entered.

    with kiln.compile_timings() as timings:
        lib = kiln.compile(mod, params=params)
    print(timings)            # per phase (frontend, each graph pass, each lowering pass, LLVM
                              # optimization, machine code, link) and the slowest kernels

The stages of the pipeline mark their work with `with phase("llvm.optimize"):`; outside an
entered CompileTimings that costs one thread-local lookup. Time is *exclusive*: a phase that runs
another (FoldConstant compiling a kernel to evaluate a constant) is charged only for its own
part, so the phases add up to the time measured. `kernel(name)` charges the phases inside it to
a kernel as well, for the per-kernel list.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict

_local = threading.local()


def _active() -> list:
    stack = getattr(_local, "recorders", None)
    if stack is None:
        stack = _local.recorders = []
    return stack


class CompileTimings:
    """Collects the exclusive time of each phase (and kernel) while entered; prints as a report.

    Example:
        >>> with CompileTimings() as t:
        ...     with phase("graph.FoldConstant"):
        ...         pass
        >>> "graph.FoldConstant" in t.phases()
        True
    """

    def __init__(self):
        self._phases: dict = defaultdict(float)
        self._kernels: dict = defaultdict(float)
        self._open: list = []          # [name, kernel, start, time spent in nested phases]
        self._kernel: list = []
        self._worker_phases: dict = defaultdict(float)
        self.total = 0.0

    def __enter__(self) -> "CompileTimings":
        self._entered = time.perf_counter()
        _active().append(self)
        return self

    def __exit__(self, *exc) -> None:
        _active().remove(self)
        self.total += time.perf_counter() - self._entered

    # ---------------------------------------------------------------------------- recording
    def _begin(self, name: str) -> None:
        self._open.append([name, self._kernel[-1] if self._kernel else None,
                           time.perf_counter(), 0.0])

    def _end(self) -> None:
        name, kernel, start, nested = self._open.pop()
        spent = time.perf_counter() - start
        self._phases[name] += spent - nested
        if kernel is not None:
            self._kernels[kernel] += spent - nested
        if self._open:
            self._open[-1][3] += spent

    def add_worker_phases(self, kernel: str, phases: dict) -> None:
        """Count the phases a worker process spent on `kernel` (CPU seconds there, in parallel
        with other workers: reported apart from this process's wall-clock phases).

        Example:
            >>> t.add_worker_phases("fused_nn_dense_0", {"llvm.optimize": 0.2})   # doctest: +SKIP
        """
        for name, seconds in phases.items():
            self._worker_phases[name] += seconds
            self._kernels[kernel] += seconds

    # ---------------------------------------------------------------------------- results
    def phases(self) -> dict:
        """{phase: exclusive seconds}, in the order phases first ran, plus "other" for the time
        inside the block that no phase claimed.

        Example:
            >>> sorted(t.phases())[:2]                  # doctest: +SKIP
            ['codegen.emit', 'frontend']
        """
        out = dict(self._phases)
        out["other"] = max(self.total - sum(self._phases.values()), 0.0)
        return out

    def kernels(self) -> dict:
        """{kernel: seconds of the phases charged to it (its lowering)}, slowest first.

        Example:
            >>> next(iter(t.kernels()))                 # doctest: +SKIP
            'fused_nn_contrib_conv2d_nchwc_add_nn_relu_3'
        """
        return dict(sorted(self._kernels.items(), key=lambda kv: -kv[1]))

    def groups(self) -> dict:
        """{group: seconds}: the phases summed by the part before their first dot (frontend,
        graph, schedule, tir, codegen, llvm, export, other).

        Example:
            >>> t.groups()["llvm"] > 0                  # doctest: +SKIP
            True
        """
        out: dict = defaultdict(float)
        for name, seconds in self.phases().items():
            out[name.split(".")[0]] += seconds
        return dict(out)

    def to_json(self) -> dict:
        """The figures as plain data: total, groups, phases and kernels (seconds).

        Example:
            >>> round(t.to_json()["total"], 1)          # doctest: +SKIP
            9.8
        """
        return {"total": self.total, "groups": self.groups(), "phases": self.phases(),
                "kernels": self.kernels(), "worker_phases": self.worker_phases()}

    def worker_phases(self) -> dict:
        """{phase: CPU seconds} spent in build worker processes, costliest first.

        Example:
            >>> t.worker_phases().get("llvm.optimize", 0) >= 0     # doctest: +SKIP
            True
        """
        return dict(sorted(self._worker_phases.items(), key=lambda kv: -kv[1]))

    def report(self, kernels: int = 8) -> str:
        """The table: each group and its phases with seconds and share of the total, then the
        `kernels` slowest kernels.

        Example:
            >>> print(t.report())                       # doctest: +SKIP
        """
        total = max(self.total, 1e-9)
        lines = [f"compile timings: {self.total:.2f} s"]
        phases = self.phases()
        for group, seconds in sorted(self.groups().items(), key=lambda kv: -kv[1]):
            lines.append(f"  {group:<34} {seconds:8.3f} s {100 * seconds / total:5.1f}%")
            members = [(n, s) for n, s in phases.items() if n.split(".")[0] == group and n != group]
            for name, s in sorted(members, key=lambda kv: -kv[1]):
                lines.append(f"    {name:<32} {s:8.3f} s {100 * s / total:5.1f}%")
        if self._worker_phases:
            work = sum(self._worker_phases.values())
            lines.append(f"  in build worker processes (CPU seconds, side by side): {work:.3f} s")
            lines += [f"    {name:<32} {s:8.3f} s" for name, s in self.worker_phases().items()]
        slow = list(self.kernels().items())[:kernels]
        if slow:
            lines.append(f"  slowest kernels to lower ({len(self._kernels)} in all):")
            lines += [f"    {name:<52} {s:8.3f} s" for name, s in slow]
        return "\n".join(lines)

    __str__ = report


def active_timings() -> list:
    """The CompileTimings entered on this thread (innermost last).

    Example:
        >>> with compile_timings() as t:
        ...     active_timings()[-1] is t
        True
    """
    return list(_active())


def compile_timings() -> CompileTimings:
    """A CompileTimings to enter around kiln.compile (or an import, or tuning's builds).

    Example:
        >>> with kiln.compile_timings() as t:              # doctest: +SKIP
        ...     lib = kiln.compile(mod, params=params)
        >>> print(t)                                       # doctest: +SKIP
    """
    return CompileTimings()


@contextlib.contextmanager
def phase(name: str):
    """Charge the time of the block to phase `name` in every entered CompileTimings.

    Example:
        >>> with phase("llvm.optimize"):                  # doctest: +SKIP
        ...     machine.optimize(module)
    """
    recorders = _active()
    if not recorders:
        yield
        return
    for r in recorders:
        r._begin(name)
    try:
        yield
    finally:
        for r in recorders:
            r._end()


@contextlib.contextmanager
def kernel(name: str):
    """Charge the phases inside the block to kernel `name` too.

    Example:
        >>> with kernel("fused_nn_dense_0"):             # doctest: +SKIP
        ...     prim = lower_primitive(fn, "fused_nn_dense_0")
    """
    recorders = _active()
    for r in recorders:
        r._kernel.append(name)
    try:
        yield
    finally:
        for r in recorders:
            r._kernel.pop()

"""Search tasks: one kernel of a model (a fused graph function) to auto-schedule for a target.

A SearchTask plays the part of an autotvm Task for the tuning loop, the measurement workers
and the tuning log: its key is `["auto_schedule",["<digest>"],"<target>"]` (see dispatch), its
configs are ProgramConfigs (a program, with the sketch and decisions that produced it), and
config 0, the default, is the schedule kiln compiles the kernel with today (the one its
operator registers), measured first so that a program is only ever picked when it beats it.
A record's config is `{"index": <program digest>, "knobs": {"program": [...steps],
"sketch": "...", "decisions": {...}}}`; only "program" is needed to replay it.

Example:
    >>> tasks = extract_search_tasks(mod, params, "llvm")         # doctest: +SKIP
    >>> tasks[0].sketches                                         # doctest: +SKIP
    [Sketch(C:tile), Sketch(C:fuse1), Sketch(C:fuse2)]
"""
from __future__ import annotations

import warnings
from functools import cached_property

from ..autotvm.task import Task
from ..graph.expr import Function
from ..graph.serialize import function_from_json, function_to_json
from ..target import as_target
from .compute_dag import ComputeDAG
from .dispatch import AUTO_TASK, supports_target, workload_digest, workload_key
from .program import Program, ProgramError
from .sketch import Decisions

__all__ = ["SearchTask", "ProgramConfig", "ProgramSpace", "extract_search_tasks"]


class ProgramConfig:
    """A point of a search task's space: a program (None: the default schedule), with the
    sketch and decisions it was annotated from (kept for the search, not needed to replay).

    Example:
        >>> ProgramConfig(None).to_json()
        {'index': 0, 'knobs': {}}
    """

    __slots__ = ("program", "sketch", "decisions", "index")

    def __init__(self, program: Program | None, sketch: str = "", decisions=None):
        self.program = program
        self.sketch = sketch
        self.decisions = dict(decisions or {})
        self.index = 0 if program is None else program.digest

    @property
    def is_default(self) -> bool:
        return self.program is None

    def to_json(self) -> dict:
        if self.program is None:
            return {"index": 0, "knobs": {}}
        decisions = {k: list(v) if isinstance(v, tuple) else v
                     for k, v in sorted(self.decisions.items())}
        return {"index": self.index, "knobs": {"program": self.program.to_json(),
                                               "sketch": self.sketch, "decisions": decisions}}

    def __repr__(self):
        return "ProgramConfig(default)" if self.program is None else \
            f"ProgramConfig({self.sketch}, {len(self.program)} steps)"


class ProgramSpace:
    """The (unenumerated) space of a search task's programs, as far as the tuning loop and
    the log reader need one: its size and the reading of a record's config.

    Example:
        >>> ProgramSpace().from_json({"index": 0, "knobs": {}}).is_default
        True
    """

    size = 2 ** 48      # programs are named by a 48-bit digest

    def from_json(self, d: dict) -> ProgramConfig:
        if not isinstance(d, dict) or not isinstance(d.get("knobs"), dict):
            raise ValueError(f"a program config is {{'index': int, 'knobs': {{...}}}}, got {d!r}")
        knobs = d["knobs"]
        if "program" not in knobs:
            if d.get("index") != 0:
                raise ValueError(f"a config without a program is the default, index 0: {d!r}")
            return ProgramConfig(None)
        steps = knobs["program"]
        if not isinstance(steps, list) or not all(isinstance(s, list) for s in steps):
            raise ValueError(f"a config's program is a list of steps, got {steps!r}")
        decisions = knobs.get("decisions") or {}
        if not isinstance(decisions, dict):
            raise ValueError(f"a config's decisions are a dict, got {decisions!r}")
        config = ProgramConfig(Program(steps), str(knobs.get("sketch", "")),
                               {k: tuple(v) if isinstance(v, list) else v
                                for k, v in decisions.items()})
        if d.get("index") != config.index:
            raise ValueError(f"config index {d.get('index')!r} is not its program's digest "
                             f"{config.index}")
        return config

    def get(self, index: int) -> ProgramConfig:
        if index != 0:
            raise ValueError("a program space lists only its default, config 0")
        return ProgramConfig(None)


class SearchTask(Task):
    """One kernel (a fused graph function) to auto-schedule for a target: a Task to the
    tuning loop, the measurement workers and the log (it has no template).

    Example:
        >>> task = SearchTask(fused_fn, "llvm")      # doctest: +SKIP
        >>> task.key                                 # doctest: +SKIP
        '["auto_schedule",["3f0c9a..."],"llvm"]'
    """

    name = AUTO_TASK

    def __init__(self, function, target="llvm", kernel_name: str | None = None):  # noqa: D107
        # (Task.__init__ looks up a template: a search task has none)
        if isinstance(function, dict):
            function = function_from_json(function)
        if not isinstance(function, Function):
            raise TypeError(f"a search task takes a fused graph Function (or its JSON), got "
                            f"{type(function).__name__}")
        self.function = function
        self.function_json = function_to_json(function)
        self.target = as_target(target)
        if not supports_target(self.target):
            raise ValueError(f"auto-scheduling has no sketch rules for target {self.target} "
                             f"(keys {', '.join(self.target.keys)})")
        self.digest = workload_digest(self.function_json)
        self.args = [self.digest]
        self.key = workload_key(self.function_json, self.target)
        self.kernel_name = kernel_name or "kernel"
        self.count = 1          # occurrences in a model (set by extract_search_tasks)
        self.kernels: list = []
        self._space = ProgramSpace()

    @property
    def config_space(self) -> ProgramSpace:
        return self._space

    # ---------------------------------------------------------------- the computation
    @cached_property
    def _computed(self):
        from ..driver.lower_graph import compute_primitive
        with self.target:
            return compute_primitive(self.function, self.kernel_name)

    @property
    def outputs(self) -> list:
        return self._computed[1]

    @cached_property
    def dag(self) -> ComputeDAG:
        return ComputeDAG(self.outputs)

    @cached_property
    def rules(self):
        from .rules import rules_for
        return rules_for(self.target)

    @cached_property
    def sketches(self) -> list:
        return self.rules.generate(self.dag)

    @cached_property
    def flop(self) -> int:
        from ..te.flop import compute_flop
        return compute_flop(self.outputs)

    def sample(self, sketch, decisions: Decisions) -> ProgramConfig:
        """The program of `sketch` under `decisions` (missing choices drawn at random).

        Example:
            >>> cfg = task.sample(task.sketches[0], Decisions(rng=0))   # doctest: +SKIP
        """
        program = self.rules.annotate(self.dag, sketch, decisions, self.target)
        return ProgramConfig(program, str(sketch), decisions.values)

    # ---------------------------------------------------------------- the Task interface
    def _config(self, config) -> ProgramConfig:
        if isinstance(config, ProgramConfig):
            return config
        if isinstance(config, dict):
            return self.config_space.from_json(config)
        if config == 0:
            return ProgramConfig(None)
        raise TypeError(f"task {self.key}: a config is a ProgramConfig or its JSON, got "
                        f"{config!r}")

    def instantiate(self, config) -> tuple:
        """(schedule, arguments) of `config`: its program replayed, or the registered
        schedule for the default.

        Example:
            >>> s, args = task.instantiate(task.default_config())     # doctest: +SKIP
        """
        from ..driver.lower_graph import registered_schedule
        from .program import replay
        config = self._config(config)
        args, outputs, master = self._computed
        with self.target:
            if config.program is None:
                return registered_schedule(master, outputs, self.target), list(args)
            try:
                return replay(outputs, config.program).schedule, list(args)
            except ProgramError as e:
                raise ProgramError(f"task {self.key}: {e}") from e

    def default_config(self) -> ProgramConfig:
        return ProgramConfig(None)

    def to_json(self) -> dict:
        return {"name": AUTO_TASK, "args": self.args, "target": str(self.target),
                "module": __name__, "class": f"{__name__}:SearchTask",
                "function": self.function_json, "kernel": self.kernel_name}

    @staticmethod
    def from_json(d: dict) -> "SearchTask":
        if not isinstance(d, dict) or not isinstance(d.get("function"), dict):
            raise ValueError("a search task's JSON holds its fused function under 'function'")
        task = SearchTask(d["function"], d.get("target", "llvm"), d.get("kernel"))
        if d.get("args") and d["args"] != task.args:
            raise ValueError(f"search task {d['args']}: its function has digest {task.digest}")
        return task

    def __repr__(self):
        return f"SearchTask({self.kernel_name}, {self.key})"


def extract_search_tasks(mod, params=None, target="llvm", opt_level: int = 3) -> list:
    """One SearchTask per distinct kernel kiln.compile builds for `mod` (every kernel, not
    only those with templates), with `count` and `kernels` as autotvm.extract_tasks sets them;
    sorted by flop * count, largest first. Kernels with symbolic extents, or that the
    target's rules do not cover, are skipped.

    Example:
        >>> tasks = extract_search_tasks(mod, params, "llvm")   # doctest: +SKIP
    """
    from ..autotvm.extract import collect_tasks
    return collect_tasks(mod, params, target, opt_level,
                         lambda fn, kernel, target: _searchable(SearchTask(fn, target, kernel)))


def _searchable(task):
    """`task` when its rules give it sketches that annotate, else None (a kernel with a
    symbolic extent or one the rules do not cover keeps its registered schedule; a rule that
    fails is reported)."""
    from .compute_dag import UnsupportedDAG
    try:
        sketches = task.sketches
        for sketch in sketches:
            task.sample(sketch, Decisions(rng=0))
    except UnsupportedDAG:
        return None
    except Exception as e:      # noqa: BLE001 - a rule bug costs this kernel, not the run
        warnings.warn(f"auto-scheduling skips kernel {task.kernel_name}: its sketch rules "
                      f"failed ({type(e).__name__}: {e})", stacklevel=3)
        return None
    return task if sketches else None

"""Templates, tuning tasks and the dispatch of configs to templates.

A template is a function of JSON arguments that builds a schedule and returns
`(schedule, tensors)`; its body calls `get_config()` and declares / reads knobs on it:

    @template("test.matmul")
    def matmul(n, m, k, dtype):
        ...
        cfg = get_config()
        cfg.define_split("tile_x", x, num_outputs=2)
        xo, xi = cfg["tile_x"].apply(s, C, x)
        return s, [A, B, C]

`get_config()` returns, depending on who runs the template: the ConfigSpace being collected
(`Task.config_space`), the explicit config (`Task.instantiate`), or — when the template is
simply called, e.g. by kiln.compile — the config that `DispatchContext.current()` answers for
the task key, else a FallbackConfig (the template's heuristic default).

A task is (template name, args, target); its key is the canonical JSON text
`["test.matmul",[512,512,512,"float32"],"llvm"]` that tuning records are filed under.
"""
from __future__ import annotations

import importlib
import json
import math
import numbers
import threading
import warnings
from contextlib import contextmanager
from functools import wraps

from ..target import Target, as_target, current_target
from ..te.flop import compute_flop   # lives in te: kiln.compile counts kernels' FLOPs too
from .space import ConfigEntity, ConfigSpace, FallbackConfig

__all__ = ["template", "get_config", "Task", "create_task", "DispatchContext", "ApplyFixedConfigs",
           "compute_flop", "task_key", "registered_templates"]


# ------------------------------------------------------------------------------ registry
class _Template:
    __slots__ = ("name", "fn", "module", "spaces", "flop")

    def __init__(self, name, fn, flop=None):
        self.name, self.fn, self.module, self.flop = name, fn, fn.__module__, flop
        self.spaces: dict[str, ConfigSpace] = {}   # task key -> collected space

    def run(self, cfg, args, target: Target):
        """Run the template with `cfg` as get_config() under `target`; checks what it returns."""
        _frames().append(cfg)
        try:
            with target:
                out = self.fn(*args)
        finally:
            _frames().pop()
        if (not isinstance(out, (tuple, list)) or len(out) != 2
                or not isinstance(out[1], (list, tuple))):
            raise TypeError(f"template '{self.name}' must return (schedule, list of tensors), "
                            f"got {type(out).__name__}")
        return out[0], list(out[1])

    def space(self, key: str, args, target: Target) -> ConfigSpace:
        space = self.spaces.get(key)
        if space is None:
            space = ConfigSpace()
            self.run(space, args, target)
            self.spaces[key] = space
        return space


_TEMPLATES: dict[str, _Template] = {}
_local = threading.local()


def _frames() -> list:
    if not hasattr(_local, "frames"):
        _local.frames = []
    return _local.frames


def registered_templates() -> list[str]:
    """Names of the registered templates.

    Example:
        >>> import kiln.autotvm.testing
        >>> "test.matmul" in registered_templates()
        True
    """
    return sorted(_TEMPLATES)


def _lookup(name: str) -> _Template:
    tmpl = _TEMPLATES.get(name)
    if tmpl is None:
        known = ", ".join(sorted(_TEMPLATES)) or "none registered"
        raise ValueError(f"unknown template '{name}' (known: {known}); import the module that "
                         f"defines it")
    return tmpl


def _canon_args(name: str, args) -> list:
    """Args as JSON values (tuples -> lists); a clear error names the first bad argument."""
    def canon(v, where):
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, numbers.Integral):      # numpy integers too
            return int(v)
        if isinstance(v, numbers.Real):
            if not math.isfinite(float(v)):
                raise ValueError(f"template '{name}': argument {where} is {v}, not a finite number")
            return float(v)
        if isinstance(v, (list, tuple)):
            return [canon(x, f"{where}[{k}]") for k, x in enumerate(v)]
        if isinstance(v, dict) and all(isinstance(k, str) for k in v):
            return {k: canon(x, f"{where}[{k!r}]") for k, x in v.items()}
        raise TypeError(f"template '{name}': argument {where} = {v!r} is not a JSON value "
                        f"(ints, floats, strings, lists)")
    if not isinstance(args, (list, tuple)):
        raise TypeError(f"template '{name}': args must be a list or tuple, got {args!r}")
    return [canon(a, str(k)) for k, a in enumerate(args)]


def task_key(name: str, args, target="llvm") -> str:
    """The canonical task key: JSON text of [name, args, target text].

    Example:
        >>> task_key("test.matmul", (8, 8, 8, "float32"))
        '["test.matmul",[8,8,8,"float32"],"llvm"]'
    """
    return json.dumps([name, _canon_args(name, args), str(as_target(target))],
                      separators=(",", ":"), sort_keys=True)


def template(name: str, flop=None):
    """Register fn(*args) -> (schedule, tensors) as the template `name`. `flop`, a function of
    the args, gives the operations GFLOPS are counted in when counting the program's would
    mislead (a Winograd convolution: the direct convolution's, as papers quote it).

    Called directly, the decorated function builds the schedule of the config that the current
    DispatchContext answers for its task key (the args and the current target), else of the
    template's fallback config. Args are JSON values; the template receives them as JSON
    (tuples arrive as lists).

    Example:
        >>> @template("my.add")  # doctest: +SKIP
        ... def add(n):
        ...     cfg = get_config(); ...
        ...     return s, [A, B]
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"a template name is a non-empty string, got {name!r}")

    def register(fn):
        old = _TEMPLATES.get(name)
        if old is not None and (old.module, old.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"template '{name}' is already registered by "
                             f"{old.module}.{old.fn.__qualname__}")
        tmpl = _Template(name, fn, flop)
        _TEMPLATES[name] = tmpl

        @wraps(fn)
        def dispatch(*args):
            target = current_target()
            args = _canon_args(name, args)
            key = task_key(name, args, target)
            ctx = DispatchContext.current()
            record = ctx.query(key) if ctx is not None else None
            log_dispatch(key, tmpl.module, record)
            cfg = None
            if record is not None:
                try:
                    cfg = tmpl.space(key, args, target).from_json(record)
                except ValueError as exc:
                    # A log written for an older version of this template: its config no
                    # longer fits the space. The default still compiles; say why.
                    warnings.warn(f"template '{name}': the logged config for {key} does not "
                                  f"fit its space ({exc}); using the default config",
                                  stacklevel=2)
            if cfg is None:
                if ctx is not None:
                    ctx.on_fallback(key)
                cfg = FallbackConfig()
            return tmpl.run(cfg, args, target)

        dispatch.template_name = name
        return dispatch

    return register


def get_config():
    """The config of the template being run (see the module docstring for which one).

    Example:
        >>> cfg = get_config()  # doctest: +SKIP
    """
    frames = _frames()
    if not frames:
        raise RuntimeError("get_config() is called outside a template: call it inside a "
                           "function decorated with @autotvm.template")
    return frames[-1]


# ------------------------------------------------------------------------------ dispatch
@contextmanager
def dispatch_log():
    """Collect (task key, module of the template, the config answered or None) for every
    template run in the block on this thread: what the code built there asked the dispatch
    context and was answered (kiln's kernel cache keys a kernel by the answers).

    Example:
        >>> with dispatch_log() as asked:       # doctest: +SKIP
        ...     s, args = conv_template(...)
        >>> asked                                # doctest: +SKIP
        [('["x86.conv2d_nchwc",[...],"llvm"]', 'kiln.autotvm.templates.conv2d', None)]
    """
    logs = _local.__dict__.setdefault("dispatch_logs", [])
    log: list = []
    logs.append(log)
    try:
        yield log
    finally:
        logs.remove(log)


@contextmanager
def answering_only(answers: dict):
    """Templates in the block are answered from `answers` alone ({task key: config data}; a
    key not there: the fallback), as if no other dispatch context were entered: what kiln
    replays for a kernel it already asked about is not asked, nor counted, twice.

    Example:
        >>> with answering_only({"k": {"tile": 4}}):
        ...     DispatchContext.current().query("k")
        {'tile': 4}
    """
    outer = DispatchContext._stack()
    _local.dispatch = []
    try:
        with ApplyFixedConfigs(answers):
            yield
    finally:
        _local.dispatch = outer


def log_dispatch(key: str, module: str, record) -> None:
    """Note in every open dispatch_log that task `key` (of a template in `module`) was asked
    for and answered `record` (None when no context answered, or none was entered).

    Example:
        >>> log_dispatch('["dense_pack.x86",[...],"llvm"]', "kiln.autotvm.templates.gemm", None)
    """
    for log in getattr(_local, "dispatch_logs", ()):
        log.append((key, module, record))


def dispatch_snapshot() -> "dict | None":
    """What the entered dispatch contexts of this thread would answer, as one table {task key:
    config data} (an inner context's answer wins, as in query); {} with none entered; None when
    one of them cannot list its answers. A worker process answers from it as this thread would.

    Example:
        >>> with ApplyFixedConfigs({"k": {"tile": 4}}):
        ...     dispatch_snapshot()
        {'k': {'tile': 4}}
    """
    table: dict = {}
    for ctx in DispatchContext._stack():
        answers = ctx.snapshot()
        if answers is None:
            return None
        table.update(answers)
    return table


def dispatch_answer(key: str) -> "dict | None":
    """What a template asking for task `key` here would be answered (None: its fallback), with
    the same bookkeeping as a real query (ApplyHistoryBest counts it as asked, or untuned).

    Example:
        >>> with ApplyFixedConfigs({"k": {"tile": 4}}):
        ...     dispatch_answer("k")
        {'tile': 4}
    """
    ctx = DispatchContext.current()
    if ctx is None:
        return None
    record = ctx.query(key)
    if record is None and not is_auto_task_key(key):
        ctx.on_fallback(key)
    return record


def is_auto_task_key(key: str) -> bool:
    """Whether a task key names an auto-scheduled kernel (kiln.auto_schedule), not a template's
    task. Every kernel asks for its program, and the question is optional: an unanswered one
    is no fallback (on_fallback is not told), and it counts as untuned only under a log of the
    auto-scheduler.

    Example:
        >>> is_auto_task_key('["auto_schedule",["0a1b"],"llvm"]')
        True
    """
    return key.startswith('["auto_schedule",')


class DispatchContext:
    """Answers, per task key, which config (as data) a template should use.

    A context manager on a thread-local stack; `current()` is the innermost. `query(key)` asks
    this context's `_query` and, when it has no answer, the context that was current when this
    one was entered (as TVM does). Subclasses override `_query(task_key) -> dict | None`
    and may override `on_fallback(task_key)` to count the tasks that got no answer.

    Example:
        >>> with ApplyFixedConfigs({}) as ctx:
        ...     DispatchContext.current() is ctx
        True
    """

    def __init__(self):
        self._parent: DispatchContext | None = None

    @staticmethod
    def _stack() -> list:
        if not hasattr(_local, "dispatch"):
            _local.dispatch = []
        return _local.dispatch

    @staticmethod
    def current() -> "DispatchContext | None":
        """The innermost entered context of this thread, or None."""
        stack = DispatchContext._stack()
        return stack[-1] if stack else None

    def __enter__(self):
        stack = self._stack()
        if self in stack:
            raise RuntimeError(f"{type(self).__name__} is already entered; contexts do not nest "
                               f"inside themselves")
        self._parent = stack[-1] if stack else None
        stack.append(self)
        return self

    def __exit__(self, *exc):
        stack = self._stack()
        if not stack or stack[-1] is not self:
            raise RuntimeError(f"{type(self).__name__} exited out of order")
        stack.pop()
        self._parent = None

    def query(self, task_key: str) -> "dict | None":
        """The config (as data) for task_key from this context or the ones it is nested in."""
        ctx = self
        while ctx is not None:
            answer = ctx._query(task_key)
            if answer is not None:
                return answer
            ctx = ctx._parent
        return None

    def _query(self, task_key: str) -> "dict | None":
        return None

    def on_fallback(self, task_key: str) -> None:
        """Called when no context answered for task_key and the fallback config is used."""

    def snapshot(self) -> "dict | None":
        """Every answer this context (alone) would give, as {task key: config data}, for a
        process that cannot ask it; None when it cannot say (answers computed on demand)."""
        return None


class ApplyFixedConfigs(DispatchContext):
    """Dispatch fixed configs: a dict task key -> config (a ConfigEntity or its JSON form).
    Records the keys that fell back in `.fallbacks`.

    Example:
        >>> with ApplyFixedConfigs({task.key: task.config_space.get(3)}):  # doctest: +SKIP
        ...     s, args = matmul(64, 64, 64, "float32")
    """

    def __init__(self, configs: dict):
        super().__init__()
        self.configs = {k: (v.to_json() if hasattr(v, "to_json") else v) for k, v in configs.items()}
        self.fallbacks: list[str] = []

    def _query(self, task_key):
        return self.configs.get(task_key)

    def on_fallback(self, task_key):
        self.fallbacks.append(task_key)

    def snapshot(self):
        return dict(self.configs)


# ------------------------------------------------------------------------------ tasks
class Task:
    """A template instantiated with arguments for a target: what a tuner tunes.

    Example:
        >>> import kiln.autotvm.testing  # registers "test.matmul"
        >>> t = Task("test.matmul", (32, 32, 32, "float32"))
        >>> t.key, t.flop
        ('["test.matmul",[32,32,32,"float32"],"llvm"]', 65536)
    """

    def __init__(self, name: str, args=(), target="llvm"):
        self._template = _lookup(name)
        self.name = name
        self.args = _canon_args(name, args)
        self.target = as_target(target)
        self.key = task_key(name, self.args, self.target)
        self.count = 1          # occurrences in a model (set by extract_tasks)
        self.kernels: list = []  # the model's kernels it covers, by name (set by extract_tasks)
        self._flop = None

    @property
    def config_space(self) -> ConfigSpace:
        """The template's space for these args (collected once)."""
        return self._template.space(self.key, self.args, self.target)

    def _config(self, config):
        space = self.config_space
        if isinstance(config, ConfigEntity):
            if config.space is space:
                return config
            config = config.to_json()
        if isinstance(config, FallbackConfig):
            return config
        if isinstance(config, int) and not isinstance(config, bool):
            return space.get(config)
        if isinstance(config, dict):
            return space.from_json(config)
        raise TypeError(f"task {self.key}: a config is a ConfigEntity, its JSON dict or an "
                        f"index, got {config!r}")

    def instantiate(self, config) -> tuple:
        """(schedule, tensors) of the template under `config` (entity, JSON dict or index),
        built with the task's target as the current target.

        Example:
            >>> s, args = task.instantiate(task.config_space.get(0))  # doctest: +SKIP
        """
        return self._template.run(self._config(config), self.args, self.target)

    def default_config(self) -> ConfigEntity:
        """The template's fallback config, as a point of config_space.

        Example:
            >>> task.default_config().to_json()  # doctest: +SKIP
        """
        fallback = FallbackConfig()
        self._template.run(fallback, self.args, self.target)
        return self.config_space.from_json(fallback.to_json())

    @property
    def flop(self) -> int:
        """Floating-point operations of one run (see compute_flop; or the template's own
        count, see template)."""
        if self._flop is None and self._template.flop is not None:
            self._flop = int(self._template.flop(*self.args))
        if self._flop is None:
            _, tensors = self._template.run(FallbackConfig(), self.args, self.target)
            self._flop = compute_flop(tensors)
        return self._flop

    def to_json(self) -> dict:
        """{"name", "args", "target", "module"}: enough for a worker process to rebuild it."""
        return {"name": self.name, "args": self.args, "target": str(self.target),
                "module": self._template.module}

    @staticmethod
    def from_json(d: dict) -> "Task":
        """Rebuild a task, importing the template's module when it is not registered yet.

        Example:
            >>> Task.from_json(task.to_json()).key == task.key  # doctest: +SKIP
            True
        """
        if not isinstance(d, dict) or not {"name", "args", "target"} <= set(d):
            raise ValueError(f"a task is a dict with 'name', 'args' and 'target', got {d!r}")
        if d.get("class"):      # another kind of task (kiln.auto_schedule's SearchTask)
            return _task_class(d["class"]).from_json(d)
        if d["name"] not in _TEMPLATES and d.get("module"):
            try:
                importlib.import_module(d["module"])
            except ImportError as e:
                raise ValueError(f"task '{d['name']}': cannot import its template module "
                                 f"'{d['module']}': {e}") from None
        return Task(d["name"], d["args"], d["target"])

    def __repr__(self):
        return f"Task({self.key})"

    def __eq__(self, other):
        return isinstance(other, Task) and other.key == self.key

    def __hash__(self):
        return hash(self.key)


def _task_class(spec: str):
    """The task class a task's JSON names ("kiln.package.module:Class"): a subclass of Task
    in kiln's own kiln.auto_schedule package (nothing else is imported for it)."""
    module, _, name = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not module.startswith("kiln.auto_schedule.") or not name.isidentifier() or \
            not all(part.isidentifier() for part in module.split(".")):
        raise ValueError(f"a task names its class {spec!r}, not one of kiln's task classes")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, Task) and cls is not Task):
        raise ValueError(f"a task names class {spec!r}, which is not one of kiln's task "
                         f"classes")
    return cls


def create_task(name: str, args=(), target="llvm") -> Task:
    """A task of a registered template (same as Task(name, args, target)).

    Example:
        >>> create_task("test.matmul", (16, 16, 16, "float32")).name  # doctest: +SKIP
        'test.matmul'
    """
    return Task(name, args, target)


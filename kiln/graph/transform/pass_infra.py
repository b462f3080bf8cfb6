"""Pass infrastructure: module and function passes, Sequential, PassContext and instruments.

A pass is a named IRModule → IRModule function with an opt_level. `Sequential` runs a list of
passes, skipping those above the current context's opt_level or disabled by name; every pass
run (Sequential included) goes through the instruments of the current `PassContext`, so IR
printing and timing need no change to the passes themselves.

Example:
    >>> from kiln.graph.transform import PassContext, Sequential, FoldConstant, PrintIR
    >>> with PassContext(opt_level=3, instruments=[PrintIR(["FoldConstant"])]):  # doctest: +SKIP
    ...     mod = Sequential([FoldConstant()])(mod)
"""
from __future__ import annotations

from ...timings import phase

import contextvars
import inspect
from dataclasses import dataclass
from typing import Callable

from ..expr import Function
from ..module import IRModule


@dataclass(frozen=True)
class PassInfo:
    """What the context needs to know about a pass: its name, the opt_level it belongs to, and
    the target keys it is for (empty: every target; ("cpu",): only targets with that key, such
    as the CPU layout passes, which a GPU target skips)."""

    name: str
    opt_level: int = 0
    target_keys: tuple = ()


# ---------------------------------------------------------------------------------------------
# Configuration keys: PassContext(config={...}) only accepts keys a pass has declared, so a typo
# is an error instead of a silently ignored option.

@dataclass(frozen=True)
class _ConfigKey:
    default: object
    type: type
    doc: str


_CONFIG_KEYS: dict[str, _ConfigKey] = {}
# Modules written by others that may declare keys; imported only when an unknown key shows up.
_OPTIONAL_CONFIG_MODULES = ("fuse_ops", "memory_plan")


def register_pass_config(key: str, default, type_=None, doc: str = "") -> None:
    """Declare a PassContext config key with its default (call at import of the pass's module).

    Example:
        >>> register_pass_config("MyPass.depth", 4, int, "how deep to look")  # doctest: +SKIP
    """
    existing = _CONFIG_KEYS.get(key)
    if existing is not None and existing.default != default:
        raise ValueError(f"pass config key {key!r} is already declared with default "
                         f"{existing.default!r}")
    _CONFIG_KEYS[key] = _ConfigKey(default, type_ or type(default), doc)


def list_pass_configs() -> dict:
    """Declared config keys → (default, doc)."""
    _import_optional_config_modules()
    return {k: (v.default, v.doc) for k, v in sorted(_CONFIG_KEYS.items())}


def _import_optional_config_modules():
    import importlib
    for name in _OPTIONAL_CONFIG_MODULES:
        try:
            importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__package__}.{name}":
                raise


def _check_config(config: dict) -> dict:
    out = {}
    for key, value in dict(config or {}).items():
        if key not in _CONFIG_KEYS:
            _import_optional_config_modules()
        spec = _CONFIG_KEYS.get(key)
        if spec is None:
            raise KeyError(f"unknown pass config key {key!r}; known keys: "
                           f"{', '.join(sorted(_CONFIG_KEYS)) or '(none)'}")
        if spec.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, spec.type):
            raise TypeError(f"pass config {key!r} must be {spec.type.__name__}, got "
                            f"{type(value).__name__} {value!r}")
        out[key] = value
    return out


# ---------------------------------------------------------------------------------------------
# Instruments

class PassInstrument:
    """Hooks around every pass run inside a PassContext; subclass and override what you need.

    Example:
        >>> class CountPasses(PassInstrument):
        ...     def __init__(self): self.n = 0
        ...     def run_after_pass(self, mod, info): self.n += 1
    """

    def enter_pass_ctx(self):
        """Called when the PassContext holding this instrument is entered."""

    def exit_pass_ctx(self):
        """Called when that PassContext is left."""

    def should_run(self, mod, info: PassInfo) -> bool:
        """Return False to skip the pass (checked before run_before_pass)."""
        return True

    def run_before_pass(self, mod, info: PassInfo):
        """Called with the module a pass is about to transform."""

    def run_after_pass(self, mod, info: PassInfo):
        """Called with the module a pass returned."""

    def run_failed_pass(self, mod, info: PassInfo, error: BaseException):
        """Called instead of run_after_pass when the pass raised."""


class PrintIR(PassInstrument):
    """Print the module before and/or after the named passes (all passes when pass_names is None).

    Example:
        >>> with PassContext(instruments=[PrintIR(["FoldConstant"], before=True)]):  # doctest: +SKIP
        ...     FoldConstant()(mod)
    """

    def __init__(self, pass_names=None, before: bool = False, after: bool = True, file=None):
        if isinstance(pass_names, str):
            pass_names = [pass_names]
        self.pass_names = None if pass_names is None else frozenset(pass_names)
        self.before, self.after = before, after
        self.file = file

    def _selected(self, info):
        return self.pass_names is None or info.name in self.pass_names

    def _print(self, when, mod, info):
        import sys
        print(f"# IR {when} {info.name}:\n{mod!r}", file=self.file or sys.stdout)

    def run_before_pass(self, mod, info):
        if self.before and self._selected(info):
            self._print("before", mod, info)

    def run_after_pass(self, mod, info):
        if self.after and self._selected(info):
            self._print("after", mod, info)


class PassTimingInstrument(PassInstrument):
    """Time every pass; nested passes (inside a Sequential) are indented under their parent.

    Example:
        >>> timing = PassTimingInstrument()
        >>> with PassContext(instruments=[timing]):  # doctest: +SKIP
        ...     mod = Sequential([FoldConstant(), SimplifyExpr()])(mod)
        >>> print(timing.report())  # doctest: +SKIP
    """

    def __init__(self):
        self.records: list = []      # (name, seconds, depth) in the order the passes finished
        self._stack: list = []

    def run_before_pass(self, mod, info):
        import time
        self._stack.append(time.perf_counter())

    def run_after_pass(self, mod, info):
        import time
        start = self._stack.pop()
        self.records.append((info.name, time.perf_counter() - start, len(self._stack)))

    def run_failed_pass(self, mod, info, error):
        self.run_after_pass(mod, info)

    def totals(self) -> dict:
        """Seconds per pass name, summed over runs (nested passes counted under their name)."""
        out: dict = {}
        for name, seconds, _ in self.records:
            out[name] = out.get(name, 0.0) + seconds
        return out

    def report(self) -> str:
        """One line per pass run, parents before their children, times in milliseconds."""
        lines, pending = [], []
        # records finish children-first; rebuild the tree so a parent prints above its children
        for name, seconds, depth in self.records:
            children = []
            while pending and pending[-1][2] > depth:
                children.append(pending.pop())
            pending.append((name, seconds, depth, list(reversed(children))))
        def emit(node):
            name, seconds, depth, children = node
            lines.append(f"{'  ' * depth}{name}: {seconds * 1e3:.3f} ms")
            for c in children:
                emit(c)
        for node in pending:
            emit(node)
        return "\n".join(lines)

    def clear(self):
        self.records.clear()


class VerifyIR(PassInstrument):
    """Re-check every function's types and variable binding after each pass (debug mode).

    Example:
        >>> with PassContext(instruments=[VerifyIR()]):  # doctest: +SKIP
        ...     mod = Sequential(passes)(mod)
    """

    def run_after_pass(self, mod, info):
        from .infer_type import check_module
        check_module(mod, after_pass=info.name)


# ---------------------------------------------------------------------------------------------
# PassContext

_CURRENT: contextvars.ContextVar = contextvars.ContextVar("kiln_pass_context", default=None)
_DEFAULT = None


class PassContext:
    """Options every pass sees: opt_level, disabled and required passes, instruments, config.

    Passes above opt_level, or named in disabled_pass, are skipped by Sequential (a pass called
    directly always runs); required_pass names run whatever their level.

    Example:
        >>> with PassContext(opt_level=3, disabled_pass=["EliminateCommonSubexpr"]):
        ...     assert PassContext.current().opt_level == 3
    """

    def __init__(self, opt_level: int = 2, disabled_pass=(), instruments=(), config=None,
                 required_pass=()):
        if not isinstance(opt_level, int) or opt_level < 0:
            raise ValueError(f"opt_level must be a non-negative int, got {opt_level!r}")
        self.opt_level = opt_level
        self.disabled_pass = frozenset(_names(disabled_pass, "disabled_pass"))
        self.required_pass = frozenset(_names(required_pass, "required_pass"))
        self.instruments = tuple(instruments)
        for inst in self.instruments:
            if not isinstance(inst, PassInstrument):
                raise TypeError(f"instruments must be PassInstrument objects, got {inst!r}")
        self.config = _check_config(config)
        self._tokens: list = []
        self._owns_instruments = True

    def derive(self, **changes) -> "PassContext":
        """A copy with some settings changed; its instruments are this context's, already
        entered, so entering the copy does not call their enter/exit hooks again.

        Example:
            >>> with PassContext.current().derive(opt_level=3):
            ...     pass
        """
        settings = {"opt_level": self.opt_level, "disabled_pass": self.disabled_pass,
                    "instruments": self.instruments, "config": self.config,
                    "required_pass": self.required_pass}
        unknown = sorted(set(changes) - set(settings))
        if unknown:
            raise TypeError(f"PassContext has no setting(s) {unknown}")
        ctx = PassContext(**{**settings, **changes})
        ctx._owns_instruments = "instruments" in changes
        return ctx

    @staticmethod
    def current() -> "PassContext":
        """The innermost entered context, or a default PassContext() outside any `with`."""
        ctx = _CURRENT.get()
        if ctx is None:
            global _DEFAULT
            if _DEFAULT is None:
                _DEFAULT = PassContext()
            ctx = _DEFAULT
        return ctx

    @staticmethod
    def entered() -> "PassContext | None":
        """The innermost context a `with` entered, or None (kiln.compile then uses opt_level 3)."""
        return _CURRENT.get()

    def __enter__(self):
        self._tokens.append(_CURRENT.set(self))
        if self._owns_instruments:
            for inst in self.instruments:
                inst.enter_pass_ctx()
        return self

    def __exit__(self, *exc):
        try:
            if self._owns_instruments:
                for inst in self.instruments:
                    inst.exit_pass_ctx()
        finally:
            _CURRENT.reset(self._tokens.pop())
        return False

    def get_config(self, key: str, default=None):
        """The configured value of a declared key, else its declared default.

        Example:
            >>> PassContext().get_config("FoldConstant.max_growth")
            4.0
        """
        if key in self.config:
            return self.config[key]
        spec = _CONFIG_KEYS.get(key)
        if spec is None:
            if default is not None:
                return default
            raise KeyError(f"unknown pass config key {key!r}")
        return spec.default

    def pass_enabled(self, info: PassInfo) -> bool:
        """Whether Sequential runs a pass with this info under this context."""
        if info.name in self.required_pass:
            return True
        if info.name in self.disabled_pass:
            return False
        if info.target_keys:
            from ...target import current_target
            if not set(info.target_keys) & set(current_target().keys):
                return False
        return info.opt_level <= self.opt_level

    def run_pass(self, p: "Pass", mod: IRModule) -> IRModule:
        """Run one pass with this context's instruments around it."""
        info = p.info
        if not isinstance(mod, IRModule):
            raise TypeError(f"pass {info.name} takes an IRModule, got {type(mod).__name__}")
        if not all(inst.should_run(mod, info) for inst in self.instruments):
            return mod
        for inst in self.instruments:
            inst.run_before_pass(mod, info)
        try:
            with phase(f"graph.{info.name}"):
                out = p.transform(mod, self)
            if not isinstance(out, IRModule):
                raise TypeError(f"pass {info.name} returned {type(out).__name__}, not an IRModule")
        except BaseException as err:
            for inst in self.instruments:
                inst.run_failed_pass(mod, info, err)
            if not any(f"in pass {info.name}" in n for n in getattr(err, "__notes__", ())):
                err.add_note(f"(raised in pass {info.name})")
            raise
        for inst in self.instruments:
            inst.run_after_pass(out, info)
        return out


def _names(values, what):
    if isinstance(values, str):
        values = [values]
    out = list(values)
    for v in out:
        if not isinstance(v, str):
            raise TypeError(f"{what} takes pass names (str), got {v!r}")
    return out


# ---------------------------------------------------------------------------------------------
# Passes

class Pass:
    """Base of all passes: `p(mod)` runs it under PassContext.current() with its instruments.
    Subclass it with an `info` and a `transform(mod, ctx)`, or wrap a function (ModulePass,
    FunctionPass, module_pass, function_pass).

    Example:
        >>> class Noop(Pass):
        ...     info = PassInfo("Noop", opt_level=1)
        ...     def transform(self, mod, ctx):
        ...         return mod
    """

    info: PassInfo

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def opt_level(self) -> int:
        return self.info.opt_level

    def __call__(self, mod: IRModule) -> IRModule:
        return PassContext.current().run_pass(self, mod)

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}({self.info.name!r}, opt_level={self.info.opt_level})"


def _adapt(fn: Callable, n_full: int) -> Callable:
    """Let pass functions take only the leading arguments they need: fn(mod) or fn(mod, ctx)."""
    try:
        signature = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return fn
    params = [p for p in signature if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in signature)
    if variadic or len(params) >= n_full:
        return fn
    k = len(params)
    return lambda *args: fn(*args[:k])


class ModulePass(Pass):
    """A pass given the whole module: fn(mod) or fn(mod, ctx) → IRModule.

    Example:
        >>> p = ModulePass(lambda mod: mod, opt_level=0, name="Identity")
    """

    def __init__(self, fn: Callable, opt_level: int = 0, name: str | None = None,
                 target_keys: tuple = ()):
        self.fn = fn
        self._call = _adapt(fn, 2)
        self.info = PassInfo(name or getattr(fn, "__name__", "ModulePass"), opt_level,
                             tuple(target_keys))

    def transform(self, mod, ctx):
        return self._call(mod, ctx)


class FunctionPass(Pass):
    """A pass applied to each function of a module: fn(func) / fn(func, mod) / fn(func, mod, ctx).

    Functions marked Primitive (fused kernels) or Compiler (external code) are left alone.

    Example:
        >>> p = FunctionPass(lambda f: f, opt_level=0, name="Identity")
    """

    def __init__(self, fn: Callable, opt_level: int = 0, name: str | None = None,
                 target_keys: tuple = ()):
        self.fn = fn
        self._call = _adapt(fn, 3)
        self.info = PassInfo(name or getattr(fn, "__name__", "FunctionPass"), opt_level,
                             tuple(target_keys))

    def transform(self, mod, ctx):
        out, changed = IRModule(), False
        for gname, func in mod.items():
            if func.attrs.get("Primitive") or func.attrs.get("Compiler"):
                out[gname] = func
                continue
            new = self._call(func, mod, ctx)
            if not isinstance(new, Function):
                raise TypeError(f"function pass {self.info.name} returned "
                                f"{type(new).__name__} for @{gname}, not a Function")
            out[gname] = new
            changed = changed or new is not func
        return out if changed else mod

    def apply(self, mod_or_func):
        """This pass on an IRModule (as calling it does), or on one Function: what the
        function forms of passes (annotate_target(mod_or_func, ...)) take. On a Function it
        runs whatever the PassContext says (as calling a pass's function directly does).

        Example:
            >>> f2 = MergeCompilerRegions().apply(f)   # doctest: +SKIP
        """
        if isinstance(mod_or_func, IRModule):
            return self(mod_or_func)
        if not isinstance(mod_or_func, Function):
            raise TypeError(f"{self.info.name} takes an IRModule or a Function, got "
                            f"{type(mod_or_func).__name__}")
        return self._call(mod_or_func, IRModule.from_expr(mod_or_func),
                          PassContext.entered() or PassContext())


class Sequential(Pass):
    """Run passes in order, each only if the context enables it (opt_level, disabled, required).

    Example:
        >>> seq = Sequential([SimplifyInference(), FoldConstant()])  # doctest: +SKIP
        >>> with PassContext(opt_level=3):  # doctest: +SKIP
        ...     mod = seq(mod)
    """

    def __init__(self, passes, opt_level: int = 0, name: str = "Sequential"):
        self.passes = list(passes)
        for p in self.passes:
            if not isinstance(p, Pass):
                raise TypeError(f"Sequential takes passes, got {p!r}")
        self.info = PassInfo(name, opt_level)

    def transform(self, mod, ctx):
        for p in self.passes:
            if ctx.pass_enabled(p.info):
                mod = ctx.run_pass(p, mod)
        return mod


def _decorator(cls, opt_level, name):
    if callable(opt_level):          # used bare: @module_pass
        return cls(opt_level, 0, name)
    return lambda f: cls(f, opt_level, name)


def module_pass(opt_level: int = 0, name: str | None = None):
    """Decorator making a ModulePass from fn(mod[, ctx]); usable bare or with arguments.

    Example:
        >>> @module_pass(opt_level=1, name="Noop")
        ... def noop(mod):
        ...     return mod
    """
    return _decorator(ModulePass, opt_level, name)


def function_pass(opt_level: int = 0, name: str | None = None):
    """Decorator making a FunctionPass from fn(func[, mod[, ctx]]); usable bare or with arguments.

    Example:
        >>> @function_pass(opt_level=1)
        ... def keep(func):
        ...     return func
    """
    return _decorator(FunctionPass, opt_level, name)

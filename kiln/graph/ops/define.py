"""The repeated forms of operator registration, and the glue to kiln.topi.

Every graph operator lowers through a compute hook `compute(attrs, inputs, out_type)` that
returns a list of te.Tensors, and a schedule per target `schedule(attrs, outs, target=None)`
that returns a te.Schedule for the outputs of a fused group whose master op this is. Both
call into kiln.topi; the topi function is looked up when the hook first runs (`TopiRef`), so
the registry imports without the operator library and a missing topi function is reported
by name when an op is lowered, not when kiln starts.

Example:
    >>> unary("nn.relu", "elemwise:relu", doc="max(x, 0)")   # doctest: +SKIP
    >>> binary("add", "broadcast:add", doc="a + b")           # doctest: +SKIP
"""
from __future__ import annotations

import importlib

from ..op import OpPattern, register_default_schedule, register_op
from .relations import broadcast, broadcast_bool, broadcast_float, identity, unary_float


class LoweringError(NotImplementedError):
    """An operator whose compute or schedule kiln.topi does not provide (yet)."""


class TopiRef:
    """A kiln.topi function named "module:function" (module relative to kiln.topi),
    resolved on first call.

    Example:
        >>> relu = TopiRef("elemwise:relu")
        >>> y = relu(te.placeholder((4,), name="x"))   # doctest: +SKIP
    """

    def __init__(self, path: str):
        module, sep, name = path.partition(":")
        if not sep:
            raise ValueError(f"topi path {path!r} must look like 'module:function'")
        self.module, self.name, self._fn = module, name, None

    def resolve(self):
        if self._fn is None:
            modname = f"kiln.topi.{self.module}"
            try:
                module = importlib.import_module(modname)
            except ModuleNotFoundError as err:
                if err.name and modname.startswith(err.name):
                    raise LoweringError(f"kiln.topi has no module {self.module!r} "
                                        f"(needed for {self.name})") from None
                raise
            fn = getattr(module, self.name, None)
            if fn is None:
                raise LoweringError(f"kiln.topi.{self.module} has no function {self.name!r}")
            self._fn = fn
        return self._fn

    @property
    def available(self) -> bool:
        """True when the topi function exists (importable now)."""
        try:
            self.resolve()
        except LoweringError:
            return False
        return True

    def __call__(self, *args, **kwargs):
        return self.resolve()(*args, **kwargs)

    def __repr__(self):
        return f"topi.{self.module}.{self.name}"


def as_list(result) -> list:
    """A compute's result (one tensor or several) as a list."""
    return list(result) if isinstance(result, (list, tuple)) else [result]


def topi_compute(path: str, kwargs=None):
    """A compute hook calling topi `path` with the inputs as positional arguments and
    `kwargs(attrs, out_type)` (a dict) as keywords.

    Example:
        >>> topi_compute("elemwise:leaky_relu", lambda a, t: {"alpha": a.alpha})  # doctest: +SKIP
    """
    ref = TopiRef(path)

    def compute(attrs, inputs, out_type):
        extra = kwargs(attrs, out_type) if kwargs is not None else {}
        return as_list(ref(*inputs, **extra))

    compute.topi = ref
    return compute


def topi_schedule(path: str):
    """A schedule hook calling topi `path` with the group's output tensors.

    Example:
        >>> topi_schedule("x86.injective:schedule_injective")  # doctest: +SKIP
    """
    ref = TopiRef(path)

    def schedule(attrs, outs, target=None):
        return ref(list(outs))

    schedule.topi = ref
    return schedule


register_default_schedule("gpu", topi_schedule("gpu:schedule_generic"))
INJECTIVE = {"cpu": topi_schedule("x86.injective:schedule_injective")}
REDUCE = {"cpu": topi_schedule("x86.reduction:schedule_reduce"),
          "gpu": topi_schedule("gpu.reduction:schedule_reduce")}


def cpu(path: str) -> dict:
    """The schedules table of an op with one x86 schedule: {"cpu": hook}.

    Example:
        >>> cpu("x86.dense:schedule_dense")  # doctest: +SKIP
    """
    return {"cpu": topi_schedule(path)}


def unary(name: str, topi_path: str, *, float_only: bool = False, attrs=None, kwargs=None,
          type_rel=None, doc: str = ""):
    """Register a one-input elementwise op (ELEMWISE pattern, injective schedule).

    Example:
        >>> unary("exp", "elemwise:exp", float_only=True, doc="e ** x")  # doctest: +SKIP
    """
    rel = type_rel or (unary_float if float_only else identity)
    return register_op(name, type_rel=rel, pattern=OpPattern.ELEMWISE, num_inputs=1,
                       attrs=attrs, compute=topi_compute(topi_path, kwargs),
                       schedules=INJECTIVE, doc=doc or f"{name}(x), elementwise")


def binary(name: str, topi_path: str, *, float_only: bool = False, bool_out: bool = False,
           doc: str = ""):
    """Register a two-input op with NumPy broadcasting (BROADCAST pattern, injective schedule).

    Example:
        >>> binary("less", "broadcast:less", bool_out=True)  # doctest: +SKIP
    """
    rel = broadcast_bool if bool_out else broadcast_float if float_only else broadcast
    return register_op(name, type_rel=rel, pattern=OpPattern.BROADCAST, num_inputs=2,
                       compute=topi_compute(topi_path), schedules=INJECTIVE,
                       doc=doc or f"{name}(a, b) with NumPy broadcasting")


def injective(name: str, type_rel, topi_path: str, *, attrs=None, kwargs=None, num_inputs=1,
              doc: str = ""):
    """Register an index-remapping op (INJECTIVE pattern, injective schedule).

    Example:
        >>> injective("transpose", rel, "transform:transpose", attrs={"axes": None})  # doctest: +SKIP
    """
    return register_op(name, type_rel=type_rel, pattern=OpPattern.INJECTIVE,
                       num_inputs=num_inputs, attrs=attrs, compute=topi_compute(topi_path, kwargs),
                       schedules=INJECTIVE, doc=doc)


def reduction(name: str, type_rel, topi_path: str, *, attrs, kwargs, doc: str = ""):
    """Register a reduction (COMM_REDUCE pattern, reduce schedule).

    Example:
        >>> reduction("sum", rel, "reduction:sum", attrs={...}, kwargs=...)  # doctest: +SKIP
    """
    return register_op(name, type_rel=type_rel, pattern=OpPattern.COMM_REDUCE, num_inputs=1,
                       attrs=attrs, compute=topi_compute(topi_path, kwargs), schedules=REDUCE,
                       doc=doc)

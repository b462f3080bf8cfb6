"""The signature of a compiled function, as plain JSON-serializable data.

A code generator describes each function it emits with a FunctionInfo; the runtime checks call
arguments against it and packs them into the native calling convention:

    typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;
    int32_t name(KilnValue* args, int32_t num_args);

args = the params in order (buffer: data pointer; integer or bool scalar: v_int64; float
scalar: v_float64), then the values of `shape_vars` (v_int64). 0 means success.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from . import _dtype, symbolic

PARAM_KINDS = ("buffer", "scalar")
SHAPE_VAR_DTYPES = ("int32", "int64")


@dataclass(frozen=True)
class ParamInfo:
    """One parameter: a buffer (dtype + shape; a str extent names a symbolic size) or a scalar.

    Example:
        >>> ParamInfo("A", "buffer", "float32", ("n", 4)).shape
        ('n', 4)
    """

    name: str
    kind: str
    dtype: str
    shape: tuple = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"parameter name must be a non-empty string, got {self.name!r}")
        if self.kind not in PARAM_KINDS:
            raise ValueError(f"parameter {self.name!r}: kind must be 'buffer' or 'scalar', "
                             f"got {self.kind!r}")
        object.__setattr__(self, "dtype", _dtype.canonical(self.dtype))
        shape = tuple(self.shape)
        if self.kind == "scalar" and shape:
            raise ValueError(f"scalar parameter {self.name!r} cannot have a shape {shape}")
        for extent in shape:
            symbolic = isinstance(extent, str) and extent
            constant = isinstance(extent, int) and not isinstance(extent, bool) and extent >= 0
            if not (symbolic or constant):
                raise ValueError(f"parameter {self.name!r}: extent {extent!r} must be a "
                                 f"non-negative int or a symbolic size name")
        object.__setattr__(self, "shape", shape)

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "dtype": self.dtype,
                "shape": list(self.shape)}

    @staticmethod
    def from_dict(data: dict) -> "ParamInfo":
        return ParamInfo(data["name"], data["kind"], data["dtype"], tuple(data.get("shape", ())))


@dataclass(frozen=True)
class FunctionInfo:
    """A compiled function's name, parameters and symbolic sizes (bound from buffer shapes).

    Example:
        >>> info = FunctionInfo("vadd", (ParamInfo("A", "buffer", "float32", ("n",)),),
        ...                     (("n", "int64"),))
        >>> FunctionInfo.from_json(info.to_json()) == info
        True
    """

    name: str
    params: tuple = ()
    shape_vars: tuple = field(default=())
    # symbolic size -> (low, high or None): the range the code was compiled for, which a call
    # must respect (the kernel's analysis assumed it: a temporary may be sized by `high`)
    bounds: dict = field(default_factory=dict, compare=True, hash=False)
    # size expressions (over shape_vars and integer parameters) that must be >= 0 for a call
    # to stay within its buffers: a slice at a size argument
    checks: tuple = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"function name must be a non-empty string, got {self.name!r}")
        params = tuple(p if isinstance(p, ParamInfo) else ParamInfo.from_dict(p)
                       for p in self.params)
        shape_vars = tuple((str(n), _shape_var_dtype(self.name, n, d)) for n, d in self.shape_vars)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "shape_vars", shape_vars)
        bounds = {str(n): (int(lo), None if hi is None else int(hi))
                  for n, (lo, hi) in dict(self.bounds).items()}
        ints = {p.name for p in params if p.kind == "scalar" and "int" in p.dtype}
        unknown = sorted(set(bounds) - {n for n, _ in shape_vars} - ints)
        if unknown:
            raise ValueError(f"function {self.name!r}: bounds name {unknown}, which are not "
                             f"shape_vars or integer parameters")
        checks = tuple(str(c) for c in self.checks)
        for c in checks:
            try:
                named = symbolic.names(c)
            except symbolic.DimError as err:
                raise ValueError(f"function {self.name!r}: check {c!r}: {err}") from None
            stray = sorted(named - {n for n, _ in shape_vars} - ints)
            if stray:
                raise ValueError(f"function {self.name!r}: check {c!r} names {stray}, which "
                                 f"are not shape_vars or integer parameters")
        object.__setattr__(self, "checks", checks)
        object.__setattr__(self, "bounds", bounds)
        self._validate()

    def _validate(self):
        names = [p.name for p in self.params]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"function {self.name!r}: parameter names repeat: {duplicates}")
        declared = [n for n, _ in self.shape_vars]
        if len(set(declared)) != len(declared):
            raise ValueError(f"function {self.name!r}: shape_vars repeat a name: {declared}")
        extents = {e for p in self.params for e in p.shape if isinstance(e, str)}
        plain = {e for e in extents if e.isidentifier()}
        # an extent may be an expression of the sizes (kiln.runtime.symbolic), checked once
        # they are bound by extents that are names alone
        used = set(plain)
        for e in extents - plain:
            try:
                used |= symbolic.names(e)
            except symbolic.DimError as err:
                raise ValueError(f"function {self.name!r}: {err}") from None
        undeclared = sorted(used - set(declared))
        if undeclared:
            raise ValueError(f"function {self.name!r}: symbolic sizes {undeclared} appear in "
                             f"buffer shapes but not in shape_vars")
        unbound = sorted(set(declared) - plain)
        if unbound:
            raise ValueError(f"function {self.name!r}: shape_vars {unbound} are no buffer "
                             f"dimension by themselves, so no call can bind them")

    def to_dict(self) -> dict:
        out = {"name": self.name, "params": [p.to_dict() for p in self.params],
               "shape_vars": [list(v) for v in self.shape_vars]}
        if self.bounds:
            out["bounds"] = {n: list(b) for n, b in self.bounds.items()}
        if self.checks:
            out["checks"] = list(self.checks)
        return out

    @staticmethod
    def from_dict(data: dict) -> "FunctionInfo":
        return FunctionInfo(data["name"], tuple(ParamInfo.from_dict(p) for p in data["params"]),
                            tuple(tuple(v) for v in data.get("shape_vars", ())),
                            {n: tuple(b) for n, b in data.get("bounds", {}).items()},
                            tuple(data.get("checks", ())))

    def to_json(self) -> str:
        """This signature as a JSON string."""
        return json.dumps(self.to_dict())

    @staticmethod
    def from_json(text) -> "FunctionInfo":
        """Read a signature from to_json's string (or an already parsed dict)."""
        return FunctionInfo.from_dict(json.loads(text) if isinstance(text, str) else text)

    def signature(self) -> str:
        """A readable signature, used in error messages.

        Example:
            >>> FunctionInfo("f", (ParamInfo("x", "scalar", "int32"),)).signature()
            'f(x: int32)'
        """
        parts = []
        for p in self.params:
            if p.kind == "scalar":
                parts.append(f"{p.name}: {p.dtype}")
            else:
                parts.append(f"{p.name}: {p.dtype}[{', '.join(map(str, p.shape))}]")
        return f"{self.name}({', '.join(parts)})"


def _shape_var_dtype(function: str, name, dtype) -> str:
    if dtype not in SHAPE_VAR_DTYPES:
        raise ValueError(f"function {function!r}: shape var {name!r} has dtype {dtype!r}; "
                         f"symbolic sizes are int32 or int64")
    return dtype

"""A compiled VDLA function: its program, and how its arguments map to DRAM regions. Calling
it runs the simulator; the last run's statistics stay on the module.

It has the interface of kiln's other runtime modules (entry, function_info, get_function,
time_evaluator, to_dict / from_dict), so the tuner builds, saves, loads and measures a VDLA
candidate as it does a GPU one; its time is the simulated time (cycles at the configured
clock), not the host's.

Example:
    >>> f = kiln.build(s, [A, W, C], target="vdla")   # doctest: +SKIP
    >>> f(a, w, c); print(f.stats)                    # doctest: +SKIP
"""
from __future__ import annotations

import json

import numpy as np

from ...runtime.function_info import FunctionInfo, ParamInfo
from ...runtime.timing import TimingResult
from .isa import Program, VDLAProgramError
from .sim import simulate


class VDLAModule:
    """Arguments are numpy arrays (or kiln NDArrays) of the function's argument shapes, in
    order; regions an instruction writes (out) are copied back into them."""

    type_key = "vdla"
    deterministic_timing = True     # simulated cycles: no warm-up, one run per measurement

    def __init__(self, name: str, program: Program, args):
        self.name, self.program = name, program
        self.args = tuple((n, tuple(shape), dtype) for n, shape, dtype in args)
        self.stats = None

    def __repr__(self):
        return f"VDLAModule({self.name}: {len(self.program.instructions)} instructions)"

    # ------------------------------------------------------------------ module interface
    @property
    def entry(self) -> str:
        return self.name

    def function_names(self) -> list[str]:
        return [self.name]

    def function_info(self, name: str) -> FunctionInfo:
        """The signature of the module's one function (every parameter a buffer)."""
        self._require(name)
        return FunctionInfo(self.name, tuple(ParamInfo(n, "buffer", d, s)
                                             for n, s, d in self.args))

    def get_function(self, name: str):
        self._require(name)
        return self

    def time_evaluator(self, name: str, number: int = 1, repeat: int = 1,
                       min_repeat_ms: float = 0):
        """f(*args) -> TimingResult of simulated seconds per call (cycles / clock). The cycle
        model is deterministic, so one simulated run gives all `repeat` entries; `number` and
        `min_repeat_ms` (host-time notions) do not apply.

        Example:
            >>> f.time_evaluator(f.entry, repeat=3)(a, w, c).median   # doctest: +SKIP
            0.000731
        """
        self._require(name)

        def evaluate(*arrays) -> TimingResult:
            return TimingResult((self(*arrays).seconds,) * repeat)

        return evaluate

    def _require(self, name: str) -> None:
        if name != self.name:
            raise KeyError(f"VDLA module has no function {name!r}; it has {self.name!r}")

    def get_source(self, fmt: str = "") -> str:
        """The program as text (also for fmt "asm"), or as JSON with fmt "json"."""
        return self.program.to_json() if fmt == "json" else str(self.program)

    def __call__(self, *arrays):
        if len(arrays) != len(self.args):
            raise TypeError(f"{self.name} takes {len(self.args)} arguments "
                            f"({', '.join(a[0] for a in self.args)}), got {len(arrays)}")
        dram, views = {}, []
        for (name, shape, dtype), a in zip(self.args, arrays):
            host = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else a
            if tuple(host.shape) != shape or str(host.dtype) != dtype:
                raise TypeError(f"argument '{name}' must be {dtype} {shape}, got "
                                f"{host.dtype} {tuple(host.shape)}")
            if name not in self.program.regions:
                continue
            region = self.program.region_array(name)
            region[...] = np.asarray(host).reshape(region.shape)
            dram[name] = region
            views.append((name, a))
        stats = self.stats = simulate(self.program, dram)
        for name, a in views:
            if self.program.regions[name][0] == "out":
                result = dram[name].reshape(a.shape)
                if isinstance(a, np.ndarray):
                    a[...] = result
                else:
                    a.copyfrom(result)
        return stats          # (self.stats may be another thread's run by now)

    # ------------------------------------------------------------------ saving
    def to_dict(self) -> dict:
        """The module as JSON-able data (no pickle): name, argument shapes, program."""
        return {"name": self.name, "args": [list(a) for a in self.args],
                "program": json.loads(self.program.to_json())}

    @staticmethod
    def from_dict(data: dict) -> "VDLAModule":
        """The module to_dict described; a malformed description is a VDLAProgramError."""
        try:
            program = Program.from_json(json.dumps(data["program"]))
            args = [(str(n), tuple(int(x) for x in s), str(d)) for n, s, d in data["args"]]
            return VDLAModule(str(data["name"]), program, args)
        except (KeyError, TypeError, ValueError) as err:
            if isinstance(err, VDLAProgramError):
                raise
            raise VDLAProgramError(f"not a VDLA module description ({type(err).__name__}: "
                                   f"{err})") from err

    def save(self, path) -> None:
        """Write the module as JSON (to_dict)."""
        with open(path, "w") as fh:
            json.dump(self.to_dict(), fh)

    @staticmethod
    def load(path) -> "VDLAModule":
        try:
            with open(path) as fh:
                data = json.load(fh)
        except (OSError, ValueError) as err:
            raise VDLAProgramError(f"{path}: not a saved VDLA module ({type(err).__name__}: "
                                   f"{err})") from err
        try:
            return VDLAModule.from_dict(data)
        except VDLAProgramError as err:
            raise VDLAProgramError(f"{path}: not a saved VDLA module: {err}") from err

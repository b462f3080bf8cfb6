"""A compiled VDLA function: its program, and how its arguments map to DRAM regions. Calling
it runs the simulator; the last run's statistics stay on the module.

Example:
    >>> f = kiln.build(s, [A, W, C], target="vdla")   # doctest: +SKIP
    >>> f(a, w, c); print(f.stats)                    # doctest: +SKIP
"""
from __future__ import annotations

import json

import numpy as np

from .isa import Program, VDLAProgramError
from .sim import simulate


class VDLAModule:
    """Arguments are numpy arrays (or kiln NDArrays) of the function's argument shapes, in
    order; regions an instruction writes (out) are copied back into them."""

    def __init__(self, name: str, program: Program, args):
        self.name, self.program = name, program
        self.args = tuple((n, tuple(shape), dtype) for n, shape, dtype in args)
        self.stats = None

    def __repr__(self):
        return f"VDLAModule({self.name}: {len(self.program.instructions)} instructions)"

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
        self.stats = simulate(self.program, dram)
        for name, a in views:
            if self.program.regions[name][0] == "out":
                result = dram[name].reshape(a.shape)
                if isinstance(a, np.ndarray):
                    a[...] = result
                else:
                    a.copyfrom(result)
        return self.stats

    def save(self, path) -> None:
        """Write the module as JSON (no pickle): program and argument shapes."""
        with open(path, "w") as fh:
            json.dump({"name": self.name, "args": [list(a) for a in self.args],
                       "program": json.loads(self.program.to_json())}, fh)

    @staticmethod
    def load(path) -> "VDLAModule":
        try:
            with open(path) as fh:
                data = json.load(fh)
            program = Program.from_json(json.dumps(data["program"]))
            args = [(str(n), tuple(int(x) for x in s), str(d)) for n, s, d in data["args"]]
            return VDLAModule(str(data["name"]), program, args)
        except (OSError, KeyError, TypeError, ValueError) as err:
            if isinstance(err, VDLAProgramError):
                raise
            raise VDLAProgramError(f"{path}: not a saved VDLA module ({type(err).__name__}: "
                                   f"{err})") from err

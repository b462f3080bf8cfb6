"""VDLA's instruction set: what the simulated accelerator's load, compute and store modules
execute (docs/vdla.md describes it in full).

The accelerator follows the TVM paper's Fig. 20. A GEMM core multiplies one input vector of
`block_in` int8 by a `block_out` × `block_in` int8 weight block into `block_out` int32
accumulators per micro-op. A vector ALU works on the accumulators. On-chip buffers hold inputs,
weights and accumulators. Three modules run concurrently, each from its own instruction queue:
- LOAD fills the input and weight buffers from DRAM;
- COMPUTE runs GEMM and ALU instructions, and loads to the accumulator buffer (bias);
- STORE writes accumulators back to DRAM, narrowed to int8.

Each instruction can wait for (pop) and signal (push) dependence tokens on the queues between
neighbouring modules; that is how a program lets the modules overlap without racing.

Instructions are immutable, print as one line each, and serialize to JSON (no pickle).

Example:
    >>> print(Load("inp", sram=0, region="x", offset=0, rows=1, cols=4, stride=4,
    ...            deps=Deps(pop_next=True, push_next=True)))
    LOAD inp[0:4] <- x[0 + 1x4, stride 4]  (pop c2l, push l2c)
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import numpy as np

ALU_OPS = ("add", "max", "min", "shr", "mul", "mov")
MODULES = ("load", "compute", "store")


class VDLAProgramError(ValueError):
    """An instruction or program VDLA cannot run: a buffer index out of range, a token flag
    its module has no queue for, a malformed file."""


@dataclass(frozen=True)
class VDLAConfig:
    """The accelerator's parameters: GEMM block, buffer sizes (in entries), DRAM and clock.

    Example:
        >>> VDLAConfig().peak_gops
        102.4
    """
    block_in: int = 16
    block_out: int = 16
    inp_entries: int = 2048          # block_in int8 each: 32 KiB
    wgt_entries: int = 1024          # block_out x block_in int8 each: 256 KiB
    acc_entries: int = 2048          # block_out int32 each: 128 KiB
    dram_bytes_per_cycle: int = 8
    dram_latency: int = 40           # cycles from request to first byte
    gemm_setup: int = 4              # pipeline fill of a GEMM / ALU instruction
    alu_setup: int = 4
    clock_mhz: float = 200.0

    def entry_bytes(self, kind: str) -> int:
        """Bytes of one entry of an on-chip buffer or DRAM region of that kind."""
        return {"inp": self.block_in, "wgt": self.block_out * self.block_in,
                "acc": 4 * self.block_out, "out": self.block_out}[kind]

    def entries(self, buffer: str) -> int:
        return {"inp": self.inp_entries, "wgt": self.wgt_entries, "acc": self.acc_entries}[buffer]

    @property
    def peak_gops(self) -> float:
        """Multiply-adds count two: 2 * block_in * block_out per cycle."""
        return 2 * self.block_in * self.block_out * self.clock_mhz / 1e3


@dataclass(frozen=True)
class Deps:
    """Dependence-token flags: wait for a token from the previous / next module before
    starting, send one to the previous / next module when done."""
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    def describe(self, module: str) -> str:
        names = {"load": (None, "c2l", None, "l2c"), "compute": ("l2c", "s2c", "c2l", "c2s"),
                 "store": ("c2s", None, "s2c", None)}[module]
        parts = [f"{verb} {q}" for verb, flag, q in zip(("pop", "pop", "push", "push"), (
            self.pop_prev, self.pop_next, self.push_prev, self.push_next), names) if flag]
        return f"  ({', '.join(parts)})" if parts else ""


@dataclass(frozen=True)
class Load:
    """DRAM region entries [offset + r * stride + c] for r < rows, c < cols into buffer
    entries [sram + r' * (cols + pad_left + pad_right) + c'], with zero padding rows / columns
    around them (pads are (top, bottom, left, right))."""
    buffer: str
    sram: int
    region: str
    offset: int
    rows: int
    cols: int
    stride: int
    pads: tuple = (0, 0, 0, 0)
    deps: Deps = field(default_factory=Deps)

    @property
    def module(self) -> str:
        return "compute" if self.buffer == "acc" else "load"

    def __str__(self):
        top, bottom, left, right = self.pads
        n = (self.rows + top + bottom) * (self.cols + left + right)
        pad = f", pad {list(self.pads)}" if any(self.pads) else ""
        return (f"LOAD {self.buffer}[{self.sram}:{self.sram + n}] <- {self.region}[{self.offset}"
                f" + {self.rows}x{self.cols}, stride {self.stride}{pad}]{self.deps.describe(self.module)}")


@dataclass(frozen=True)
class Gemm:
    """For each point of `loops` (up to two levels of (extent, acc step, inp step, wgt step)),
    each micro-op (acc, inp, wgt) does acc[a] += wgt[w] · inp[x] (int8 into int32), or
    acc[a] = 0 when `reset`."""
    reset: bool
    uops: tuple
    loops: tuple = ()
    deps: Deps = field(default_factory=Deps)
    module = "compute"

    def __str__(self):
        head = "GEMM reset" if self.reset else "GEMM"
        loops = "".join(f" for[{e}; acc+{a} inp+{x} wgt+{w}]" for e, a, x, w in self.loops)
        uops = " ".join(f"({a},{x},{w})" for a, x, w in self.uops[:4])
        more = f" ... {len(self.uops)} uops" if len(self.uops) > 4 else ""
        return f"{head}{loops} {uops}{more}{self.deps.describe('compute')}"


@dataclass(frozen=True)
class Alu:
    """For each point of `loops` ((extent, dst step, src step), up to two levels) and each
    micro-op (dst, src): acc[dst] = op(acc[dst], acc[src] or imm), int32 lanes; shr is an
    arithmetic shift right, mul wraps, mov copies."""
    op: str
    uops: tuple
    loops: tuple = ()
    imm: int | None = None
    deps: Deps = field(default_factory=Deps)
    module = "compute"

    def __str__(self):
        loops = "".join(f" for[{e}; dst+{d} src+{s}]" for e, d, s in self.loops)
        src = f"imm {self.imm}" if self.imm is not None else "src"
        uops = " ".join(f"({d},{s})" for d, s in self.uops[:4])
        more = f" ... {len(self.uops)} uops" if len(self.uops) > 4 else ""
        return f"ALU {self.op} {src}{loops} {uops}{more}{self.deps.describe('compute')}"


@dataclass(frozen=True)
class Store:
    """Accumulator entries [sram + r * cols + c] narrowed to int8 (their low 8 bits) into
    DRAM region entries [offset + r * stride + c]."""
    sram: int
    region: str
    offset: int
    rows: int
    cols: int
    stride: int
    deps: Deps = field(default_factory=Deps)
    module = "store"

    def __str__(self):
        return (f"STORE acc[{self.sram}:{self.sram + self.rows * self.cols}] -> {self.region}"
                f"[{self.offset} + {self.rows}x{self.cols}, stride {self.stride}]"
                f"{self.deps.describe('store')}")


@dataclass(frozen=True)
class Finish:
    """The end of the program: compute waits for its tokens, then the run ends."""
    deps: Deps = field(default_factory=Deps)
    module = "compute"

    def __str__(self):
        return f"FINISH{self.deps.describe('compute')}"


KINDS = {"load": Load, "gemm": Gemm, "alu": Alu, "store": Store, "finish": Finish}
_NAMES = {cls: name for name, cls in KINDS.items()}


def _tuples(x):
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x


@dataclass(frozen=True)
class Program:
    """An instruction stream and the DRAM regions it uses: name -> (kind, entries), kind one
    of inp / wgt / acc (int32, e.g. bias) / out (int8 results).

    Example:
        >>> p = Program((Finish(),), {"x": ("inp", 4)})
        >>> Program.from_json(p.to_json()) == p
        True
    """
    instructions: tuple
    regions: dict
    config: VDLAConfig = VDLAConfig()

    def __str__(self):
        return "\n".join(f"{k:4d}  {ins}" for k, ins in enumerate(self.instructions))

    def to_json(self) -> str:
        def insn(i):
            d = dataclasses.asdict(i)
            d["kind"] = _NAMES[type(i)]
            return d
        return json.dumps({"config": dataclasses.asdict(self.config),
                           "regions": {k: list(v) for k, v in self.regions.items()},
                           "instructions": [insn(i) for i in self.instructions]})

    @staticmethod
    def from_json(text: str) -> "Program":
        try:
            data = json.loads(text)
            config = VDLAConfig(**data["config"])
            regions = {str(k): (str(v[0]), int(v[1])) for k, v in data["regions"].items()}
            instructions = []
            for d in data["instructions"]:
                d = dict(d)
                cls = KINDS[d.pop("kind")]
                d["deps"] = Deps(**d.get("deps", {}))
                instructions.append(cls(**{k: _tuples(v) for k, v in d.items()}))
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise VDLAProgramError(f"not a VDLA program: {type(err).__name__}: {err}") from err
        return Program(tuple(instructions), regions, config)

    def region_array(self, name: str) -> np.ndarray:
        """A zeroed array shaped for region `name`."""
        kind, n = self.regions[name]
        c = self.config
        shape, dtype = {"inp": ((n, c.block_in), np.int8),
                        "wgt": ((n, c.block_out, c.block_in), np.int8),
                        "acc": ((n, c.block_out), np.int32),
                        "out": ((n, c.block_out), np.int8)}[kind]
        return np.zeros(shape, dtype)

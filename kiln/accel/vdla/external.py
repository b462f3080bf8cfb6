"""VDLA as an external target of a partitioned model: the codegen that turns a region of
requantized int8 convolutions into VDLA programs, and the runtime module that runs them on
the simulator from the graph executor.

A region (a function with {"Compiler": "vdla"}) is a small graph of "vdla.qconv2d" composite
calls (see partition.py): each one conv2d(int8, int8 weights) -> right_shift -> clip -> cast.
Each becomes one program of the `conv2d_int8.vdla` template under target "vdla", so a tuning
log applied around kiln.compile picks its tiling. At run time the region's NCHW inputs are
packed into VDLA's channel blocks once, consecutive convolutions exchange packed tensors (in
DRAM, as the accelerator would), and the outputs are unpacked into the executor's buffers.
Each call leaves the simulator's statistics per convolution in `last_stats` (of the last
call, from whichever thread made it).

Example:
    >>> lib = kiln.compile(partition_for_vdla(mod))             # doctest: +SKIP
    >>> external_modules(lib)[0].last_stats["vdla_main_0"][0]    # doctest: +SKIP
    ('conv 64x56x56 -> 64 k3 s1', RunStats(...))
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import numpy as np

from ...codegen.external import register_external_codegen
from ...graph.expr import Call, Constant, Function, Tuple, Var
from ...graph.visitor import post_order
from ...runtime.external import ExternalModule, register_external_runtime
from ...runtime.function_info import FunctionInfo, ParamInfo
from .conv2d import pack_data, pack_kernel, unpack_output
from .module import VDLAModule

COMPOSITE = "vdla.qconv2d"


class VDLAExternalError(ValueError):
    """A region VDLA cannot run, or a saved VDLA external module that is malformed."""


@dataclass(frozen=True)
class QConv:
    """One requantized convolution of a region, as the VDLA template takes it."""
    batch: int
    channels: int
    height: int
    width: int
    out_channels: int
    kernel: int
    stride: int
    pad: int
    shift: int
    relu: bool

    @property
    def template_args(self) -> list:
        return [self.batch, self.channels, self.height, self.width, self.out_channels,
                self.kernel, self.stride, self.pad, self.shift, self.relu]

    @property
    def label(self) -> str:
        return (f"conv {self.channels}x{self.height}x{self.width} -> {self.out_channels} "
                f"k{self.kernel} s{self.stride}")


def qconv_of(composite: Function) -> tuple[QConv, np.ndarray]:
    """The convolution and OIHW int8 weights of a "vdla.qconv2d" composite function:
    cast(clip(right_shift(nn.conv2d(x, W), shift), low, 127), int8).

    Example:
        >>> qconv_of(call.op)[0].label                             # doctest: +SKIP
        'conv 64x56x56 -> 64 k3 s1'
    """
    cast = composite.body
    clip = cast.args[0]
    shift = clip.args[0]
    conv = shift.args[0]
    weight = conv.args[1]
    if not isinstance(weight, Constant) or not isinstance(shift.args[1], Constant):
        raise VDLAExternalError(f"{COMPOSITE}: the weights and the shift must be constants")
    n, c, h, w = (int(d) for d in conv.args[0].checked_type.shape)
    o, _, k, _ = weight.data.shape
    a = conv.attrs
    return (QConv(n, c, h, w, int(o), int(k), int(a.strides[0]), int(a.padding[0]),
                  int(shift.args[1].data), float(clip.attrs.a_min) == 0.0),
            np.asarray(weight.data))


def _compile_conv(conv: QConv, target) -> VDLAModule:
    from ...autotvm.templates.vdla import conv2d_int8_vdla
    from ...driver import build
    with target:
        s, tensors = conv2d_int8_vdla(*conv.template_args)
        return build(s, tensors, target=target)


class VDLAExternalModule(ExternalModule):
    """Regions compiled for VDLA, by symbol. A region is a list of steps (one convolution:
    its program's index, its packed weights, the values it reads and writes) over numbered
    values: the region's inputs first, then each step's output."""

    type_key = "vdla"

    def __init__(self, functions: dict, programs: list, weights: list):
        self.functions = functions          # symbol -> {"info", "steps", "outputs"}
        self.programs = programs            # VDLAModules
        self.weights = weights              # packed int8 weights
        self.last_stats: dict = {}          # symbol -> [(label, RunStats)] of the last call

    def function_names(self) -> list[str]:
        return list(self.functions)

    def function_info(self, name: str) -> FunctionInfo:
        return self.functions[name]["info"]

    def get_function(self, name: str):
        spec = self.functions[name]
        n_in = len(spec["info"].params) - len(spec["outputs"])

        def run(*arrays):
            values = {k: pack_data(a) for k, a in enumerate(arrays[:n_in])}
            stats = []
            for step in spec["steps"]:
                program = self.programs[step["program"]]
                out_shape = program.args[-1][1]
                y = np.zeros(out_shape, np.int8)
                run_stats = program(values[step["input"]], self.weights[step["weight"]], y)
                values[step["output"]] = y
                stats.append((step["label"], run_stats))
            for out, slot in zip(arrays[n_in:], spec["outputs"]):
                out[...] = unpack_output(values[slot])
            self.last_stats[name] = stats

        return run

    # ------------------------------------------------------------------ saving
    def save_to_bytes(self) -> bytes:
        return json.dumps({
            "functions": {name: {"info": f["info"].to_dict(), "steps": f["steps"],
                                 "outputs": f["outputs"]} for name, f in self.functions.items()},
            "programs": [p.to_dict() for p in self.programs],
            "weights": [{"shape": list(w.shape),
                         "data": base64.b64encode(w.tobytes()).decode("ascii")}
                        for w in self.weights]}).encode()

    @staticmethod
    def load_from_bytes(data: bytes) -> "VDLAExternalModule":
        try:
            d = json.loads(data)
            functions = {name: {"info": FunctionInfo.from_dict(f["info"]), "steps": f["steps"],
                                "outputs": f["outputs"]} for name, f in d["functions"].items()}
            programs = [VDLAModule.from_dict(p) for p in d["programs"]]
            weights = [np.frombuffer(base64.b64decode(w["data"], validate=True),
                                     np.int8).reshape(w["shape"]) for w in d["weights"]]
            for name, f in functions.items():
                _check_steps(name, f, len(programs), len(weights))
        except (KeyError, TypeError, ValueError) as err:
            raise VDLAExternalError(f"not a saved VDLA external module ({type(err).__name__}: "
                                    f"{err})") from err
        return VDLAExternalModule(functions, programs, weights)


def _check_steps(name: str, f: dict, n_programs: int, n_weights: int) -> None:
    """A ValueError unless every step of function `name` names a program, weights and values
    that exist (inputs, or outputs of earlier steps)."""
    n_in = len(f["info"].params) - len(f["outputs"])
    known = set(range(n_in))
    for k, step in enumerate(f["steps"]):
        if not (0 <= step["program"] < n_programs and 0 <= step["weight"] < n_weights
                and step["input"] in known and step["output"] not in known):
            raise ValueError(f"{name}: step {k} refers to a program, weights or value that "
                             f"does not exist")
        known.add(step["output"])
    if n_in < 0 or not all(slot in known for slot in f["outputs"]):
        raise ValueError(f"{name}: an output is no step's")




def vdla_codegen(func: Function, symbol: str, target) -> VDLAExternalModule:
    """The external codegen registered for compiler "vdla": the region `func` as one VDLA
    external module with function `symbol`. Identical convolutions share one program.

    Example:
        >>> vdla_codegen(mod["vdla_main_0"], "vdla_main_0", Target("llvm")).function_names()  # doctest: +SKIP
        ['vdla_main_0']
    """
    from ...target import Target
    vdla = Target("vdla")
    slot = {p: k for k, p in enumerate(func.params)}
    programs, by_conv, weights, steps = [], {}, [], []
    for node in post_order(func.body, enter_functions=False):
        if isinstance(node, (Var, Constant, Function)) or node in slot:
            continue
        if isinstance(node, Tuple):
            continue
        composite = node.op if isinstance(node, Call) and isinstance(node.op, Function) else None
        if composite is None or composite.attrs.get("Composite") != COMPOSITE:
            raise VDLAExternalError(f"{symbol}: VDLA runs only {COMPOSITE} composites, not "
                                    f"{getattr(node, 'op', type(node).__name__)!s:.80}")
        (arg,) = node.args
        if arg not in slot:
            raise VDLAExternalError(f"{symbol}: a {COMPOSITE} reads a value VDLA did not make")
        conv, weight = qconv_of(composite)
        if conv not in by_conv:
            by_conv[conv] = len(programs)
            programs.append(_compile_conv(conv, vdla))
        slot[node] = len(slot)
        weights.append(pack_kernel(weight))
        steps.append({"program": by_conv[conv], "weight": len(weights) - 1, "input": slot[arg],
                      "output": slot[node], "label": conv.label})
    results = func.body.fields if isinstance(func.body, Tuple) else (func.body,)
    if any(r not in slot or r in func.params for r in results):
        raise VDLAExternalError(f"{symbol}: every output of a VDLA region must be a "
                                f"convolution's")
    params = [ParamInfo(f"in{k}", "buffer", p.checked_type.dtype, tuple(p.checked_type.shape))
              for k, p in enumerate(func.params)]
    params += [ParamInfo(f"out{k}", "buffer", r.checked_type.dtype, tuple(r.checked_type.shape))
               for k, r in enumerate(results)]
    info = FunctionInfo(symbol, tuple(params))
    return VDLAExternalModule({symbol: {"info": info, "steps": steps,
                                        "outputs": [slot[r] for r in results]}},
                              programs, weights)


register_external_codegen("vdla", vdla_codegen)
register_external_runtime(VDLAExternalModule.type_key, VDLAExternalModule.load_from_bytes)

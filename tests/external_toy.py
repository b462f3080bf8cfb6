"""A toy external target for the "bring your own codegen" tests: regions of float32 relu / add /
multiply, "compiled" into a list of numpy steps. Importing it registers the support
predicates, the codegen and the runtime loader under the name "test_ext".

A region's input holding a NaN makes its function raise (to test how errors surface).
"""
import json

import numpy as np

from kiln.codegen.external import register_external_codegen
from kiln.graph.expr import Call, Constant, Tuple, Var
from kiln.graph.op import register_op_attr
from kiln.graph.visitor import post_order
from kiln.runtime.external import ExternalModule, register_external_runtime
from kiln.runtime.function_info import FunctionInfo, ParamInfo

NAME = "test_ext"
OPS = {"nn.relu": lambda a: np.maximum(a, np.float32(0)), "add": np.add,
       "multiply": np.multiply}


def _float32(call):
    return all(a.checked_type.dtype == "float32" for a in call.args)


for _op in OPS:
    register_op_attr(_op, f"target.{NAME}", _float32, override=True)


class ToyModule(ExternalModule):
    type_key = NAME

    def __init__(self, functions):
        self.functions = functions        # symbol -> {"info", "steps", "outputs", "inputs"}
        self.calls = 0

    def function_names(self):
        return list(self.functions)

    def function_info(self, name):
        return self.functions[name]["info"]

    def get_function(self, name):
        spec = self.functions[name]

        def run(*arrays):
            self.calls += 1
            n_in = spec["inputs"]
            values = dict(enumerate(arrays[:n_in]))
            if any(np.isnan(a).any() for a in values.values()):
                raise ValueError("NaN input")
            for k, (op, args) in enumerate(spec["steps"]):
                vals = [values[a] if isinstance(a, int) else np.asarray(a, np.float32)
                        for a in args]
                values[n_in + k] = OPS[op](*vals).astype(np.float32)
            for out, slot in zip(arrays[n_in:], spec["outputs"]):
                out[...] = values[slot]

        return run

    def save_to_bytes(self):
        return json.dumps({n: {**f, "info": f["info"].to_dict()}
                           for n, f in self.functions.items()}).encode()

    @staticmethod
    def load_from_bytes(data):
        d = json.loads(data)
        return ToyModule({n: {**f, "info": FunctionInfo.from_dict(f["info"])}
                          for n, f in d.items()})


def toy_codegen(func, symbol, target):
    slot = {p: k for k, p in enumerate(func.params)}
    steps = []
    for node in post_order(func.body, enter_functions=False):
        if isinstance(node, (Var, Constant, Tuple)):
            continue
        assert isinstance(node, Call) and node.op.name in OPS, node
        args = [a.data.tolist() if isinstance(a, Constant) else slot[a] for a in node.args]
        slot[node] = len(slot)
        steps.append((node.op.name, args))
    results = func.body.fields if isinstance(func.body, Tuple) else (func.body,)
    params = [ParamInfo(f"in{k}", "buffer", "float32", tuple(p.checked_type.shape))
              for k, p in enumerate(func.params)]
    params += [ParamInfo(f"out{k}", "buffer", "float32", tuple(r.checked_type.shape))
               for k, r in enumerate(results)]
    return ToyModule({symbol: {"info": FunctionInfo(symbol, tuple(params)), "steps": steps,
                               "outputs": [slot[r] for r in results],
                               "inputs": len(func.params)}})


register_external_codegen(NAME, toy_codegen, override=True)
register_external_runtime(NAME, ToyModule.load_from_bytes, override=True)

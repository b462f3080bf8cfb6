"""ONNX Runtime as the external target that runs the ONNX nodes kiln cannot import.

`from_onnx(model, fallback="onnxruntime")` imports each such node as a call of the opaque op
"onnxruntime.node": the node itself (its NodeProto, with inputs and outputs renamed by
position), the opsets of the model and the node's output types, from ONNX shape inference.
`partition_for_onnxruntime` then groups neighbouring calls into regions (annotate_target ->
merge_compiler_regions -> partition_graph). The codegen turns each region back into one ONNX
model, with the region's constants as initializers. An OnnxRuntimeModule runs it in an ONNX
Runtime session (onnxruntime_runtime.py, which a loaded library needs without the compiler).
Saved, it is that ONNX model, so an exported library carries the region as an ONNX subgraph.

ONNX Runtime is needed only to build and to run such regions. A library holding one fails to
load where ONNX Runtime is missing, with an error that names it.

Example:
    >>> mod, params = from_onnx("model.onnx", fallback="onnxruntime")   # doctest: +SKIP
    >>> lib = kiln.compile(mod, params=params)                          # doctest: +SKIP
"""
from __future__ import annotations

import base64

import numpy as np
import onnx
from onnx import helper

from ..codegen.external import register_external_codegen, tensor_types
from ..graph.expr import Call, Constant, Tuple, TupleGetItem, Var
from ..graph.module import IRModule
from ..graph.op import OpPattern, call, register_op, register_op_attr
from ..graph.transform.annotate_target import annotate_target
from ..graph.transform.merge_compiler_regions import merge_compiler_regions
from ..graph.transform.partition_graph import partition_graph
from ..graph.ty import TensorType, TupleType
from ..graph.visitor import post_order
from ..runtime.function_info import FunctionInfo, ParamInfo
from .onnxruntime_runtime import COMPILER, OnnxRuntimeModule, require_onnxruntime

__all__ = ["COMPILER", "OP", "node_call", "probe_output_types", "partition_for_onnxruntime",
           "OnnxRuntimeModule", "onnxruntime_codegen", "require_onnxruntime"]

OP = "onnxruntime.node"


def _node_type(types, attrs):
    outs = [TensorType(tuple(shape), dtype) for shape, dtype in attrs.out_types]
    return outs[0] if len(outs) == 1 else TupleType(outs)


register_op(OP, type_rel=_node_type, pattern=OpPattern.OPAQUE,
            attrs={"op_type": "", "node": "", "opsets": (), "out_types": ()},
            doc="An ONNX node kiln cannot compile, run by ONNX Runtime (kiln.fallback."
                "onnxruntime); only a partitioned region can hold it.")
register_op_attr(OP, f"target.{COMPILER}", lambda c: True)


def node_call(node, args: list, present: list, model, out_types: list) -> Call:
    """The "onnxruntime.node" call of ONNX `node` of `model` (whose opsets the region keeps)
    on `args`, the expressions of its present inputs (`present[k]`: whether
    input k is given); `out_types` [(shape, dtype)] of its outputs.

    Example:
        >>> c = node_call(node, [x], [True], model, [((2, 3), "float32")])   # doctest: +SKIP
    """
    renamed = _renamed(node, [f"i{k}" if p else "" for k, p in enumerate(present)],
                       [f"o{j}" if o else "" for j, o in enumerate(node.output)])
    return call(OP, *args, op_type=node.op_type,
                node=base64.b64encode(renamed.SerializeToString()).decode("ascii"),
                opsets=tuple(sorted((o.domain, o.version) for o in model.opset_import)),
                out_types=tuple((tuple(s), d) for s, d in out_types))


def _renamed(node, inputs: list, outputs: list):
    """A copy of ONNX `node` reading `inputs` and writing `outputs` ("" for absent ones)."""
    copy = helper.make_node(node.op_type, inputs, outputs, name=node.name or None,
                            domain=node.domain or None)
    copy.attribute.extend(node.attribute)
    return copy


def _model(graph, opsets: list):
    # The oldest IR version the opsets allow: the onnx package's own may be newer than the
    # installed ONNX Runtime reads, and ONNX Runtime runs every version from there up.
    return helper.make_model(graph, opset_imports=opsets,
                             ir_version=helper.find_min_ir_version_for(opsets,
                                                                        ignore_unknown=True))


def probe_output_types(node, model, in_types: list) -> list:
    """[(shape, dtype)] of `node`'s outputs, found by running it in ONNX Runtime on zeros of
    `in_types` ([(shape, dtype)] of its present inputs): for ops ONNX shape inference does not
    know at all (com.microsoft's). An output shape that depends on the input values (NonZero's,
    which shape inference knows only in part) would be wrong: such nodes must not come here.

    Example:
        >>> probe_output_types(gelu_node, model, [((2, 3), "float32")])   # doctest: +SKIP
        [((2, 3), 'float32')]
    """
    ort = require_onnxruntime()
    node_in = [f"i{k}" if i else "" for k, i in enumerate(node.input)]
    outs = [f"o{j}" for j, o in enumerate(node.output) if o]
    copy = _renamed(node, node_in, [f"o{j}" if o else "" for j, o in enumerate(node.output)])
    given = [n for n in node_in if n]
    graph = helper.make_graph(
        [copy], "probe", [_value_info(n, TensorType(s, d)) for n, (s, d) in zip(given, in_types)],
        [helper.make_value_info(o, onnx.TypeProto()) for o in outs])
    probe = _model(graph, list(model.opset_import))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(probe.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    results = session.run(None, {n: np.zeros(s, d) for n, (s, d) in zip(given, in_types)})
    return [(tuple(int(d) for d in r.shape), str(r.dtype)) for r in map(np.asarray, results)]


def partition_for_onnxruntime(mod: IRModule) -> IRModule:
    """`mod` with its "onnxruntime.node" calls grouped into external functions for ONNX
    Runtime (constants bound inside them).

    Example:
        >>> print(partition_for_onnxruntime(mod))   # def @onnxruntime_main_0 ...  # doctest: +SKIP
    """
    mod = annotate_target(mod, [COMPILER])
    mod = merge_compiler_regions(mod)
    return partition_graph(mod, bind_constants=True)


# ------------------------------------------------------------------------------ codegen
def _value_info(name: str, ty: TensorType):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(
        np.dtype(ty.dtype)), [int(d) for d in ty.shape])


def onnxruntime_codegen(func, symbol: str, target) -> "OnnxRuntimeModule":
    """The region `func` as one ONNX model, in an OnnxRuntimeModule under `symbol`.

    Example:
        >>> onnxruntime_codegen(mod["onnxruntime_main_0"], "onnxruntime_main_0", None)
        ... # doctest: +SKIP
    """
    names: dict = {}         # expression -> its ONNX value names (one per tensor it holds)
    inputs, initializers, nodes, opsets = [], [], [], {}
    for k, p in enumerate(func.params):
        names[p] = [f"input_{k}"]
        inputs.append(_value_info(f"input_{k}", p.checked_type))
    for e in post_order(func.body, enter_functions=False):
        if e in names or isinstance(e, Var):
            continue
        if isinstance(e, Constant):
            name = f"const_{len(initializers)}"
            initializers.append(onnx.numpy_helper.from_array(e.data, name))
            names[e] = [name]
        elif isinstance(e, Tuple):
            names[e] = [n for f in e.fields for n in names[f]]
        elif isinstance(e, TupleGetItem):
            names[e] = [names[e.tuple_value][e.index]]
        elif isinstance(e, Call) and getattr(e.op, "name", None) == OP:
            node = onnx.NodeProto.FromString(base64.b64decode(e.attrs.node))
            args = iter(e.args)
            node_in = [names[next(args)][0] if i else "" for i in node.input]
            outs = [f"v{len(nodes)}_{j}" for j in range(len(node.output))]
            nodes.append(_renamed(node, node_in,
                                  [o if n else "" for o, n in zip(outs, node.output)]))
            opsets.update(dict(e.attrs.opsets))
            names[e] = [o for o, n in zip(outs, node.output) if n]
        else:
            raise TypeError(f"region {symbol}: ONNX Runtime runs only {OP} calls, got "
                            f"{type(e).__name__} {getattr(getattr(e, 'op', None), 'name', '')}")
    results = tensor_types(func.body.checked_type)
    out_names = names[func.body]
    outputs, final = [], []
    for k, (name, ty) in enumerate(zip(out_names, results)):
        # An ONNX graph output must be produced by a node under its own name: a region that
        # returns an input or a constant as is gets an Identity.
        out = f"output_{k}"
        nodes.append(helper.make_node("Identity", [name], [out]))
        outputs.append(_value_info(out, ty))
        final.append(out)
    graph = helper.make_graph(nodes, symbol, inputs, outputs, initializer=initializers)
    model = _model(graph, [helper.make_opsetid(d, v) for d, v in sorted(opsets.items())])
    params = [ParamInfo(f"input_{k}", "buffer", p.checked_type.dtype,
                        tuple(int(d) for d in p.checked_type.shape))
              for k, p in enumerate(func.params)]
    params += [ParamInfo(out, "buffer", ty.dtype, tuple(int(d) for d in ty.shape))
               for out, ty in zip(final, results)]
    return OnnxRuntimeModule({symbol: {"info": FunctionInfo(symbol, tuple(params)),
                                       "inputs": len(func.params),
                                       "model": model.SerializeToString()}})


register_external_codegen(COMPILER, onnxruntime_codegen, bind_constants=True, override=True)

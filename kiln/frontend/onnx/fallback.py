"""Import-time evaluation of ONNX nodes that have no converter but only constant inputs.

Models compute some constants with ops kiln does not translate (Trilu for causal masks, Sin/Cos
for rotary tables, CumSum of position ids, NonZero of fixed masks). When every input of such a
node is known while importing, the ONNX reference interpreter computes its outputs once and the
graph receives constants; only nodes that depend on run-time data are unsupported.

Example:
    >>> node = onnx.helper.make_node("Trilu", ["m"], ["t"])             # doctest: +SKIP
    >>> evaluate_node(node, [np.ones((3, 3), "float32")], opset=17)     # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator


def evaluate_node(node, inputs: list, opset: int) -> list:
    """The outputs of one default-domain `node` on numpy `inputs` (None for absent ones).

    Raises whatever the reference interpreter raises for an op it does not know.

    Example:
        >>> evaluate_node(helper.make_node("Sin", ["x"], ["y"]), [np.zeros(2, "float32")], 17)
        [array([0., 0.], dtype=float32)]
    """
    names = [f"in{k}" if v is not None else "" for k, v in enumerate(inputs)]
    outputs = [f"out{k}" if o else "" for k, o in enumerate(node.output)]
    copy = helper.make_node(node.op_type, names, outputs, domain=node.domain)
    copy.attribute.extend(node.attribute)
    graph = helper.make_graph(
        [copy], "fold", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(
            v.dtype), v.shape) for n, v in zip(names, inputs) if n],
        [helper.make_value_info(o, onnx.TypeProto()) for o in outputs if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: v for n, v in zip(names, inputs) if n}
    results = iter(ReferenceEvaluator(model).run(None, feeds))
    return [np.asarray(next(results)) if o else None for o in outputs]

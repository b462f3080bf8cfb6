"""Elementwise and broadcasting operators."""
from __future__ import annotations

from ..op import OpPattern, register_op
from .relations import broadcast, broadcast_bool, identity

UNARY = ("nn.relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "negative", "floor",
         "ceil", "round", "erf", "nn.silu", "nn.hardswish", "nn.hardsigmoid", "copy")
for _name in UNARY:
    register_op(_name, type_rel=identity, pattern=OpPattern.ELEMWISE, num_inputs=1,
                doc=f"{_name}(x), elementwise")

register_op("nn.leaky_relu", type_rel=identity, pattern=OpPattern.ELEMWISE, num_inputs=1,
            attrs={"alpha": 0.01})
register_op("clip", type_rel=identity, pattern=OpPattern.ELEMWISE, num_inputs=1,
            attrs={"a_min": float("-inf"), "a_max": float("inf")})
register_op("nn.gelu", type_rel=identity, pattern=OpPattern.ELEMWISE, num_inputs=1,
            attrs={"approximate": "none"}, doc="gelu; approximate='none' (erf) or 'tanh'")

BINARY = ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
          "floor_divide", "floor_mod")
for _name in BINARY:
    register_op(_name, type_rel=broadcast, pattern=OpPattern.BROADCAST, num_inputs=2)

COMPARE = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
           "logical_and", "logical_or")
for _name in COMPARE:
    register_op(_name, type_rel=broadcast_bool, pattern=OpPattern.BROADCAST, num_inputs=2)

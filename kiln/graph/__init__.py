"""kiln.graph: the typed dataflow graph IR (TVM paper §3), its operator registry and printer.

Example:
    >>> from kiln.graph import var, call, Function, IRModule
    >>> x = var("x", (1, 8))
    >>> mod = IRModule.from_expr(Function([x], call("nn.relu", x)))
"""
from .attrs import Attrs
from .evaluate import evaluate
from .expr import (Call, Constant, Expr, Function, GlobalVar, GraphTypeError, If, Let, Tuple,
                   TupleGetItem, Var, children, const, var)
from .module import IRModule
from .op import (REQUIRED, AttrError, Op, OpPattern, call, get_op, list_ops, register_op,
                 register_op_attr, reset_op_attr)
from .printer import to_text
from .ty import FuncType, TensorType, TupleType, Type
from .visitor import ExprMutator, post_order, structural_equal, users

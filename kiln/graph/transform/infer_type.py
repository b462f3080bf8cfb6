"""InferType: re-check the types of a module (and that every variable is bound).

Types are inferred when a node is built, so a well-built graph always checks. This pass finds
what construction cannot: nodes built with an explicit checked_type that is wrong, attributes
changed behind an op's back, and variables used outside the function that binds them.
"""
from __future__ import annotations

from ..expr import (Call, Function, GlobalVar, GraphTypeError, If, Let, Tuple, TupleGetItem,
                    Var, _infer_call)
from ..module import IRModule
from ..op import Op
from ..ty import FuncType, TensorType, TupleType
from ..visitor import post_order
from .pass_infra import ModulePass


def _describe(node) -> str:
    if isinstance(node, Call):
        op = node.op.name if isinstance(node.op, Op) else (
            repr(node.op) if isinstance(node.op, GlobalVar) else "a function")
        where = f" at {node.span}" if node.span else ""
        return f"call of {op}{where}"
    return type(node).__name__


def _expected_type(node):
    """The type node should have, recomputed from its children's types."""
    if isinstance(node, Call):
        if isinstance(node.op, Op):
            return node.op.infer_type(node.args, node.attrs, node.span)
        if isinstance(node.op, GlobalVar):      # (the error names the function)
            return _infer_call(node.op, node.args, node.attrs, node.span)
        expected = [p.checked_type for p in node.op.params]
        got = [a.checked_type for a in node.args]
        if expected != got:
            raise GraphTypeError(f"function expects arguments {expected}, got {got}")
        return node.op.ret_type
    if isinstance(node, Tuple):
        return TupleType([f.checked_type for f in node.fields])
    if isinstance(node, TupleGetItem):
        ty = node.tuple_value.checked_type
        if not isinstance(ty, TupleType) or not 0 <= node.index < len(ty.fields):
            raise GraphTypeError(f"index {node.index} into {ty!r}")
        return ty.fields[node.index]
    if isinstance(node, Function):
        return FuncType([p.checked_type for p in node.params], node.body.checked_type)
    if isinstance(node, Let):
        if node.var.checked_type != node.value.checked_type:
            raise GraphTypeError(f"let {node.var.name_hint}: {node.var.checked_type!r} bound to "
                                 f"{node.value.checked_type!r}")
        return node.body.checked_type
    if isinstance(node, If):
        cond = node.cond.checked_type
        if not (isinstance(cond, TensorType) and cond.dtype == "bool" and cond.ndim == 0):
            raise GraphTypeError(f"if condition must be a bool scalar, got {cond!r}")
        if node.true_branch.checked_type != node.false_branch.checked_type:
            raise GraphTypeError("if branches differ in type")
        return node.true_branch.checked_type
    return node.checked_type     # Var, Constant: their type is their annotation / data


def check_function(func: Function, name: str = "main", after_pass: str | None = None) -> None:
    """Raise GraphTypeError if any node's type disagrees with its op's relation, or a variable is
    used where nothing binds it.

    Example:
        >>> check_function(Function([x], call("nn.relu", x)))  # doctest: +SKIP
    """
    ctx = f"@{name}" + (f" after pass {after_pass}" if after_pass else "")
    nodes = post_order(func)
    bound = set()
    for n in nodes:
        if isinstance(n, Function):
            bound.update(n.params)
        elif isinstance(n, Let):
            bound.add(n.var)
    for n in nodes:
        if isinstance(n, Var):
            if n not in bound:
                raise GraphTypeError(f"{ctx}: free variable %{n.name_hint} "
                                     f"({n.checked_type!r}) is not a parameter of any function")
            continue
        try:
            expected = _expected_type(n)
        except GraphTypeError as err:
            raise GraphTypeError(f"{ctx}: {_describe(n)}: {err}") from None
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            raise GraphTypeError(f"{ctx}: {_describe(n)} cannot be typed ({type(err).__name__}: "
                                 f"{err}); attributes: {getattr(n, 'attrs', '')!r}") from None
        if expected != n.checked_type:
            raise GraphTypeError(f"{ctx}: {_describe(n)} is recorded as {n.checked_type!r} but its "
                                 f"inputs give {expected!r}")


def check_module(mod: IRModule, after_pass: str | None = None) -> None:
    """check_function on every function of mod.

    Example:
        >>> check_module(IRModule.from_expr(Function([x], call("exp", x))))  # doctest: +SKIP
    """
    for name, func in mod.items():
        check_function(func, name, after_pass)
        _check_globals(mod, func, name, after_pass)


def _check_globals(mod: IRModule, func: Function, name: str, after_pass) -> None:
    """Every GlobalVar called names a function of mod, with that function's type."""
    ctx = f"@{name}" + (f" after pass {after_pass}" if after_pass else "")
    for n in post_order(func):
        if not (isinstance(n, Call) and isinstance(n.op, GlobalVar)):
            continue
        gv = n.op
        if gv.name_hint not in mod:
            raise GraphTypeError(f"{ctx}: calls {gv!r}, which the module does not have (it has "
                                 f"{sorted(mod)})")
        if mod[gv.name_hint].checked_type != gv.func_type:
            raise GraphTypeError(f"{ctx}: calls {gv!r} as {gv.func_type!r}, but the module's "
                                 f"function has type {mod[gv.name_hint].checked_type!r}")


def InferType() -> ModulePass:
    """The pass that checks every function's types (they are inferred eagerly) and returns the
    module unchanged.

    Example:
        >>> mod = InferType()(mod)  # doctest: +SKIP
    """
    def infer_type(mod):
        check_module(mod)
        return mod
    return ModulePass(infer_type, opt_level=0, name="InferType")

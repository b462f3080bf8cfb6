"""Expressions of the graph IR: a typed dataflow graph of operator calls.

Every expression knows its type from the moment it is built: a Call asks its operator's type
relation, so a shape error surfaces where the graph is built, naming the op, its input types
and the source node. Nodes are immutable; identity is node identity (use structural_equal to
compare graphs).
"""
from __future__ import annotations

import numpy as np

from ..tir import dtype as dt
from .attrs import Attrs
from .ty import FuncType, TensorType, TupleType, Type


class GraphTypeError(TypeError):
    """A call whose inputs do not fit its operator; names the op, the input types and the node."""


class Expr:
    """Base of graph expressions; `checked_type` is always set."""

    __slots__ = ("checked_type", "span", "__weakref__")

    def __setattr__(self, k, v):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _init(self, checked_type, span=None, **fields):
        for k, v in fields.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "checked_type", checked_type)
        object.__setattr__(self, "span", span)

    def __repr__(self):
        from .printer import to_text
        return to_text(self)

    __hash__ = object.__hash__

    def __reduce__(self):
        raise TypeError("graph expressions are not pickled")


class Var(Expr):
    """A function parameter (a model input, or a weight before it is bound)."""

    __slots__ = ("name_hint", "type_annotation")

    def __init__(self, name_hint: str, type_annotation: Type, span=None):
        if not isinstance(type_annotation, Type):
            raise TypeError(f"variable {name_hint!r} needs a type (TensorType/TupleType), "
                            f"got {type_annotation!r}")
        self._init(type_annotation, span, name_hint=name_hint, type_annotation=type_annotation)


def var(name: str, shape=None, dtype="float32", type_annotation=None) -> Var:
    """A typed variable: var("x", (1, 3, 224, 224))."""
    return Var(name, type_annotation or TensorType(shape, dtype))


class Constant(Expr):
    """A constant tensor (weights after binding, folded values); data is read-only."""

    __slots__ = ("data",)

    def __init__(self, data, span=None):
        arr = np.asarray(data)
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        if arr.flags.writeable:
            # A read-only view: the IR cannot write through it, and the caller's array keeps
            # its own flags.
            arr = arr.view()
            arr.setflags(write=False)
        self._init(TensorType(arr.shape, dt.normalize(arr.dtype)), span, data=arr)


def const(value, dtype=None) -> Constant:
    """A constant: const(1.0, "float32"), const(np.ones((3,)))."""
    return Constant(np.asarray(value, dtype=dtype))


class GlobalVar(Expr):
    """A named reference to a function of the IRModule (e.g. an external function made by
    partition_graph), used as a call's op (kiln's passes and compiler expect it nowhere else):
    Call(gv, args) has the return type of `func_type`, and its arguments are checked against
    the parameter types. Like an Op it is not a child of the call. Identity is node identity;
    structural_equal compares the name and the type.

    Example:
        >>> gv = GlobalVar("dnnl_main_0", FuncType([TensorType((1, 8))], TensorType((1, 8))))
        >>> y = Call(gv, [var("x", (1, 8))])   # printed as @dnnl_main_0(%x)
    """

    __slots__ = ("name_hint",)

    def __init__(self, name_hint: str, func_type: FuncType, span=None):
        if not isinstance(name_hint, str) or not name_hint:
            raise TypeError(f"a global variable needs a non-empty name, got {name_hint!r}")
        if not isinstance(func_type, FuncType):
            raise TypeError(f"global variable @{name_hint} needs a FuncType, got {func_type!r}")
        self._init(func_type, span, name_hint=name_hint)

    @property
    def func_type(self) -> FuncType:
        return self.checked_type

    def __repr__(self):
        return f"@{self.name_hint}"


class Call(Expr):
    """op(args..., attrs); op is a registered Op, a (fused) Function or a GlobalVar."""

    __slots__ = ("op", "args", "attrs")

    def __init__(self, op, args, attrs=None, span=None, checked_type=None):
        args = tuple(args)
        for k, a in enumerate(args):
            if not isinstance(a, Expr):
                raise TypeError(f"argument {k} of {getattr(op, 'name', 'call')} is not a graph "
                                f"expression: {a!r}")
        attrs = attrs if isinstance(attrs, Attrs) else Attrs(attrs)
        if checked_type is None:
            checked_type = _infer_call(op, args, attrs, span)
        self._init(checked_type, span, op=op, args=args, attrs=attrs)


def _infer_call(op, args, attrs, span):
    from .op import Op
    if isinstance(op, Function):
        expected = [p.checked_type for p in op.params]
        got = [a.checked_type for a in args]
        if expected != got:
            raise GraphTypeError(f"call of a function expecting {expected} with arguments {got}")
        return op.body.checked_type
    if isinstance(op, GlobalVar):
        expected = list(op.func_type.arg_types)
        got = [a.checked_type for a in args]
        if expected != got:
            raise GraphTypeError(f"call of @{op.name_hint}{f' at {span}' if span else ''} "
                                 f"expecting {expected} with arguments {got}")
        return op.func_type.ret_type
    if not isinstance(op, Op):
        raise TypeError(f"a call needs an Op, a Function or a GlobalVar, got {op!r}")
    return op.infer_type(args, attrs, span)


class Tuple(Expr):
    __slots__ = ("fields",)

    def __init__(self, fields, span=None):
        fields = tuple(fields)
        self._init(TupleType([f.checked_type for f in fields]), span, fields=fields)


class TupleGetItem(Expr):
    __slots__ = ("tuple_value", "index")

    def __init__(self, tuple_value, index: int, span=None):
        ty = tuple_value.checked_type
        if not isinstance(ty, TupleType):
            raise GraphTypeError(f"TupleGetItem on a non-tuple of type {ty!r}")
        if not -len(ty.fields) <= index < len(ty.fields):
            raise GraphTypeError(f"TupleGetItem index {index} out of range for {ty!r}")
        index = index % len(ty.fields)
        self._init(ty.fields[index], span, tuple_value=tuple_value, index=index)


class Function(Expr):
    """fn(params) { body }; attrs mark e.g. fused primitive functions ({"Primitive": 1})."""

    __slots__ = ("params", "body", "attrs")

    def __init__(self, params, body, attrs=None, span=None):
        params = tuple(params)
        attrs = attrs if isinstance(attrs, Attrs) else Attrs(attrs)
        self._init(FuncType([p.checked_type for p in params], body.checked_type), span,
                   params=params, body=body, attrs=attrs)

    @property
    def ret_type(self):
        return self.body.checked_type


class Let(Expr):
    __slots__ = ("var", "value", "body")

    def __init__(self, var_, value, body, span=None):
        if var_.checked_type != value.checked_type:
            raise GraphTypeError(f"let {var_.name_hint}: {var_.checked_type!r} bound to a value "
                                 f"of type {value.checked_type!r}")
        self._init(body.checked_type, span, var=var_, value=value, body=body)


class If(Expr):
    __slots__ = ("cond", "true_branch", "false_branch")

    def __init__(self, cond, true_branch, false_branch, span=None):
        if true_branch.checked_type != false_branch.checked_type:
            raise GraphTypeError(f"if branches differ in type: {true_branch.checked_type!r} vs "
                                 f"{false_branch.checked_type!r}")
        self._init(true_branch.checked_type, span, cond=cond, true_branch=true_branch,
                   false_branch=false_branch)


def children(e: Expr) -> tuple:
    """The sub-expressions of e, in evaluation order."""
    if isinstance(e, Call):
        return e.args + ((e.op,) if isinstance(e.op, Function) else ())
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    if isinstance(e, Function):
        return e.params + (e.body,)
    if isinstance(e, Let):
        return (e.var, e.value, e.body)
    if isinstance(e, If):
        return (e.cond, e.true_branch, e.false_branch)
    return ()

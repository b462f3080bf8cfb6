"""Shared type relations (shape inference) and the checks they are built from.

A relation takes the input types and the call's attributes and returns the output type, or
raises GraphTypeError with a message about the attribute or input at fault; the registry
prefixes it with the op name, the source node and the input types.

Example:
    >>> broadcast([TensorType((4, 1)), TensorType((3,))], None)   # doctest: +SKIP
    Tensor[(4, 3), float32]
"""
from __future__ import annotations

from ...tir import dtype as dt
from ...tir.expr import PrimExpr
from ..expr import GraphTypeError
from ..ty import TensorType, TupleType


def tensor(t, what="input") -> TensorType:
    """t itself when it is a TensorType, else a GraphTypeError naming `what`.

    Example:
        >>> tensor(TensorType((2,)), "data")   # doctest: +SKIP
    """
    if not isinstance(t, TensorType):
        raise GraphTypeError(f"{what} must be a tensor, got {t!r}")
    return t


def float_tensor(t, what="input") -> TensorType:
    """Like tensor(), and the dtype must be floating point.

    Example:
        >>> float_tensor(TensorType((2,), "int32"))   # doctest: +SKIP
        GraphTypeError: input must have a floating-point dtype, got int32
    """
    t = tensor(t, what)
    if not dt.is_float(t.dtype):
        raise GraphTypeError(f"{what} must have a floating-point dtype, got {t.dtype}")
    return t


def integer_tensor(t, what="indices") -> TensorType:
    """Like tensor(), and the dtype must be a (signed or unsigned) integer.

    Example:
        >>> integer_tensor(TensorType((2,), "int64"))   # doctest: +SKIP
    """
    t = tensor(t, what)
    if not dt.is_integral(t.dtype):
        raise GraphTypeError(f"{what} must have an integer dtype, got {t.dtype}")
    return t


def same_dtype(types):
    """The one dtype shared by all `types`.

    Example:
        >>> same_dtype([TensorType((2,)), TensorType((3,))])   # doctest: +SKIP
        'float32'
    """
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        raise GraphTypeError(f"inputs have different dtypes {sorted(dtypes)}")
    return types[0].dtype


def product_dtype(types, out_dtype) -> str:
    """The operand dtype of a product (convolution, dense): one shared dtype, or operands of
    different types when an out_dtype says what the sums are and each operand is an integer or
    of that type (uint8 data with int8 weights into int32; uint8 data with float32 weights into
    float32, which the compute converts lane by lane).

    Example:
        >>> product_dtype([TensorType((2,), "uint8"), TensorType((2,), "int8")], "int32")
        'int32'
    """
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1 and out_dtype is not None:
        out = check_dtype(out_dtype, "out_dtype")
        if all(dt.is_integral(d) or d == out for d in dtypes):
            return out
    if len(dtypes) > 1 and out_dtype is None and all(dt.is_integral(d) for d in dtypes):
        raise GraphTypeError(f"integer operands of different types {sorted(dtypes)} need an "
                             f"out_dtype for their sums (e.g. out_dtype=\"int32\")")
    return same_dtype(types)


def is_known(d) -> bool:
    """True for a static dimension (a Python int) rather than a symbolic one."""
    return isinstance(d, int)


def identity(types, attrs):
    """The output has the type of the (only) input.

    Example:
        >>> identity([TensorType((2,))], None)   # doctest: +SKIP
    """
    return tensor(types[0])


def unary_float(types, attrs):
    """The type of the (only) input, which must be floating point (exp, tanh, gelu, ...)."""
    return float_tensor(types[0])


def broadcast_shapes(*shapes):
    """NumPy broadcasting of static-or-symbolic shapes (topi's rule, as a graph type error).

    Example:
        >>> broadcast_shapes((4, 1), (3,))
        (4, 3)
    """
    from ...topi.broadcast import broadcast_shape
    from ...topi.utils import TopiError
    try:
        return broadcast_shape(*shapes)
    except TopiError:
        raise GraphTypeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not "
                             f"broadcast") from None


def broadcast(types, attrs):
    """Two same-dtype inputs broadcast together (add, multiply, ...)."""
    a, b = tensor(types[0], "lhs"), tensor(types[1], "rhs")
    return TensorType(broadcast_shapes(a.shape, b.shape), same_dtype([a, b]))


def broadcast_float(types, attrs):
    """Like broadcast, for floating-point operands only (power)."""
    out = broadcast(types, attrs)
    if not dt.is_float(out.dtype):
        raise GraphTypeError(f"operands must have a floating-point dtype, got {out.dtype}")
    return out


def broadcast_bool(types, attrs):
    """Like broadcast, with a bool result (comparisons, logical and/or)."""
    return TensorType(broadcast(types, attrs).shape, "bool")


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """axis in [-ndim, ndim) as a non-negative int.

    Example:
        >>> normalize_axis(-1, 4)
        3
    """
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise GraphTypeError(f"{what} must be an int, got {axis!r}")
    if not -ndim <= axis < max(ndim, 1):
        raise GraphTypeError(f"{what} {axis} is out of range for a tensor of rank {ndim}")
    return axis % max(ndim, 1)


def normalize_axes(axis, ndim: int, what: str = "axis") -> tuple:
    """None (every axis), an int or a tuple of ints as a sorted tuple of distinct axes.

    Example:
        >>> normalize_axes((-1, 0), 3)
        (0, 2)
    """
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if not axes:
        raise GraphTypeError(f"{what} is empty; use axis=None for every axis")
    out = [normalize_axis(a, ndim, what) for a in axes]
    if len(set(out)) != len(out):
        raise GraphTypeError(f"{what} {tuple(axes)} names an axis twice")
    return tuple(sorted(out))


def int_tuple(value, what: str, length: int | None = None, minimum: int | None = None) -> tuple:
    """An attribute as a tuple of ints (a bare int is repeated to `length`), checked.

    Example:
        >>> int_tuple(2, "strides", 2, minimum=1)
        (2, 2)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,) * (length or 1)
    if not isinstance(value, tuple) or not all(isinstance(v, int) and not isinstance(v, bool)
                                               for v in value):
        raise GraphTypeError(f"{what} must be an int or a tuple of ints, got {value!r}")
    if length is not None and len(value) != length:
        raise GraphTypeError(f"{what} needs {length} values, got {value!r}")
    if minimum is not None and any(v < minimum for v in value):
        raise GraphTypeError(f"{what} must be >= {minimum}, got {value!r}")
    return value


def size_tuple(value, what: str) -> tuple:
    """An attribute of sizes as a tuple of non-negative ints and symbolic size expressions
    (kiln.tir expressions over size variables: a dynamic sequence length).

    Example:
        >>> size_tuple((2, 3), "shape")
        (2, 3)
    """
    if not isinstance(value, tuple):
        value = (value,)
    for v in value:
        if isinstance(v, bool) or not (isinstance(v, int) and v >= 0 or isinstance(v, PrimExpr)):
            raise GraphTypeError(f"{what} must hold sizes (non-negative ints or size "
                                 f"expressions), got {value!r}")
    return value


def pair(value, what: str, minimum: int | None = None) -> tuple:
    """(h, w) from an int, (v,) or (h, w).

    Example:
        >>> pair(3, "pool_size")
        (3, 3)
    """
    if isinstance(value, tuple) and len(value) == 1:
        value = value * 2
    return int_tuple(value, what, 2, minimum)


def _padding(value, what: str, axes: int) -> tuple:
    """All befores then all afters of `axes` axes from an int, (p,), one per axis (both
    sides) or 2 * axes values, all >= 0."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if isinstance(value, tuple) and len(value) in (1, axes):
        value = value * (2 * axes // len(value))
    return int_tuple(value, what, 2 * axes, minimum=0)


def padding4(value, what: str = "padding") -> tuple:
    """(top, left, bottom, right) from an int, (p,), (ph, pw) or four values, all >= 0.

    Example:
        >>> padding4((1, 2))
        (1, 2, 1, 2)
    """
    return _padding(value, what, 2)


def triple(value, what: str, minimum: int | None = None) -> tuple:
    """(d, h, w) from an int, (v,) or three values.

    Example:
        >>> triple(2, "strides"), triple((1,), "dilation")
        ((2, 2, 2), (1, 1, 1))
    """
    if isinstance(value, tuple) and len(value) == 1:
        value = value * 3
    return int_tuple(value, what, 3, minimum)


def padding6(value, what: str = "padding") -> tuple:
    """(front, top, left, back, bottom, right) from an int, (p,), (pd, ph, pw) or six values,
    all >= 0.

    Example:
        >>> padding6((1, 2, 3))
        (1, 2, 3, 1, 2, 3)
    """
    return _padding(value, what, 3)


def one_of(value, choices, what: str):
    """value when it is one of `choices`, else a GraphTypeError listing them.

    Example:
        >>> one_of("NCHW", ("NCHW", "NHWC"), "data_layout")
        'NCHW'
    """
    if value not in choices:
        raise GraphTypeError(f"{what} must be one of {', '.join(map(repr, choices))}, "
                             f"got {value!r}")
    return value


def check_dtype(dtype, what: str = "dtype") -> str:
    """A dtype string normalized, or a GraphTypeError naming it.

    Example:
        >>> check_dtype("float")
        'float32'
    """
    try:
        return dt.normalize(dtype)
    except (dt.DTypeError, TypeError) as err:
        raise GraphTypeError(f"{what}: {err}") from None


def tuple_of(types):
    """A TupleType of the given field types."""
    return TupleType(types)

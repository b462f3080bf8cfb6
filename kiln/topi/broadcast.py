"""Binary operators with NumPy broadcasting over static shapes, comparisons, logic and where.

Shapes are aligned at the right; a dimension of 1 stretches to the other side's size. A
Python number on either side takes the tensor's dtype. Two tensors must share a dtype (the
graph layer inserts casts): a silent promotion would differ from numpy's rules anyway.
The result is tagged "elemwise" when no input is stretched, "broadcast" otherwise.

Example:
    >>> from kiln import te, topi
    >>> a = te.placeholder((4, 1), name="a"); b = te.placeholder((3,), name="b")
    >>> c = topi.broadcast.add(a, b)          # shape (4, 3)
    >>> d = topi.broadcast.multiply(c, 2.0)
"""
from __future__ import annotations

from .. import te
from ..tir import dtype as dt
from ..tir.expr import PrimExpr
from ..tir.op import call_intrin
from . import tags
from .utils import TopiError, dim_equal, get_const_tuple, is_const_value


def broadcast_shape(*shapes, op_name: str = "broadcast") -> tuple:
    """The NumPy broadcast of several shapes; TopiError naming the clashing dimension.

    Example:
        >>> broadcast_shape((4, 1), (3,))
        (4, 3)
    """
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        dim = 1
        for s in shapes:
            pos = k - (ndim - len(s))
            if pos < 0:
                continue
            d = get_const_tuple((s[pos],))[0]
            if is_const_value(d, 1):
                continue
            if is_const_value(dim, 1):
                dim = d
            elif not dim_equal(dim, d):
                raise TopiError(f"{op_name}: shapes {', '.join(str(get_const_tuple(s)) for s in shapes)}"
                                f" do not broadcast (dimension {k} of the result: {dim} vs {d})")
        out.append(dim)
    return tuple(out)


def broadcast_index(t, out_shape, indices):
    """Indices into tensor t for output `indices` of a broadcast to `out_shape`.

    Example:
        >>> t[broadcast_index(t, (4, 3), (i, j))]  # doctest: +SKIP
    """
    offset = len(out_shape) - t.ndim
    shape = get_const_tuple(t.shape)
    return tuple(0 if is_const_value(d, 1) and not is_const_value(out_shape[offset + k], 1)
                 else indices[offset + k] for k, d in enumerate(shape))


def _operand(x, name, k):
    if isinstance(x, te.Tensor):
        return x
    if isinstance(x, (bool, int, float, PrimExpr)):
        return None
    raise TopiError(f"{name}: operand {k} must be a te.Tensor or a Python number, got "
                    f"{type(x).__name__} {x!r}")


def _scalar(v, dtype, name):
    if isinstance(v, PrimExpr):
        return v
    if isinstance(v, float) and not dt.is_float(dtype) and not v.is_integer():
        raise TopiError(f"{name}: the number {v} cannot take the {dtype} dtype of the tensor "
                        "operand; cast the tensor to a float type first")
    return te.const(v, dtype)


def _binary(name, fn, a, b, check=None, same_dtype=True):
    ta, tb = _operand(a, name, 0), _operand(b, name, 1)
    if ta is None and tb is None:
        raise TopiError(f"{name}: at least one operand must be a te.Tensor")
    tensors = [t for t in (ta, tb) if t is not None]
    if same_dtype and len(tensors) == 2 and ta.dtype != tb.dtype:
        raise TopiError(f"{name}: operand dtypes differ ({ta.name}: {ta.dtype}, {tb.name}: "
                        f"{tb.dtype}); cast one of them first")
    if check is not None:
        check(tensors[0].dtype)
    shape = broadcast_shape(*(t.shape for t in tensors), op_name=name)
    dtype = tensors[0].dtype
    sa = _scalar(a, dtype, name) if ta is None else None
    sb = _scalar(b, dtype, name) if tb is None else None

    def fcompute(*i):
        va = sa if ta is None else ta[broadcast_index(ta, shape, i)]
        vb = sb if tb is None else tb[broadcast_index(tb, shape, i)]
        return fn(va, vb)

    stretched = any(get_const_tuple(t.shape) != shape for t in tensors)
    return te.compute(shape, fcompute, name=name, tag=tags.BROADCAST if stretched else tags.ELEMWISE)


def _float_only(name):
    def check(dtype):
        if not dt.is_float(dtype):
            raise TopiError(f"{name} needs floating-point operands, got {dtype}")
    return check


def _make(name, fn, doc, check=None, same_dtype=True):
    def op(a, b):
        return _binary(name, fn, a, b, check, same_dtype)
    op.__name__ = name
    op.__doc__ = (f"{doc}\n\n    Example:\n        >>> c = {name}(te.placeholder((4, 1), name=\"a\"), "
                  f"te.placeholder((3,), name=\"b\"))\n")
    return op


add = _make("add", lambda x, y: x + y, "a + b with broadcasting.")
subtract = _make("subtract", lambda x, y: x - y, "a - b with broadcasting.")
multiply = _make("multiply", lambda x, y: x * y, "a * b with broadcasting.")
divide = _make("divide", lambda x, y: x / y,
               "a / b with broadcasting; integers divide truncating toward zero (C, ONNX).")
power = _make("power", te.pow, "a ** b with broadcasting (floating point).",
              check=_float_only("power"))
maximum = _make("maximum", lambda x, y: te.max(x, y), "Elementwise max with broadcasting.")
minimum = _make("minimum", lambda x, y: te.min(x, y), "Elementwise min with broadcasting.")
floor_divide = _make("floor_divide", te.floordiv,
                     "floor(a / b) with broadcasting (numpy's // and torch.floor_divide).")
floor_mod = _make("floor_mod", te.floormod,
                  "a - floor(a / b) * b with broadcasting: the sign of b (numpy's %, torch.remainder).")
fmod = _make("fmod", te.fmod,
             "a - trunc(a / b) * b with broadcasting: the sign of a (C fmod, numpy.fmod).")


def _integer_only(name):
    def check(dtype):
        if not dt.is_integral(dtype):
            raise TopiError(f"{name} needs integer operands, got {dtype}")
    return check


def _bitwise(name):
    return lambda x, y: call_intrin(x.dtype, name, x, y)


bitwise_and = _make("bitwise_and", _bitwise("bitwise_and"), "a & b with broadcasting (integers).",
                    check=_integer_only("bitwise_and"))
bitwise_or = _make("bitwise_or", _bitwise("bitwise_or"), "a | b with broadcasting (integers).",
                   check=_integer_only("bitwise_or"))
bitwise_xor = _make("bitwise_xor", _bitwise("bitwise_xor"), "a ^ b with broadcasting (integers).",
                    check=_integer_only("bitwise_xor"))


def _shift_in_range(x, y):
    in_range = y < dt.bits_of(x.dtype)
    return in_range if dt.is_uint(y.dtype) else (y >= 0) & in_range


def _width_mask(x, y):
    return call_intrin(y.dtype, "bitwise_and", y, te.const(dt.bits_of(x.dtype) - 1, y.dtype))


def _left_shift(x, y):
    # The amount is masked to the width (LLVM's shl is poison beyond it) and the shift done
    # unsigned (C leaves a signed left shift of a negative value undefined).
    unsigned = "u" + x.dtype if dt.is_int(x.dtype) else x.dtype
    amount = _width_mask(x, y)
    shifted = te.cast(call_intrin(unsigned, "shift_left", te.cast(x, unsigned),
                                  te.cast(amount, unsigned)), x.dtype)
    return te.select(_shift_in_range(x, y), shifted, te.const(0, x.dtype))


def _right_shift(x, y):
    bits = dt.bits_of(x.dtype)
    if dt.is_int(x.dtype):
        # Arithmetic: shifting by bits - 1 leaves the sign fill, the out-of-range result.
        amount = te.select(_shift_in_range(x, y), y, te.const(bits - 1, y.dtype))
        return call_intrin(x.dtype, "shift_right", x, amount)
    amount = _width_mask(x, y)
    return te.select(_shift_in_range(x, y), call_intrin(x.dtype, "shift_right", x, amount),
                     te.const(0, x.dtype))


left_shift = _make("left_shift", _left_shift,
                   "a << b with broadcasting (integers); a negative b or one of the bit width "
                   "or more gives 0 (ONNX BitShift).", check=_integer_only("left_shift"))
right_shift = _make("right_shift", _right_shift,
                    "a >> b with broadcasting (integers; arithmetic for signed types); a "
                    "negative b or one of the bit width or more gives the sign fill: -1 for a "
                    "negative a, else 0 (ONNX BitShift).", check=_integer_only("right_shift"))

equal = _make("equal", lambda x, y: x == y, "a == b (bool) with broadcasting.")
not_equal = _make("not_equal", lambda x, y: x != y, "a != b (bool) with broadcasting.")
less = _make("less", lambda x, y: x < y, "a < b (bool) with broadcasting.")
less_equal = _make("less_equal", lambda x, y: x <= y, "a <= b (bool) with broadcasting.")
greater = _make("greater", lambda x, y: x > y, "a > b (bool) with broadcasting.")
greater_equal = _make("greater_equal", lambda x, y: x >= y, "a >= b (bool) with broadcasting.")


def _as_bool(v):
    return v if dt.is_bool(v.dtype) else v != te.const(0, v.dtype)


logical_and = _make("logical_and", lambda x, y: _as_bool(x) & _as_bool(y),
                    "a and b (bool; nonzero is true) with broadcasting.", same_dtype=False)
logical_or = _make("logical_or", lambda x, y: _as_bool(x) | _as_bool(y),
                   "a or b (bool; nonzero is true) with broadcasting.", same_dtype=False)
logical_xor = _make("logical_xor", lambda x, y: _as_bool(x) != _as_bool(y),
                    "a xor b (bool; nonzero is true) with broadcasting.", same_dtype=False)


def logical_not(x):
    """not x (bool; nonzero is true).

    Example:
        >>> y = logical_not(te.placeholder((3,), "bool", name="m"))
    """
    if not isinstance(x, te.Tensor):
        raise TopiError(f"logical_not: input must be a te.Tensor, got {type(x).__name__}")
    return te.compute(x.shape, lambda *i: ~_as_bool(x(*i)), name="logical_not", tag=tags.ELEMWISE)


def where(cond, x, y):
    """x where cond else y, the three broadcast together; x or y may be Python numbers.

    Example:
        >>> m = te.placeholder((4, 1), "bool", name="m")
        >>> z = where(m, te.placeholder((3,), name="x"), 0.0)
    """
    if not isinstance(cond, te.Tensor):
        raise TopiError(f"where: cond must be a te.Tensor, got {type(cond).__name__}")
    tx, ty = _operand(x, "where", 1), _operand(y, "where", 2)
    values = [t for t in (tx, ty) if t is not None]
    if not values:
        raise TopiError("where: x or y must be a te.Tensor (the result's dtype comes from it)")
    if len(values) == 2 and tx.dtype != ty.dtype:
        raise TopiError(f"where: x and y dtypes differ ({tx.dtype} vs {ty.dtype}); cast one first")
    dtype = values[0].dtype
    tensors = [cond] + values
    shape = broadcast_shape(*(t.shape for t in tensors), op_name="where")

    sx = _scalar(x, dtype, "where") if tx is None else None
    sy = _scalar(y, dtype, "where") if ty is None else None

    def fcompute(*i):
        c = _as_bool(cond[broadcast_index(cond, shape, i)])
        vx = sx if tx is None else tx[broadcast_index(tx, shape, i)]
        vy = sy if ty is None else ty[broadcast_index(ty, shape, i)]
        return te.select(c, vx, vy)

    stretched = any(get_const_tuple(t.shape) != shape for t in tensors)
    return te.compute(shape, fcompute, name="where",
                      tag=tags.BROADCAST if stretched else tags.ELEMWISE)

"""Cumulative (scan) operators: cumsum, cumprod."""
from __future__ import annotations

from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from .define import cpu, topi_compute
from .relations import normalize_axis, tensor


def _cumulative_rel(types, attrs):
    """Same type as the input; the axis must be one of its axes and static in length."""
    x = tensor(types[0])
    if x.dtype == "bool":
        raise GraphTypeError("the input must be numeric, got bool")
    if x.ndim == 0:
        raise GraphTypeError("the input must have rank 1 or more, got a scalar")
    axis = normalize_axis(attrs.axis, x.ndim)
    if not isinstance(x.shape[axis], int):
        raise GraphTypeError(f"the length of axis {attrs.axis} must be static, got "
                             f"{x.shape[axis]}")
    return x


def _kwargs(attrs, out_type):
    return {"axis": normalize_axis(attrs.axis, out_type.ndim),
            "exclusive": bool(attrs.exclusive), "reverse": bool(attrs.reverse)}


for _name, _what in (("cumsum", "sum"), ("cumprod", "product")):
    register_op(_name, type_rel=_cumulative_rel, pattern=OpPattern.OPAQUE, num_inputs=1,
                attrs={"axis": REQUIRED, "exclusive": False, "reverse": False},
                compute=topi_compute(f"cumulative:{_name}", _kwargs),
                schedules=cpu("cumulative:schedule_cumulative"),
                doc=f"running {_what} along axis; exclusive leaves each element out of its own "
                    f"result, reverse runs from the end of the axis")

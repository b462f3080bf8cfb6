"""Layout operators that AlterOpLayout introduces: weights packed once at compile time.

    nn.dense_weight_pack(W; pack_width, transposed)   W (units, in) — or (in, units) when not
        transposed — → panels (ceil(units / NR), in, NR), zero past the last unit
    nn.contrib_dense_pack(x, P; units)                x (..., in) @ unpacked(P).T → (..., units)
    nn.contrib_dense_int8(x, P; units)                x (M, in) uint8 / int8 @ P.T in int32, P the
        weight packed for a dot-product instruction (kiln/topi/x86/dense_int8.py):
        (units / lanes, in / g, lanes, g) int8 (g = 4) or int16 (g = 2)

A constant W makes the pack a constant sub-graph, so FoldConstant evaluates it once and the
compiled model only ever reads the panels.

Example:
    >>> p = call("nn.dense_weight_pack", w, pack_width=32)     # doctest: +SKIP
    >>> y = call("nn.contrib_dense_pack", x, p, units=768)      # doctest: +SKIP
"""
from __future__ import annotations

from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType
from .define import INJECTIVE, cpu, topi_compute
from .relations import is_known, same_dtype, tensor


def _positive_int(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise GraphTypeError(f"{what} must be a positive int, got {value!r}")
    return value


def _pack_rel(types, attrs):
    w = tensor(types[0], "weight")
    if w.ndim != 2:
        raise GraphTypeError(f"the weight to pack must be 2-d, got rank {w.ndim}")
    nr = _positive_int(attrs.pack_width, "pack_width")
    units, k = (w.shape[0], w.shape[1]) if attrs.transposed else (w.shape[1], w.shape[0])
    if not is_known(units):
        raise GraphTypeError(f"the weight's number of units must be known, got {units}")
    return TensorType((-(-units // nr), k, nr), w.dtype)


register_op("nn.dense_weight_pack", type_rel=_pack_rel, pattern=OpPattern.INJECTIVE,
            num_inputs=1, attrs={"pack_width": REQUIRED, "transposed": True},
            compute=topi_compute("nn.dense:pack_columns",
                                 lambda a, t: {"transposed": a.transposed, "nr": a.pack_width,
                                               "name": "weight_packed"}),
            schedules=INJECTIVE,
            doc="a dense weight as panels (ceil(units / NR), in, NR) for the x86 dense kernel")


def _dense_pack_rel(types, attrs):
    data, packed = tensor(types[0], "data"), tensor(types[1], "packed weight")
    if data.ndim < 1 or packed.ndim != 3:
        raise GraphTypeError(f"contrib_dense_pack takes data (..., in) and packed panels "
                             f"(blocks, in, NR), got ranks {data.ndim} and {packed.ndim}")
    units = _positive_int(attrs.units, "units")
    nb, k, nr = packed.shape
    if is_known(nb) and is_known(nr) and not (nb - 1) * nr < units <= nb * nr:
        raise GraphTypeError(f"packed weight {packed.shape} cannot hold {units} units")
    d = data.shape[-1]
    if is_known(d) and is_known(k) and d != k:
        raise GraphTypeError(f"data's last dimension {d} does not match the packed weight's "
                             f"input dimension {k}")
    return TensorType(data.shape[:-1] + (units,), same_dtype([data, packed]))


register_op("nn.contrib_dense_pack", type_rel=_dense_pack_rel,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2, attrs={"units": REQUIRED},
            compute=topi_compute("nn.dense:dense", lambda a, t: {"units": a.units}),
            schedules=cpu("x86.dense:schedule_dense"),
            doc="y = x @ W.T with W given packed by nn.dense_weight_pack")


def _dense_int8_rel(types, attrs):
    data, packed = tensor(types[0], "data"), tensor(types[1], "packed weight")
    if data.ndim != 2 or packed.ndim != 4:
        raise GraphTypeError(f"contrib_dense_int8 takes 2-d data and a 4-d packed weight, got "
                             f"ranks {data.ndim} and {packed.ndim}")
    if data.dtype not in ("uint8", "int8") or (packed.dtype, packed.shape[-1]) not in (
            ("int8", 4), ("int16", 2)):
        raise GraphTypeError(f"contrib_dense_int8: data must be uint8 or int8 and the weight "
                             f"int8 in groups of 4 or int16 in pairs, got {data.dtype} and "
                             f"{packed.dtype} {packed.shape}")
    units = _positive_int(attrs.units, "units")
    blocks, steps, lanes, group = packed.shape
    if blocks * lanes < units or steps * group < data.shape[1]:
        raise GraphTypeError(f"packed weight {packed.shape} cannot hold {units} units of "
                             f"{data.shape[1]} inputs")
    return TensorType((data.shape[0], units), "int32")


register_op("nn.contrib_dense_int8", type_rel=_dense_int8_rel,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2, attrs={"units": REQUIRED},
            compute=topi_compute("x86.dense_int8:dense_int8", lambda a, t: {"units": a.units}),
            schedules=cpu("x86.dense_int8:schedule_dense_int8"),
            doc="int32 y = x @ W.T for 8-bit x and a weight packed for an int8 dot product")

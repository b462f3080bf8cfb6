"""The execution plan kiln's C runtime reads: a model's execution graph lowered, when it is
exported, to flat little-endian records, so that the C side needs no JSON parser and checks
every index and offset against sizes it has read before.

    magic "KILNPLAN", u32 version, u32 counts of entries, inputs, outputs, kernels, u64 arena bytes
    entry:  u32 place (0: arena, 1: constant), u64 offset (in the arena / the constants blob),
            u64 bytes, str dtype, u32 ndim, i64 shape[ndim]
    input:  str name, u32 entry              output: u32 entry
    kernel: str symbol, u32 inputs, u32 outputs, u32 entries[inputs + outputs],
            u32 messages, str message[...]

A str is a u32 length and that many UTF-8 bytes. A view shares its root's place and offset;
planned storages, then inputs (and any other unplanned entry) get 64-byte aligned places in one
arena. A kernel's messages explain the non-zero statuses it returns (status k: message k).
"""
from __future__ import annotations

import struct

import numpy as np

PLAN_SYMBOL = "kiln_model_plan"
PLAN_SIZE_SYMBOL = "kiln_model_plan_size"
MAGIC = b"KILNPLAN"
VERSION = 1
PLACE_ARENA, PLACE_CONSTANT = 0, 1
ALIGN = 64


class PlanError(ValueError):
    """A model the C runtime cannot run; the message says why."""


def _str(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<I", len(data)) + data


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def pack_plan(graph: dict, constants: dict, symbol_prefix: str,
              messages: dict | None = None) -> bytes:
    """The plan of `graph` (an execution graph, as kiln.compile writes it): `constants` maps
    each constant's name to where it lies in the exported blob (kiln.runtime.load's
    blob_constants), `symbol_prefix` makes a kernel's native symbol from its name, `messages`
    maps a kernel to its check messages. Raises PlanError for what the C runtime does not run
    (external or GPU kernels, symbolic shapes) and for a graph whose views or constants do not
    fit their entries.

    Example:
        >>> g = {"entries": [{"shape": [2], "dtype": "float32", "storage": -1},
        ...                  {"shape": [2], "dtype": "float32", "storage": 0}],
        ...      "storages": [8], "inputs": [{"name": "x", "entry": 0}], "constants": [],
        ...      "kernels": [{"func": "f", "inputs": [0], "outputs": [1]}], "outputs": [1],
        ...      "functions": {"f": {"shape_vars": []}}}
        >>> pack_plan(g, {}, "kfn_")[:8]
        b'KILNPLAN'
    """
    if "device_module" in graph:
        raise PlanError("its kernels are for a GPU, which the C runtime does not drive")
    if graph.get("external_modules"):
        raise PlanError("it has external (BYOC) functions, which run through Python modules")
    if graph.get("dims"):
        raise PlanError(f"it has symbolic dimensions {sorted(graph['dims'])}, which the C "
                        f"runtime's fixed arena cannot size")
    entries = graph["entries"]
    root = []
    for k, e in enumerate(entries):
        base = e.get("view_of")
        if base is not None and (not isinstance(base, int) or not 0 <= base < k
                                 or _nbytes(entries[base]) != _nbytes(e)):
            raise PlanError(f"entry {k} cannot view entry {base!r}")
        root.append(k if base is None else root[base])
    constant_of = {c["entry"]: c["name"] for c in graph["constants"]}
    for k, name in constant_of.items():
        blob = constants.get(name)
        if blob is None or (blob["dtype"], list(blob["shape"])) != \
                (str(entries[k]["dtype"]), [int(d) for d in entries[k]["shape"]]):
            raise PlanError(f"constant {name!r} does not fit entry {k}")
    storage_at, end = [], 0
    for size in graph["storages"]:
        storage_at.append(end)
        end = _aligned(end + max(int(size), 1))
    place = {}                                  # root -> (place, offset)
    for k, e in enumerate(entries):
        if root[k] != k:
            continue
        if k in constant_of:
            place[k] = (PLACE_CONSTANT, constants[constant_of[k]]["offset"])
        elif e["storage"] >= 0:
            place[k] = (PLACE_ARENA, storage_at[e["storage"]])
        else:                                   # an input (or anything else unplanned)
            place[k] = (PLACE_ARENA, end)
            end = _aligned(end + max(_nbytes(e), 1))
    out = [MAGIC, struct.pack("<IIIIIQ", VERSION, len(entries), len(graph["inputs"]),
                              len(graph["outputs"]), len(graph["kernels"]), end)]
    for k, e in enumerate(entries):
        where, offset = place[root[k]]
        shape = [int(d) for d in e["shape"]]
        out += [struct.pack("<IQQ", where, offset, _nbytes(e)), _str(str(e["dtype"])),
                struct.pack(f"<I{len(shape)}q", len(shape), *shape)]
    for i in graph["inputs"]:
        out += [_str(i["name"]), struct.pack("<I", i["entry"])]
    out += [struct.pack("<I", e) for e in graph["outputs"]]
    messages = messages or {}
    for kern in graph["kernels"]:
        func = kern["func"]
        if graph["functions"][func].get("shape_vars"):
            raise PlanError(f"kernel {func} has symbolic shapes")
        args = kern["inputs"] + kern["outputs"]
        texts = list(messages.get(func, ()))
        out += [_str(symbol_prefix + func),
                struct.pack(f"<II{len(args)}I", len(kern["inputs"]), len(kern["outputs"]), *args),
                struct.pack("<I", len(texts)), *[_str(t) for t in texts]]
    return b"".join(out)


def _nbytes(entry: dict) -> int:
    return int(np.prod(entry["shape"], dtype=np.int64)) * np.dtype(entry["dtype"]).itemsize

"""load_module: open a model library written by CompiledModel.export_library.

The library holds the kernels and one read-only blob: a JSON header (execution graph,
function signatures, constant layout) followed by the constants' bytes, 64-byte aligned.
Constants are used in place from the mapped library (no copy, no pickle).
"""
from __future__ import annotations

import ctypes
import json
from pathlib import Path

import numpy as np

from . import file_checksum
from .external import load_external, with_external
from .function_info import FunctionInfo
from .model import ModelError, ModelLibrary
from .module import Module
from .shared_object import ForeignMachineError, SharedObjectError, open_shared_object
from .support_lib import parallel_launch_address

SYMBOL_PREFIX = "kfn_"          # native symbol of kernel `name` is SYMBOL_PREFIX + name
BLOB_SYMBOL = "kiln_model_blob"
BLOB_SIZE_SYMBOL = "kiln_model_blob_size"
BLOB_FORMAT = "kiln-model"
BLOB_VERSION = 1


def pack_blob(graph_json: str, params: dict) -> bytes:
    """The blob export_library embeds: header length (8 bytes, little endian), JSON header,
    then each constant at a 64-byte aligned offset.

    Example:
        >>> len(pack_blob('{"version": 1}', {})) > 8
        True
    """
    layout, offset, chunks = {}, 0, []
    for name, arr in params.items():
        arr = np.require(arr, requirements="C")      # keeps a 0-d array 0-d
        offset = (offset + 63) // 64 * 64
        layout[name] = {"dtype": arr.dtype.name, "shape": list(arr.shape), "offset": offset,
                        "nbytes": arr.nbytes}
        chunks.append((offset, arr.tobytes()))
        offset += arr.nbytes
    header = json.dumps({"format": BLOB_FORMAT, "version": BLOB_VERSION, "graph": graph_json,
                         "params": layout}).encode()
    start = (8 + len(header) + 63) // 64 * 64
    out = bytearray(start + offset)
    out[:8] = len(header).to_bytes(8, "little")
    out[8:8 + len(header)] = header
    for off, data in chunks:
        out[start + off:start + off + len(data)] = data
    return bytes(out)


def blob_constants(blob: bytes) -> dict:
    """Each constant of a blob (pack_blob's): its dtype, shape, bytes and where it starts, in
    bytes from the blob's start ("offset").

    Example:
        >>> blob_constants(pack_blob('{"version": 1}', {"w": np.ones(2, "float32")}))["w"]
        {'dtype': 'float32', 'shape': [2], 'offset': 192, 'nbytes': 8}
    """
    hlen = int.from_bytes(blob[:8], "little")
    start = (8 + hlen + 63) // 64 * 64
    return {name: {**p, "offset": start + p["offset"]}
            for name, p in json.loads(bytes(blob[8:8 + hlen]))["params"].items()}


def _unpack_blob(blob: memoryview, path) -> tuple[str, dict]:
    try:
        hlen = int.from_bytes(blob[:8], "little")
        if not 0 < hlen < len(blob):
            raise ValueError("bad header length")
        header = json.loads(bytes(blob[8:8 + hlen]))
        if header.get("format") != BLOB_FORMAT:
            raise ValueError("not a kiln model blob")
        if header.get("version") != BLOB_VERSION:
            raise ValueError(f"blob version {header.get('version')} is not supported")
        start = (8 + hlen + 63) // 64 * 64
        params = {}
        for name, p in header["params"].items():
            dtype = np.dtype(p["dtype"])
            count = int(np.prod(p["shape"], dtype=np.int64))
            if start + p["offset"] + count * dtype.itemsize > len(blob):
                raise ValueError(f"constant {name!r} lies outside the blob")
            arr = np.frombuffer(blob, dtype=dtype, count=count, offset=start + p["offset"])
            params[name] = arr.reshape(p["shape"])
        return header["graph"], params
    except (ValueError, KeyError, TypeError) as err:
        raise ModelError(f"{path}: corrupt kiln model library ({err})") from None


def load_module(path) -> ModelLibrary:
    """Load a model library exported with export_library; run it with GraphExecutor.

    Example:
        >>> lib = load_module("model.so")                       # doctest: +SKIP
        >>> m = GraphExecutor(lib); m.run(x=x)                  # doctest: +SKIP
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no model library at {path}")
    parallel_launch_address()          # kernels link against the support library (RTLD_GLOBAL)
    try:
        # The whole file's checksum, before the loader maps (and so runs) any of it.
        lib = open_shared_object(path, check=file_checksum.verify)
    except ForeignMachineError as err:
        raise ModelError(f"{err}: run it there, with kiln's C runtime (kiln c-runtime; "
                         f"docs/deploy_arm.md)") from None
    except (SharedObjectError, file_checksum.ChecksumError) as err:
        raise ModelError(str(err)) from None
    try:
        base = ctypes.addressof(ctypes.c_char.in_dll(lib, BLOB_SYMBOL))
        size = ctypes.c_int64.in_dll(lib, BLOB_SIZE_SYMBOL).value
    except ValueError:
        raise ModelError(f"{path}: not a kiln model library (no {BLOB_SYMBOL})") from None
    blob = memoryview((ctypes.c_char * size).from_address(base)).cast("B")
    graph_json, params = _unpack_blob(blob, path)
    graph = json.loads(graph_json)
    if "device_module" in graph:                  # a model compiled for a GPU target
        from .gpu import DeviceModule
        try:
            module = DeviceModule.from_dict(graph["device_module"])
        except ValueError as err:
            raise ModelError(f"{path}: corrupt kiln model library ({err})") from None
        module.keepalive = lib          # the constants are the mapped library's bytes
        return ModelLibrary(graph_json, module, params)
    externals = [load_external(saved, str(path)) for saved in graph.get("external_modules", ())]
    external_names = {n for m in externals for n in m.function_names()}
    infos = {name: FunctionInfo.from_dict(d) for name, d in graph.get("functions", {}).items()
             if name not in external_names}

    def address(name):
        try:
            return ctypes.cast(getattr(lib, SYMBOL_PREFIX + name), ctypes.c_void_p).value
        except AttributeError:
            raise ModelError(f"{path}: kernel {name!r} is missing from the library") from None

    module = Module(infos, address, {}, None, lib, "so")
    missing = sorted(external_names - set(graph.get("functions", {})))
    if missing:
        raise ModelError(f"{path}: external functions {missing} are not in the model's graph")
    num_inputs = {k["func"]: len(k["inputs"]) for k in graph.get("kernels", ())}
    return ModelLibrary(graph_json, with_external(module, externals, num_inputs), params)

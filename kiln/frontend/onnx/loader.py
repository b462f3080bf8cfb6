"""Reading an ONNX model from a path, bytes or a ModelProto, with errors that name the file."""
from __future__ import annotations

import os
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from ..common import FrontendError

# The ONNX default operator set is named "" (or "ai.onnx" by some exporters).
DEFAULT_DOMAINS = ("", "ai.onnx")


def load_model(model_or_path) -> tuple[onnx.ModelProto, str]:
    """The ModelProto and a description of where it came from (for error messages).

    Example:
        >>> model, where = load_model("resnet18.onnx")     # doctest: +SKIP
    """
    if isinstance(model_or_path, onnx.ModelProto):
        where = f"model {model_or_path.graph.name!r}" if model_or_path.graph.name else "model"
        return _checked(model_or_path, where), where
    if isinstance(model_or_path, (bytes, bytearray)):
        where = "model bytes"
        try:
            model = onnx.load_model_from_string(bytes(model_or_path))
        except (DecodeError, ValueError, RuntimeError) as err:
            raise FrontendError(f"{where}: not a readable ONNX model ({err})") from None
        return _checked(model, where), where
    if isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        where = f"ONNX file {path!r}"
        if not os.path.isfile(path):
            raise FrontendError(f"{where} does not exist or is not a file")
        try:
            model = onnx.load(path, load_external_data=False)
        except (DecodeError, ValueError, RuntimeError, OSError, UnicodeDecodeError) as err:
            raise FrontendError(f"{where} is corrupt or not an ONNX model: "
                                f"{type(err).__name__}: {err}") from None
        _load_external_data(model, path, where)
        return _checked(model, where), where
    raise TypeError(f"from_onnx takes an onnx.ModelProto, a path or bytes, got "
                    f"{type(model_or_path).__name__}")


def _load_external_data(model: onnx.ModelProto, path: str, where: str) -> None:
    """Read the weights that the model keeps in files beside it (onnx.save with
    save_as_external_data), with errors that name the data file: a missing or short one is a
    problem with what the user gave, not a crash."""
    from onnx import external_data_helper as ext

    base = os.path.dirname(os.path.abspath(path))
    tensors = [t for t in ext._get_all_tensors(model) if ext.uses_external_data(t)]
    for tensor in tensors:
        info = ext.ExternalDataInfo(tensor)
        what = f"{where}: tensor {tensor.name!r} is stored in external data file {info.location!r}"
        location = Path(info.location)
        if location.is_absolute() or ".." in location.parts:
            # A model names data beside it; anything else is for onnx's loader to refuse, not
            # for kiln to probe (its errors would tell whether such a file exists).
            raise FrontendError(f"{what}, which is not a path inside the model's directory")
        data_path = os.path.join(base, info.location)
        if not os.path.isfile(data_path):
            raise FrontendError(f"{what}, which does not exist (looked for {data_path}); keep "
                                f"the data file beside the model")
        offset = int(info.offset or 0)
        length = int(info.length or 0) or _nbytes(tensor)
        size = os.path.getsize(data_path)
        if length is not None and offset + length > size:
            raise FrontendError(f"{what} at bytes {offset}..{offset + length}, but the file has "
                                f"only {size} bytes (truncated?)")
    if tensors:
        try:
            ext.load_external_data_for_model(model, base)
        except (ValueError, OSError, onnx.checker.ValidationError) as err:
            raise FrontendError(f"{where}: cannot read its external data "
                                f"({type(err).__name__}: {err})") from None


def _nbytes(tensor) -> int | None:
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return None
    count = 1
    for d in tensor.dims:
        count *= int(d)
    return count * itemsize if itemsize else None


def _checked(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    # Random bytes can decode as a valid but empty protobuf message: insist on a real graph.
    if not model.HasField("graph") or not model.graph.output:
        raise FrontendError(f"{where} is corrupt or not an ONNX model: it has no graph outputs")
    if opset_version(model) is None:
        raise FrontendError(f"{where} does not import the default ONNX operator set")
    return model


def opset_version(model: onnx.ModelProto):
    """The version of the default ONNX operator set the model imports (None if absent).

    Example:
        >>> opset_version(onnx.helper.make_model(graph, opset_imports=[   # doctest: +SKIP
        ...     onnx.helper.make_opsetid("", 17)]))
        17
    """
    for imp in model.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            return int(imp.version)
    # Very old models (IR version < 3) carry no opset import at all; ONNX treats them as opset 1.
    return 1 if model.ir_version and model.ir_version < 3 else None

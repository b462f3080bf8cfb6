"""The runtime side of the ONNX Runtime fallback (kiln.fallback.onnxruntime): regions of a
model run in ONNX Runtime sessions. It imports nothing of kiln's compiler, so that a library
holding such regions loads where only kiln.runtime is used.

Example:
    >>> OnnxRuntimeModule.load_from_bytes(data).function_names()   # doctest: +SKIP
    ['onnxruntime_main_0']
"""
from __future__ import annotations

import base64
import json
import threading

from ..runtime.external import ExternalModule, register_external_runtime
from ..runtime.function_info import FunctionInfo
from ..runtime.model import ModelError

__all__ = ["COMPILER", "OnnxRuntimeModule", "require_onnxruntime"]

COMPILER = "onnxruntime"


def require_onnxruntime():
    """The onnxruntime module, or a ModelError saying that it is needed and how to get it.

    Example:
        >>> require_onnxruntime().__name__   # doctest: +SKIP
        'onnxruntime'
    """
    try:
        import onnxruntime
    except ImportError as err:
        raise ModelError(f"external runtime {COMPILER!r} needs ONNX Runtime, which cannot be "
                         f"imported here ({err}): pip install onnxruntime") from None
    return onnxruntime


class OnnxRuntimeModule(ExternalModule):
    """Regions run by ONNX Runtime: symbol -> {"info": FunctionInfo, "inputs": how many of
    its parameters are inputs, "model": ONNX bytes}.
    A session per region is made on its first call, with kiln's thread count.

    Example:
        >>> OnnxRuntimeModule.load_from_bytes(m.save_to_bytes()).function_names()  # doctest: +SKIP
        ['onnxruntime_main_0']
    """

    type_key = COMPILER

    def __init__(self, functions: dict):
        require_onnxruntime()               # a library holding regions is of no use without it
        self.functions = functions
        self._sessions: dict = {}
        self._lock = threading.Lock()

    def function_names(self) -> list[str]:
        return list(self.functions)

    def function_info(self, name: str) -> FunctionInfo:
        return self.functions[name]["info"]

    def _session(self, name: str):
        with self._lock:
            session = self._sessions.get(name)
            if session is None:
                ort = require_onnxruntime()
                from ..runtime.threadpool import num_threads
                options = ort.SessionOptions()
                options.intra_op_num_threads = num_threads()
                options.inter_op_num_threads = 1
                session = self._sessions[name] = ort.InferenceSession(
                    self.functions[name]["model"], options, providers=["CPUExecutionProvider"])
            return session

    def get_function(self, name: str):
        spec = self.functions[name]
        n_in = spec["inputs"]
        in_names = [p.name for p in spec["info"].params[:n_in]]

        def run(*arrays):
            session = self._session(name)
            results = session.run(None, dict(zip(in_names, arrays[:n_in])))
            for out, value in zip(arrays[n_in:], results):
                out[...] = value

        return run

    def save_to_bytes(self) -> bytes:
        return json.dumps({n: {"info": f["info"].to_dict(), "inputs": f["inputs"],
                               "model": base64.b64encode(f["model"]).decode("ascii")}
                           for n, f in self.functions.items()}).encode()

    @staticmethod
    def load_from_bytes(data: bytes) -> "OnnxRuntimeModule":
        try:
            saved = json.loads(data)
            functions = {n: {"info": FunctionInfo.from_dict(f["info"]), "inputs": int(f["inputs"]),
                             "model": base64.b64decode(f["model"], validate=True)}
                         for n, f in saved.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ModelError(f"a saved {COMPILER} module is malformed: {err}") from None
        return OnnxRuntimeModule(functions)


register_external_runtime(COMPILER, OnnxRuntimeModule.load_from_bytes, override=True)

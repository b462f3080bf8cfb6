"""kiln.runtime: what a compiled model needs to run — arrays, devices, modules, the function
registry, the thread pool and timing. It imports nothing else from kiln.

Example:
    >>> import kiln.runtime as rt
    >>> rt.array([1.0, 2.0], dtype="float32").numpy()
    array([1., 2.], dtype=float32)
"""
from .device import Device, cpu, cuda, opencl
from .function_info import FunctionInfo, ParamInfo
from .module import FunctionNotFoundError, Module
from .native_build import NativeBuildError, build_shared_library, cache_dir
from .ndarray import ALIGNMENT, NDArray, array, empty, from_dlpack
from .packed_func import ArgumentError, NativeCallError, PackedFunction
from .registry import (GlobalFuncNotFound, get_global_func, list_global_func_names,
                       register_func, remove_global_func)
from .support_lib import parallel_launch_address, symbol_addresses as support_symbol_addresses
from .threadpool import num_threads, set_num_threads
from .timing import TimingResult, time_evaluator

__all__ = [
    "ALIGNMENT", "ArgumentError", "Device", "FunctionInfo", "FunctionNotFoundError",
    "GlobalFuncNotFound", "Module", "NDArray", "NativeBuildError", "NativeCallError",
    "PackedFunction", "ParamInfo", "TimingResult", "array", "build_shared_library", "cache_dir",
    "cpu", "cuda", "empty", "opencl", "from_dlpack", "get_global_func", "list_global_func_names", "num_threads",
    "parallel_launch_address", "register_func", "remove_global_func", "set_num_threads",
    "support_symbol_addresses",
    "time_evaluator",
]

from .graph_executor import GraphExecutor  # noqa: E402
from .load import load_module  # noqa: E402
from .model import ModelError, ModelLibrary  # noqa: E402
from .profiler import profile  # noqa: E402

__all__ += ["GraphExecutor", "ModelError", "ModelLibrary", "load_module", "profile"]

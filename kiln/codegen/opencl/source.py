"""Kernels as OpenCL C: the spelling of kiln/codegen/gpu/source.py's hooks."""
from __future__ import annotations

from ..gpu.source import DeviceFunction, DeviceModuleEmitter

PRELUDE = """\
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef char int8_t; typedef short int16_t; typedef int int32_t; typedef long int64_t;
typedef uchar uint8_t; typedef ushort uint16_t; typedef uint uint32_t; typedef ulong uint64_t;
#define INT64_C(x) x##L
#define UINT64_C(x) x##UL
"""

_INDEX = {"blockIdx.x": "get_group_id(0)", "blockIdx.y": "get_group_id(1)",
          "blockIdx.z": "get_group_id(2)", "threadIdx.x": "get_local_id(0)",
          "threadIdx.y": "get_local_id(1)", "threadIdx.z": "get_local_id(2)"}


class OpenCLFunction(DeviceFunction):
    def thread_index(self, tag: str) -> str:
        return f"(int){_INDEX[tag]}"

    def barrier(self) -> str:
        return "barrier(CLK_LOCAL_MEM_FENCE);"

    def buffer_param(self, buf, name: str) -> str:
        return f"__global {self.types.memory_ctype(buf.dtype)}* restrict {name}"

    def shared_decl(self, ctype: str, name: str, count: int) -> str:
        return f"__local {ctype} {name}[{count}];"

    def signature(self, name: str, params: list, threads: int) -> str:
        return f"__kernel void {name}({', '.join(params)})"

    def libm_name(self, fn: str, dtype: str) -> str:
        return fn                     # OpenCL's math functions are overloaded on the type


class OpenCLModuleEmitter(DeviceModuleEmitter):
    PRELUDE = PRELUDE
    KERNEL_FUNCTION = OpenCLFunction

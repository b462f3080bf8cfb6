"""Kernels as CUDA C (compiled by NVRTC): the spelling of kiln/codegen/gpu/source.py's hooks."""
from __future__ import annotations

from ...tir import dtype as dt
from ..gpu.source import DeviceFunction, DeviceModuleEmitter

# NVRTC compiles without the C library's headers: the fixed-width types and the float
# constants the C back-end's literals use are defined here.
PRELUDE = """\
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define _Bool bool
#define INT64_C(x) x##LL
#define UINT64_C(x) x##ULL
#define NAN __int_as_float(0x7fc00000)
#define INFINITY __int_as_float(0x7f800000)
"""

_INDEX = {"blockIdx.x": "blockIdx.x", "blockIdx.y": "blockIdx.y", "blockIdx.z": "blockIdx.z",
          "threadIdx.x": "threadIdx.x", "threadIdx.y": "threadIdx.y",
          "threadIdx.z": "threadIdx.z"}


class CudaFunction(DeviceFunction):
    def thread_index(self, tag: str) -> str:
        return f"(int){_INDEX[tag]}"

    def barrier(self) -> str:
        return "__syncthreads();"

    def buffer_param(self, buf, name: str) -> str:
        return f"{self.types.memory_ctype(buf.dtype)}* __restrict__ {name}"

    def shared_decl(self, ctype: str, name: str, count: int) -> str:
        return f"__shared__ {ctype} {name}[{count}];"

    def signature(self, name: str, params: list, threads: int) -> str:
        return (f'extern "C" __global__ void __launch_bounds__({threads}) '
                f"{name}({', '.join(params)})")

    def libm_name(self, fn: str, dtype: str) -> str:
        return fn if dt.element_of(dtype) == "float64" else fn + "f"


class CudaModuleEmitter(DeviceModuleEmitter):
    PRELUDE = PRELUDE
    KERNEL_FUNCTION = CudaFunction

"""Compilation targets: a kind ("llvm", "c", "cuda", "opencl") plus options, parsed from
strings like TVM's.

    Target("llvm")                                   # the host CPU with all its features
    Target("llvm -mcpu=skylake-avx512 -mattr=+avx512f")
    Target("c")                                      # C source compiled by the system cc
    Target("cuda -arch=sm_80")                       # CUDA C through NVRTC (PTX)
    Target("opencl")                                 # OpenCL C, built by the OpenCL driver
    Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon")   # 64-bit ARM, cross-compiled
    Target("rasp4b")                                 # a preset: the same, for a Cortex-A72

A preset (PRESETS) names a whole target, and options after it override its own.

A target's `keys` say which schedules fit it, most specific first (("x86", "cpu"),
("arm_cpu", "cpu"), ("cuda", "gpu"), ...); a GPU target's launching code runs on its `host` ("llvm").

A Target is an immutable value (equal and hashed by its text). Entered as a context
(`with Target(...)`), it is the *current* target that schedules size their vectors and
register tiles for (kiln.compile enters its target); outside any, the current target is the
host (`current_target()`).

An "llvm" target's -mcpu, -mattr features and -mtriple must be names LLVM knows: they are
checked against LLVM's own lists (kiln.target_names), because LLVM itself would end the process
on a bad CPU name and ignore a bad feature. An unknown name is a TargetNameError (a ValueError)
that names the closest known ones.
"""
from __future__ import annotations

import threading
from functools import lru_cache

from .target_names import TargetNameError, check_llvm_target

__all__ = ["Target", "TargetNameError", "as_target", "current_target"]

KINDS = ("llvm", "c", "cuda", "opencl", "vdla")
GPU_KINDS = ("cuda", "opencl")
_CPU_OPTIONS = ("mcpu", "mattr", "mtriple", "opt-level")
_GPU_OPTIONS = ("max_num_threads", "max_shared_memory_per_block")
_OPTIONS_OF = {"llvm": _CPU_OPTIONS, "c": _CPU_OPTIONS, "cuda": ("arch",) + _GPU_OPTIONS,
               "opencl": _GPU_OPTIONS, "vdla": ()}
# Defaults of the GPU limits: CUDA's per-block maxima (sm_50 and later); for OpenCL the
# work-group size embedded GPUs (Mali, Adreno) accept and the minimum local memory the
# OpenCL specification guarantees for a GPU.
_GPU_DEFAULTS = {"cuda": {"arch": "sm_80", "max_num_threads": "1024",
                          "max_shared_memory_per_block": "49152"},
                 "opencl": {"max_num_threads": "256", "max_shared_memory_per_block": "32768"}}

# Named targets, as TVM's tvm.target.arm_cpu(model) names boards: the text they stand for.
PRESETS = {
    "arm_cpu": "llvm -mtriple=aarch64-linux-gnu -mattr=+neon",
    "rasp4b": "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon",    # Raspberry Pi 4
    "rasp3b": "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a53 -mattr=+neon",    # the paper's A53
}
_X86_ARCHS = ("x86_64", "i386", "i686")

# Widest vector register of CPUs named without -mattr (their features come from the name).
_CPU_VECTOR_BITS = {
    **dict.fromkeys(("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
                     "icelake-server", "tigerlake", "rocketlake", "sapphirerapids",
                     "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids",
                     "znver4", "znver5", "x86-64-v4", "knl", "knm"), 512),
    **dict.fromkeys(("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
                     "arrowlake", "lunarlake", "gracemont", "znver1", "znver2", "znver3",
                     "x86-64-v3", "bdver4", "btver2"), 256),
}

# Int8 dot-product instructions of CPUs named without -mattr (AVX-512 VNNI; AVX-VNNI, its
# 256-bit VEX form).
_CPU_INT8_DOT = {
    **dict.fromkeys(("cascadelake", "cooperlake", "icelake-client", "icelake-server", "tigerlake",
                     "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids",
                     "graniterapids-d", "diamondrapids", "znver4", "znver5"), ("avx512vnni",)),
    **dict.fromkeys(("alderlake", "raptorlake", "meteorlake", "arrowlake", "lunarlake",
                     "gracemont"), ("avxvnni",)),
}
for _cpu in ("sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d",
             "diamondrapids", "znver5"):
    _CPU_INT8_DOT[_cpu] += ("avxvnni",)


_VENDORS = frozenset(("unknown", "pc", "apple"))


@lru_cache(maxsize=None)
def _triple_parts(triple: str) -> tuple[str, ...]:
    """A triple as (architecture, operating system, environment ...), without its vendor, so
    that "aarch64-linux-gnu" and "aarch64-unknown-linux-gnu" compare equal."""
    arch, *rest = triple.split("-")
    return ({"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch),
            *(part for part in rest if part not in _VENDORS))


@lru_cache(maxsize=1)
def _host() -> tuple[str, str, tuple[str, ...]]:
    import llvmlite.binding as llvm
    features = tuple(f for f in llvm.get_host_cpu_features().flatten().split(",") if f)
    return llvm.get_host_cpu_name(), llvm.get_process_triple(), features


class Target:
    """A parsed target description.

    Example:
        >>> t = Target("llvm -mcpu=skylake-avx512 -mattr=+avx512f")
        >>> (t.kind, t.mcpu, t.mattr, t.vector_width_bits)
        ('llvm', 'skylake-avx512', ['+avx512f'], 512)
    """

    __slots__ = ("kind", "_options", "_text")

    def __init__(self, spec: "str | Target"):
        if isinstance(spec, Target):
            self.kind, self._options, self._text = spec.kind, spec._options, spec._text
            return
        if not isinstance(spec, str) or not spec.split():
            raise ValueError(f"a target is a string such as 'llvm' or 'c -mcpu=native', got {spec!r}")
        kind, *words = spec.split()
        if kind in PRESETS:
            kind, *preset = PRESETS[kind].split()
            words = preset + words          # later options win (the dict below keeps the last)
        if kind not in KINDS:
            raise ValueError(f"unknown target kind {kind!r} in {spec!r}; known kinds: "
                             f"{', '.join(KINDS)}; presets: {', '.join(PRESETS)}")
        options: dict[str, str] = {}
        for word in words:
            key, eq, value = word.lstrip("-").partition("=")
            if not word.startswith("-") or not eq or not value:
                raise ValueError(f"target option {word!r} in {spec!r} is not of the form -key=value")
            if key not in _OPTIONS_OF[kind]:
                raise ValueError(f"unknown target option -{key} for kind {kind!r} in {spec!r}; "
                                 "known options: " + ", ".join("-" + o for o in _OPTIONS_OF[kind]))
            options[key] = value
        for feature in filter(None, options.get("mattr", "").split(",")):
            if feature[0] not in "+-":
                raise ValueError(f"target feature {feature!r} in {spec!r} must start with + or -")
        for key in _GPU_OPTIONS:
            if key in options and not (options[key].isdigit() and int(options[key]) > 0):
                raise ValueError(f"-{key} must be a positive integer in {spec!r}")
        arch = options.get("arch")
        if arch is not None and not (arch.startswith("sm_") and arch[3:].rstrip("af").isdigit()):
            raise ValueError(f"-arch={arch} in {spec!r} is not a CUDA architecture such as sm_80")
        if options.get("opt-level", "3") not in ("0", "1", "2", "3"):
            raise ValueError(f"-opt-level must be 0, 1, 2 or 3 in {spec!r}")
        # -mcpu=native alone names nothing to check (and reading LLVM's lists costs a process)
        if kind == "llvm" and (options.keys() & {"mattr", "mtriple"}
                               or options.get("mcpu", "native") != "native"):
            features = [f for f in options.get("mattr", "").split(",") if f]
            check_llvm_target(spec.strip(), options.get("mtriple") or _host()[1],
                              options.get("mcpu"), features)
        self.kind = kind
        self._options = tuple(sorted(options.items()))
        self._text = " ".join([kind] + [f"-{k}={v}" for k, v in self._options])

    # -------------------------------------------------------------------------------- options
    def _opt(self, key: str) -> str | None:
        value = dict(self._options).get(key)
        return _GPU_DEFAULTS.get(self.kind, {}).get(key) if value is None else value

    @property
    def is_gpu(self) -> bool:
        """True for the GPU kinds (cuda, opencl)."""
        return self.kind in GPU_KINDS

    @property
    def is_device(self) -> bool:
        """True for targets whose code runs beside a host CPU: GPUs and accelerators."""
        return self.is_gpu or self.kind == "vdla"

    @property
    def keys(self) -> tuple[str, ...]:
        """Which schedules fit this target, most specific first.

        Example:
            >>> Target("opencl").keys
            ('opencl', 'gpu')
        """
        if self.is_gpu:
            return (self.kind, "gpu")
        if self.kind == "vdla":
            return ("vdla",)
        arch = self.machine_arch
        if arch in _X86_ARCHS:
            return ("x86", "cpu")
        return ("arm_cpu", "cpu") if arch == "aarch64" else ("cpu",)

    @property
    def machine_arch(self) -> str:
        """The instruction set the code is for: the first part of the triple ("x86_64",
        "aarch64", ...).

        Example:
            >>> Target("rasp4b").machine_arch
            'aarch64'
        """
        return _triple_parts(self.mtriple)[0]

    @property
    def is_cross(self) -> bool:
        """True when the code is for another machine than this one (another instruction set,
        operating system or ABI): it can be exported, to run there, but not run here.

        Example:
            >>> Target("arm_cpu").is_cross          # on an x86-64 Linux machine
            True
        """
        return _triple_parts(self.mtriple) != _triple_parts(_host()[1])

    @property
    def host(self) -> "Target":
        """Where the code that launches a GPU target's kernels (or an accelerator's programs)
        runs: the target itself for a CPU."""
        return _host_target() if self.is_device else self

    @property
    def arch(self) -> str:
        """The CUDA architecture (cuda targets): "sm_80" unless -arch says otherwise."""
        if self.kind != "cuda":
            raise AttributeError(f"target {self} has no CUDA architecture")
        return self._opt("arch")

    @property
    def max_num_threads(self) -> int:
        """Most threads in one block / work-group (GPU targets)."""
        return int(self._opt("max_num_threads") or 1)

    @property
    def max_shared_memory_per_block(self) -> int:
        """Bytes of shared (OpenCL: local) memory one block may use (GPU targets)."""
        return int(self._opt("max_shared_memory_per_block") or 0)

    @property
    def is_host(self) -> bool:
        """True when no -mcpu / -mtriple was given: code for the machine running kiln."""
        return self._opt("mcpu") in (None, "native") and self._opt("mtriple") is None

    @property
    def mcpu(self) -> str:
        """The CPU the code is tuned for: -mcpu, else this machine's, else (for another
        instruction set) LLVM's "generic"."""
        cpu = self._opt("mcpu")
        if cpu in (None, "native"):
            return "generic" if self.is_cross else _host()[0]
        return cpu

    @property
    def mattr(self) -> list[str]:
        """Features handed to LLVM: the host's (when targeting the host) then the -mattr ones."""
        given = [f for f in (self._opt("mattr") or "").split(",") if f]
        return (list(_host()[2]) + given) if self.is_host else given

    @property
    def mtriple(self) -> str:
        return self._opt("mtriple") or _host()[1]

    @property
    def opt_level(self) -> int:
        return int(self._opt("opt-level") or 3)

    @property
    def features(self) -> str:
        """The -mattr list as LLVM's comma-separated feature string."""
        return ",".join(self.mattr)

    @property
    def vector_width_bits(self) -> int:
        """Width of the widest vector register: 512 with avx512f, 256 with avx2, else 128."""
        enabled: dict[str, bool] = {}
        for f in self.mattr:
            enabled[f[1:]] = f[0] == "+"
        if enabled.get("avx512f"):
            return 512
        if enabled.get("avx2") or enabled.get("avx"):
            return 256
        if self.is_host or "avx512f" in enabled or "avx2" in enabled:
            return 128
        return _CPU_VECTOR_BITS.get(self.mcpu, 128)

    def has_feature(self, name: str) -> bool:
        """Whether the target's CPU has instruction-set feature `name` (LLVM's spelling, e.g.
        "avx512vnni"): from -mattr, else (for vector widths and int8 dot products) from the
        CPU's name.

        Example:
            >>> Target("llvm -mcpu=cascadelake").has_feature("avx512vnni")
            True
        """
        for f in reversed(self.mattr):
            if f[1:] == name:
                return f[0] == "+"
        if self.is_host:
            return False
        if name in ("avx512f", "avx2"):
            return self.vector_width_bits >= (512 if name == "avx512f" else 256)
        return name in _CPU_INT8_DOT.get(self.mcpu, ())

    # ------------------------------------------------------------------------------ value type
    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Target({self._text!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Target) and other._text == self._text

    def __hash__(self) -> int:
        return hash(("Target", self._text))

    def __setattr__(self, name, value):
        if hasattr(self, "_text"):
            raise AttributeError("Target is immutable; parse a new one")
        object.__setattr__(self, name, value)

    # ------------------------------------------------------------------------ current target
    def __enter__(self) -> "Target":
        _stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        _stack().pop()

    @property
    def vector_registers(self) -> int:
        """Vector registers the code may use: 32 with AVX-512 (zmm0-31) and on AArch64 (NEON's
        v0-v31), else 16."""
        return 32 if self.vector_width_bits == 512 or self.machine_arch == "aarch64" else 16


_entered = threading.local()


def _stack() -> list:
    if not hasattr(_entered, "stack"):
        _entered.stack = []
    return _entered.stack


def current_target() -> Target:
    """The innermost entered Target of this thread, else the host ("llvm").

    Example:
        >>> with Target("llvm -mcpu=haswell"):
        ...     current_target().vector_width_bits
        256
    """
    stack = _stack()
    return stack[-1] if stack else _host_target()


@lru_cache(maxsize=1)
def _host_target() -> Target:
    return Target("llvm")


def as_target(target: "str | Target") -> Target:
    """Accept a Target or its text.

    Example:
        >>> as_target("c").kind
        'c'
    """
    return target if isinstance(target, Target) else Target(target)

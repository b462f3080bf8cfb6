"""Which device a measurement needs, as a name a dask worker can declare.

A tuning client measures a task's candidates only on workers whose device is the task's
target. Workers say which device they have with a dask resource, `kiln-device-<key>=1`
(one measurement at a time per device); the key is derived from the target:

  a CPU target ("llvm", "c")   <arch>-<cpu>-<hash of its feature list>: the host's CPU name
                               and features for a host target, else the given -mcpu / -mattr
  any other target             the target's text (e.g. "cuda -arch=sm_90"), as a slug

Two machines with the same CPU model and the same enabled features share a key (a VM that
hides AVX-512 from its guest gets another). A worker learns its own key from `kiln
device-key` (the host's CPU) or `kiln device-key --target TARGET` (what it is given).

Example:
    >>> device_resource("llvm -mcpu=skylake-avx512")
    'kiln-device-x86_64-skylake-avx512'
"""
from __future__ import annotations

import hashlib
import re

from ...target import Target, as_target

__all__ = ["RESOURCE_PREFIX", "device_key", "device_resource", "pinned_target"]

RESOURCE_PREFIX = "kiln-device-"
_CPU_KINDS = ("llvm", "c")


def _slug(text: str) -> str:
    # dask's `--resources "a=1,b=2"` splits on "," and "=": keep to characters it passes.
    return re.sub(r"[^a-z0-9._+-]+", "_", text.lower()).strip("_")


def device_key(target="llvm") -> str:
    """The device key of `target` (see the module docstring).

    Example:
        >>> device_key("llvm -mcpu=haswell -mattr=+avx2")
        'x86_64-haswell-d849045f'
    """
    t = as_target(target)
    if t.kind not in _CPU_KINDS:
        return _slug(str(t))
    arch = t.mtriple.split("-")[0]
    features = sorted(t.mattr)
    key = f"{arch}-{t.mcpu}"
    if features:
        key += "-" + hashlib.sha256(",".join(features).encode()).hexdigest()[:8]
    return _slug(key)


def device_resource(target="llvm") -> str:
    """The dask resource a worker declares to measure `target`'s candidates.

    Example:
        >>> device_resource("cuda -arch=sm_90")
        'kiln-device-cuda_-arch_sm_90'
    """
    return RESOURCE_PREFIX + device_key(target)


def pinned_target(target) -> Target:
    """`target` with the host's CPU and features spelled out when it means "this machine":
    a build worker on another machine then compiles for the tuning client's CPU, not its own.

    Example:
        >>> str(pinned_target("llvm -mcpu=haswell"))
        'llvm -mcpu=haswell'
    """
    t = as_target(target)
    if t.kind not in _CPU_KINDS or not t.is_host:
        return t
    options = [f"-mcpu={t.mcpu}", f"-mtriple={t.mtriple}"]
    if t.mattr:
        options.append(f"-mattr={','.join(t.mattr)}")
    if "-opt-level=" in str(t):
        options.append(f"-opt-level={t.opt_level}")
    return Target(" ".join([t.kind, *options]))

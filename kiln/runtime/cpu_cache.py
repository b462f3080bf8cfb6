"""The CPU's cache sizes, as Linux reports them (sysfs); None where it does not."""
from __future__ import annotations

from pathlib import Path

_SYSFS = Path("/sys/devices/system/cpu/cpu0")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _cpu_list(text: str) -> set[int]:
    """The CPUs of a sysfs list such as "0-3,8"."""
    cpus = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def core_cache_bytes(root: Path = _SYSFS) -> int | None:
    """Size of the largest data (or unified) cache that CPU 0's core keeps to itself (shared
    with no CPU but its own hardware threads), in bytes; None when the system does not say.

    A cache shared with other cores (the L3 of most CPUs) is also shared with whatever else
    runs on them, other processes or, in a virtual machine, other guests of the host: its
    reported size is not what one program can count on. On a 2-core VM of a Xeon that reports a
    260 MB L3, ResNet-18 (47 MB of weights) ran its layers as if their weights came from memory:
    tuned with them evicted it ran 1.12x faster than untuned, tuned with them cached 1.04x.

    Example:
        >>> core_cache_bytes() is None or core_cache_bytes() >= 1 << 14
        True
    """
    try:
        own = _cpu_list((root / "topology" / "thread_siblings_list").read_text())
    except (OSError, ValueError):
        own = {0}
    best = None
    for index in sorted((root / "cache").glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            text = (index / "size").read_text().strip()
            size = int(text[:-1]) * _UNITS[text[-1]] if text[-1] in _UNITS else int(text)
            shared = _cpu_list((index / "shared_cpu_list").read_text())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and shared <= own and (best is None or level > best[0]):
            best = (level, size)
    return best[1] if best else None

"""The CPU's cache sizes, as Linux reports them (sysfs); None where it does not."""
from __future__ import annotations

from pathlib import Path

_SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def last_level_cache_bytes(root: Path = _SYSFS) -> int | None:
    """Size of the largest-level data (or unified) cache of CPU 0, in bytes; None when the
    system does not say (not Linux, or no cache information).

    Example:
        >>> last_level_cache_bytes() is None or last_level_cache_bytes() >= 1 << 16
        True
    """
    best = None
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            text = (index / "size").read_text().strip()
            size = int(text[:-1]) * _UNITS[text[-1]] if text[-1] in _UNITS else int(text)
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and (best is None or level > best[0]):
            best = (level, size)
    return best[1] if best else None

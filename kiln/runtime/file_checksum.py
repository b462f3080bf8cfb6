"""A CRC-32 of a whole model library, stored inside it and checked before it is loaded.

export_library links the library with a 32-byte marker followed by an 8-byte slot of zeros
(marker_asm), then computes the CRC-32 of the whole file and writes it into the slot (stamp).
load_module recomputes it over the file with the slot read as zeros (verify) before the dynamic
loader maps anything: a flipped bit anywhere -- weights, graph or machine code, where it could
crash the process -- is an error that names the file. CRC-32 runs at memory speed (a 440 MB
BERT library in ~0.1 s; SHA-256 takes 3x longer). It is a checksum, not a signature: whoever can
change the file can change its code, and its checksum too.
"""
from __future__ import annotations

import mmap
import zlib

# Found once in a library (the weights would have to contain these 32 bytes by chance).
MARKER = b"kiln model library CRC-32 \x8f\x1d\xa5\x03\xc7\x5e"
_SLOT = 8
_ZEROS = bytes(_SLOT)


class ChecksumError(ValueError):
    """A library whose contents do not match the checksum stored in it."""


def marker_asm() -> str:
    """Assembler lines for the marker and its zeroed slot, in read-only data.

    Example:
        >>> ".byte" in marker_asm()
        True
    """
    data = ", ".join(str(b) for b in MARKER)
    return f"\t.section .rodata\n\t.balign 8\n\t.byte {data}\n\t.quad 0\n"


def _checksum(data, at: int) -> int:
    view = memoryview(data)
    crc = zlib.crc32(view[:at + len(MARKER)])
    crc = zlib.crc32(_ZEROS, crc)
    return zlib.crc32(view[at + len(MARKER) + _SLOT:], crc)


def stamp(path) -> None:
    """Write the CRC-32 of the library at `path` into its slot.

    Example:
        >>> stamp("model.so")                     # doctest: +SKIP
    """
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as data:
        at = data.find(MARKER)
        if at < 0:
            raise ChecksumError(f"{path}: no checksum slot (the library was linked without it)")
        data[at + len(MARKER):at + len(MARKER) + _SLOT] = \
            _checksum(data, at).to_bytes(_SLOT, "little")
        data.flush()


def verify(data, name) -> None:
    """Check a library's bytes (anything with the buffer protocol and find: bytes, mmap)
    against the checksum stored in them; ChecksumError naming `name` if they differ. A library
    without a slot (exported before kiln stored one) passes.

    Example:
        >>> verify(open("model.so", "rb").read(), "model.so")     # doctest: +SKIP
    """
    at = data.find(MARKER)
    if at < 0:
        return
    stored = int.from_bytes(data[at + len(MARKER):at + len(MARKER) + _SLOT], "little")
    if _checksum(data, at) != stored:
        raise ChecksumError(f"{name}: corrupt kiln model library (its contents do not match "
                            f"the checksum stored in it; export it again)")

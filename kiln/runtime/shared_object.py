"""Open a shared library file safely: check it before the dynamic loader maps it, and load the
file as it is now, not a version of it loaded earlier in this process.

Two failures this guards against:

* A truncated or foreign file. The loader maps each loadable segment as the program headers
  describe it; pages past the end of a truncated file are mapped too, and the first touch of
  one kills the process with SIGBUS. So the ELF header and every segment and header table must
  lie inside the file before dlopen sees it.
* A stale library. dlopen returns the library it already loaded under the same name, and
  ctypes never unloads one, so loading a rebuilt model from the same path used to return the
  old kernels and weights. Each load goes through a new name (a link, in a private directory, to
  the file descriptor that was checked), so the loader compares files by identity (device and
  inode): an unchanged file maps once, a replaced one (export_library writes a new file and
  renames it into place) loads anew. A file rewritten in place keeps its inode, so the loader
  would hand back the old mapping: such a file is loaded from a private copy (in memory, so a
  noexec /tmp does not matter), checked like the file. Replace a loaded library by renaming a
  new file over it, never by writing into it: the library already loaded maps the file's pages,
  and would see the new bytes (or, if the file shrank, die of SIGBUS).
"""
from __future__ import annotations

import ctypes
import functools
import mmap
import os
import stat
import struct
import sys
import tempfile
import threading
from pathlib import Path

_ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3
_PT_LOAD = 1
# e_machine names for the "built for another machine" error.
_MACHINES = {3: "x86", 62: "x86_64", 40: "arm", 183: "aarch64", 243: "riscv", 21: "ppc64"}

_lock = threading.Lock()
# (st_dev, st_ino) -> the (size, mtime, ctime) it had when this process loaded it by name.
_loaded: dict[tuple[int, int], tuple[int, int, int]] = {}
# (st_dev, st_ino, size, mtime, ctime) of a file rewritten in place -> its copy, loaded once.
_copies: dict[tuple, ctypes.CDLL] = {}


@functools.lru_cache(maxsize=1)
def _host_machine() -> int:
    """e_machine of this process (its interpreter's ELF header): what it can load."""
    with open("/proc/self/exe" if os.path.exists("/proc/self/exe") else sys.executable,
              "rb") as f:
        return struct.unpack_from("<H", f.read(20), 18)[0]


class SharedObjectError(ValueError):
    """A file that is not a loadable shared library for this machine; the message says why."""


class ForeignMachineError(SharedObjectError):
    """A shared library built for another instruction set (e.g. cross-compiled for ARM)."""


def check_elf(read, size: int, name) -> None:
    """Check that a shared library's ELF headers, segments and section headers lie inside its
    `size` bytes; `read(offset, count)` returns the file's bytes. Raises SharedObjectError.

    Example:
        >>> data = Path("model.so").read_bytes()                               # doctest: +SKIP
        >>> check_elf(lambda off, n: data[off:off + n], len(data), "model.so")  # doctest: +SKIP
    """
    if size < 64:
        raise SharedObjectError(f"{name}: not a shared library ({size} bytes, too short for an "
                                f"ELF header)")
    ident = read(0, 64)
    if ident[:4] != _ELF_MAGIC:
        raise SharedObjectError(f"{name}: not a shared library (no ELF header)")
    if ident[4] != 2 or ident[5] != 1:
        raise SharedObjectError(f"{name}: not a 64-bit little-endian ELF file (this machine "
                                f"loads only those)")
    (e_type, e_machine, _, _, e_phoff, e_shoff, _, _, e_phentsize, e_phnum, e_shentsize,
     e_shnum, _) = struct.unpack_from("<HHIQQQIHHHHHH", ident, 16)
    if e_type != _ET_DYN:
        raise SharedObjectError(f"{name}: an ELF file, but not a shared library (type {e_type})")
    if e_machine != _host_machine():
        def named(m):
            return _MACHINES.get(m, f"ELF machine {m}")
        raise ForeignMachineError(f"{name}: built for {named(e_machine)}, this machine is "
                                  f"{named(_host_machine())}")

    def table_fits(what, offset, count, entry, minimum):
        if count and (entry < minimum or offset + count * entry > size):
            raise SharedObjectError(f"{name}: truncated or corrupt: its {what} end at byte "
                                    f"{offset + count * entry}, the file has {size} bytes")
    table_fits("program headers", e_phoff, e_phnum, e_phentsize, 56)
    table_fits("section headers", e_shoff, e_shnum, e_shentsize, 64)
    headers = read(e_phoff, e_phnum * e_phentsize)
    for k in range(e_phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", headers,
                                                                  k * e_phentsize)
        if p_type == _PT_LOAD and p_offset + p_filesz > size:
            raise SharedObjectError(f"{name}: truncated: segment {k} ends at byte "
                                    f"{p_offset + p_filesz}, the file has {size} bytes")


def open_shared_object(path, mode: int = os.RTLD_LOCAL, check=None) -> ctypes.CDLL:
    """dlopen the library at `path` as the file is now, after check_elf (SharedObjectError
    otherwise; FileNotFoundError for a missing file) and `check(data, path)`, if given, on the
    bytes that are loaded (a read-only mmap or bytes).

    Example:
        >>> lib = open_shared_object("model.so")        # doctest: +SKIP
    """
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SharedObjectError(f"{path}: not a regular file")
        identity = (st.st_dev, st.st_ino)
        # ctime too: size and mtime can be set back (cp -p, touch -r), ctime cannot.
        version = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with _lock:
            seen = _loaded.get(identity)
            if seen is None:            # a version loaded before was checked then
                check_elf(lambda offset, count: os.pread(fd, count, offset), st.st_size, path)
                if check is not None:
                    with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
                        check(data, path)
            if seen in (None, version):
                lib = _dlopen_fd(fd, path, mode)
                _loaded[identity] = version
                return lib
            key = identity + version
            if key not in _copies:
                _copies[key] = _load_copy(fd, path, mode, check)
            return _copies[key]
    finally:
        os.close(fd)


def _dlopen_fd(fd: int, path: Path, mode: int) -> ctypes.CDLL:
    """dlopen the file open as `fd` under a name no earlier load used (a link in a private
    directory), so the loader matches it with what it loaded by file identity, not by name."""
    with tempfile.TemporaryDirectory(prefix="kiln-load-") as private:
        link = Path(private) / path.name
        os.symlink(f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd")
                   else str(path.resolve()), link)
        try:
            return ctypes.CDLL(str(link), mode=mode)
        except OSError as err:
            raise SharedObjectError(f"{path}: cannot be loaded as a shared library "
                                    f"({str(err).replace(str(link), str(path))})") from None


def _load_copy(fd: int, path: Path, mode: int, check) -> ctypes.CDLL:
    """Load a private copy of the file open as `fd`: its bytes read once, checked, then loaded
    from memory (a memfd: a new file the loader has not seen, beyond any mount's noexec)."""
    with os.fdopen(os.dup(fd), "rb") as f:
        f.seek(0)
        data = f.read()
    check_elf(lambda offset, count: data[offset:offset + count], len(data), path)
    if check is not None:
        check(data, path)
    copy = os.memfd_create(f"kiln-{path.name}", os.MFD_CLOEXEC)
    try:
        with os.fdopen(os.dup(copy), "wb") as f:
            f.write(data)
        return _dlopen_fd(copy, path, mode)
    finally:
        os.close(copy)

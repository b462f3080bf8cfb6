"""Build small C sources into shared libraries once, cached per user.

The cache key hashes the source, the flags and the compiler's identity (resolved path, size,
mtime), so a compiler upgrade or an edited source gives a new library and stale ones are never
loaded. Libraries are written under a temporary name and renamed into place, so processes that
build at the same time never see a half-written file.

A cached library is native code that kiln loads, so the cache is guarded: each library has a
SHA-256 beside it and is rebuilt when the two disagree (a disk that filled up, a copy cut short:
loading a truncated library kills the process with SIGBUS), and every directory it is loaded
from must belong to the user and be writable by nobody else (anyone who could write there could
plant code in kiln's process).
"""
from __future__ import annotations

import errno
import hashlib
import logging
import os
import stat
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path


class NativeBuildError(RuntimeError):
    """The C compiler is missing or failed on a runtime source."""


def cache_dir() -> Path:
    """kiln's per-user cache: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.

    Example:
        >>> cache_dir().name
        'kiln'
    """
    explicit = os.environ.get("KILN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kiln"


def c_compiler() -> list[str]:
    """The C compiler command: $CC if set, else `cc`.

    Example:
        >>> c_compiler()[0] in ("cc", os.environ.get("CC", "cc").split()[0])
        True
    """
    return shlex.split(os.environ.get("CC") or "cc")


def _compiler_identity(compiler: list[str]) -> str:
    path = shutil.which(compiler[0])
    if path is None:
        raise NativeBuildError(f"no C compiler found: {compiler[0]!r} is not on PATH (kiln builds "
                               f"its runtime helpers with it; install gcc or set CC)")
    real = os.path.realpath(path)
    stat = os.stat(real)
    return f"{' '.join(compiler)}|{real}|{stat.st_size}|{stat.st_mtime_ns}"


def private_directory(path: Path) -> Path:
    """Create `path` (mode 0700) if missing and check that it is a directory of the current user
    that no one else can write to: one of the user's that others can write to (made under a
    umask of 002, say) loses their write permission, with a warning; a link, a file or a
    directory of another user is a NativeBuildError.

    Example:
        >>> private_directory(cache_dir()) == cache_dir()
        True
    """
    _secure_directory(Path(path))
    return Path(path)


def _secure_directory(path: Path) -> bool:
    """private_directory's work; True when others could write to the directory until now, so
    that what it holds may not be the user's."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        # O_NOFOLLOW: the directory itself, never what a link planted at its name points to.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as err:
        problem = ("it is not a directory (a link or a file)"
                   if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST)
                   else err.strerror or str(err))
        raise NativeBuildError(f"kiln will not load code from {path}: {problem}; set "
                               f"KILN_CACHE_DIR to a directory only you can write to") from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid():
            raise NativeBuildError(f"kiln will not load code from {path}: it belongs to user id "
                                   f"{info.st_uid}, not to you ({os.getuid()}); set "
                                   f"KILN_CACHE_DIR to a directory only you can write to")
        if not info.st_mode & 0o022:
            return False
        os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~0o022)
    finally:
        os.close(fd)
    logging.getLogger("kiln").warning(
        "cache directory %s was writable by others (mode %s); it no longer is, and kiln "
        "rebuilds what it holds", path, stat.filemode(info.st_mode))
    return True


def cache_root() -> Path:
    """The directory cached libraries go under: cache_dir(), or when that is not writable a
    per-user directory under the temporary directory; either checked by private_directory.

    Example:
        >>> cache_root() == cache_dir()        # doctest: +SKIP
        True
    """
    root = cache_dir()
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        writable = os.access(root, os.W_OK)
    except OSError:
        writable = False
    if writable:
        return private_directory(root)
    # A read-only home: a per-user directory under the temporary directory, which anyone could
    # have created first -- private_directory refuses one that is not the user's.
    fallback = Path(tempfile.gettempdir()) / f"kiln-cache-{os.getuid()}"
    logging.getLogger("kiln").info("cache directory %s is not writable; using %s", root,
                                   fallback)
    return private_directory(fallback)


def _digest_path(library: Path) -> Path:
    return library.with_name(library.name + ".sha256")


def _file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _is_intact(library: Path) -> bool:
    """Whether a cached library is there and matches the SHA-256 written beside it."""
    try:
        expected = _digest_path(library).read_text().strip()
        intact = _file_digest(library) == expected
    except FileNotFoundError:
        return False
    except OSError:
        intact = False
    if not intact:
        logging.getLogger("kiln").warning("cached library %s is damaged (it does not match its "
                                          "checksum); rebuilding it", library)
    return intact


def _replace_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def build_shared_library(source: str, lib_name: str, flags: tuple[str, ...] = ("-O2",)) -> Path:
    """Compile C `source` into `<cache>/<hash>/lib<lib_name>.so` unless already built (and
    intact).

    Example:
        >>> path = build_shared_library("int seven(void) { return 7; }", "kiln_doc_seven")
        >>> path.name
        'libkiln_doc_seven.so'
    """
    compiler = c_compiler()
    key = hashlib.sha256("\0".join([source, " ".join(flags), _compiler_identity(compiler)])
                         .encode()).hexdigest()[:24]
    directory = cache_root() / key
    tightened = _secure_directory(directory)
    target = directory / f"lib{lib_name}.so"
    if not tightened and _is_intact(target):
        return target
    fd, tmp_source = tempfile.mkstemp(suffix=".c", dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    tmp_lib = f"{tmp_source[:-2]}.so"
    command = [*compiler, *flags, "-shared", "-fPIC", "-o", tmp_lib, tmp_source]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise NativeBuildError(f"building {target.name} failed ({' '.join(command)}):\n"
                                   f"{result.stderr.strip()}")
        digest = _file_digest(Path(tmp_lib))
        os.replace(tmp_lib, target)
        # The digest goes last: a library without one (a crash in between) is rebuilt.
        _replace_atomically(_digest_path(target), f"{digest}\n".encode())
    finally:
        for leftover in (tmp_source, tmp_lib):
            if os.path.exists(leftover):
                os.unlink(leftover)
    return target

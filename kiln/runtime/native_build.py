"""Build small C sources into shared libraries once, cached per user.

The cache key hashes the source, the flags and the compiler's identity (resolved path, size,
mtime), so a compiler upgrade or an edited source gives a new library and stale ones are never
loaded. Libraries are written under a temporary name and renamed into place, so processes that
build at the same time never see a half-written file.
"""
from __future__ import annotations

import hashlib
import os
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


def build_shared_library(source: str, lib_name: str, flags: tuple[str, ...] = ("-O2",)) -> Path:
    """Compile C `source` into `<cache>/<hash>/lib<lib_name>.so` unless already built.

    Example:
        >>> path = build_shared_library("int seven(void) { return 7; }", "kiln_doc_seven")
        >>> path.name
        'libkiln_doc_seven.so'
    """
    compiler = c_compiler()
    key = hashlib.sha256("\0".join([source, " ".join(flags), _compiler_identity(compiler)])
                         .encode()).hexdigest()[:24]
    directory = cache_dir() / key
    target = directory / f"lib{lib_name}.so"
    if target.exists():
        return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        # A read-only home: fall back to a per-user temporary directory.
        directory = Path(tempfile.gettempdir()) / f"kiln-cache-{os.getuid()}" / key
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / f"lib{lib_name}.so"
        if target.exists():
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
        os.replace(tmp_lib, target)
    finally:
        for leftover in (tmp_source, tmp_lib):
            if os.path.exists(leftover):
                os.unlink(leftover)
    return target

"""kiln's kernel cache: compiled kernels on disk, keyed by kernel_key, shared by processes.

Layout under cache_root()/kernels-v1 (kiln.runtime.native_build: a directory of the user's that
no one else can write to, as anything kiln loads code from must be):

    <k[:2]>/<k>.asked    index entry: JSON, the task keys a fused function's templates ask
    <k[:2]>/<k>.kernel   compiled kernel: header, JSON, ELF object, SHA-256 of all before it

Every file is written under a temporary name and renamed into place, so two processes filling
the cache at once each see complete entries (the later rename wins; both are equal). Every read
is checked -- format, checksum, that the key inside is the one asked for, an ELF object -- and
an entry that fails (a disk that filled up, a truncated copy, a stray edit) is reported once,
ignored and rebuilt. The cache stays under KILN_KERNEL_CACHE_MB (default 2048): when a write
takes it past the bound, the least recently used entries go.

KILN_KERNEL_CACHE_DIR puts it elsewhere; KILN_KERNEL_CACHE=0 turns it off (kernels are then
always built).

Example:
    >>> cache = KernelCache.default()                       # doctest: +SKIP
    >>> cache.put_kernel(key, entry); cache.get_kernel(key) == entry   # doctest: +SKIP
    True
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

FORMAT = "kernels-v1"
_MAGIC = b"KILNKERNEL1\n"
_LENGTH = struct.Struct("<Q")
_DIGEST = 32
DEFAULT_LIMIT_MB = 2048
# The cache's size is estimated per directory and process: scanned on a process's first write
# there, then counted up by what it writes. The estimate alone decides when to prune; a scan
# every _RESCAN_EVERY writes catches up with other processes. (Scanning on every compile
# made a run of many small compiles quadratic in the entries.)
_RESCAN_EVERY = 1024
_usage: dict = {}           # root -> [writes, estimated bytes or None: not scanned yet]
_usage_lock = threading.Lock()
logger = logging.getLogger("kiln")


class CacheEntryError(ValueError):
    """A cache entry that is not what kiln wrote (the message says how)."""


@dataclass(frozen=True)
class KernelEntry:
    """A compiled kernel as the cache holds it: the object and what the Module needs.

    `name` is the name it was compiled under, `functions` its signatures (dicts of
    FunctionInfo.to_dict), `errors` the messages of its checks by code (from 1), `flops` its
    floating-point operations per call (None: not fixed). The loop program is not kept:
    printing it costs more than reading a kernel (KernelSource lowers it again when asked).
    """

    name: str
    object: bytes
    functions: dict
    errors: list
    ll: str
    ll_in: str
    uses_runtime: bool
    flops: int | None

    @classmethod
    def of(cls, obj, name: str, flops: int | None) -> "KernelEntry":
        """The entry of an ObjectCode (kiln.codegen.llvm.compile_object) of function `name`.

        Example:
            >>> KernelEntry.of(compile_object([f], target), f.name, None)   # doctest: +SKIP
        """
        return cls(name, obj.object, {n: info.to_dict() for n, info in obj.functions.items()},
                   list(obj.errors.messages), obj.ll, obj.ll_in, obj.uses_runtime, flops)

    def object_code(self):
        """The ObjectCode again, as link_objects takes it."""
        from ..codegen.common import ErrorTable
        from ..codegen.llvm.jit import ObjectCode
        from ..runtime.function_info import FunctionInfo
        return ObjectCode(self.object,
                          {n: FunctionInfo.from_dict(d) for n, d in self.functions.items()},
                          ErrorTable.from_messages(self.errors), self.ll, self.ll_in,
                          self.uses_runtime)

    def header(self) -> dict:
        return {"name": self.name, "functions": self.functions, "errors": self.errors,
                "ll": self.ll, "ll_in": self.ll_in, "uses_runtime": self.uses_runtime,
                "flops": self.flops}


def encode_kernel(key: str, entry: KernelEntry) -> bytes:
    """The bytes of a .kernel file.

    Example:
        >>> decode_kernel("k", encode_kernel("k", entry)) == entry   # doctest: +SKIP
        True
    """
    header = json.dumps({"key": key, **entry.header()}, allow_nan=False).encode()
    body = _MAGIC + _LENGTH.pack(len(header)) + header + entry.object
    return body + hashlib.sha256(body).digest()


def decode_kernel(key: str, data: bytes) -> KernelEntry:
    """A .kernel file's entry, or a CacheEntryError saying what is wrong with it.

    Example:
        >>> decode_kernel("k", b"junk")
        Traceback (most recent call last):
        ...
        kiln.driver.kernel_cache.CacheEntryError: not a kiln kernel cache entry
    """
    if not data.startswith(_MAGIC):
        raise CacheEntryError("not a kiln kernel cache entry")
    if len(data) < len(_MAGIC) + _LENGTH.size + _DIGEST:
        raise CacheEntryError(f"truncated ({len(data)} bytes)")
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        raise CacheEntryError("its checksum does not match its contents")
    (size,) = _LENGTH.unpack_from(body, len(_MAGIC))
    start = len(_MAGIC) + _LENGTH.size
    if start + size > len(body):
        raise CacheEntryError("its header runs past its end")
    try:
        header = json.loads(body[start:start + size])
        obj = body[start + size:]
        if header.pop("key") != key:
            raise CacheEntryError("it holds another key's kernel")
        if not obj.startswith(b"\x7fELF"):
            raise CacheEntryError("its object is not an ELF file")
        entry = KernelEntry(object=obj, **header)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        if isinstance(err, CacheEntryError):
            raise
        raise CacheEntryError(f"its header is malformed ({err})") from None
    if not isinstance(entry.functions, dict) or entry.name not in entry.functions:
        raise CacheEntryError(f"it does not describe its function {entry.name!r}")
    return entry


class KernelCache:
    """The kernel store of one directory (see the module docstring).

    Example:
        >>> KernelCache(Path(tmp)).get_kernel("0" * 64) is None   # doctest: +SKIP
        True
    """

    def __init__(self, root: Path, limit_bytes: int = DEFAULT_LIMIT_MB << 20):
        self.root = Path(root)
        self.limit_bytes = limit_bytes

    @staticmethod
    def default() -> "KernelCache | None":
        """The user's cache (None when KILN_KERNEL_CACHE=0, or when there is no directory kiln
        may keep code in, which is logged).

        Example:
            >>> KernelCache.default().root.name       # doctest: +SKIP
            'kernels-v1'
        """
        if os.environ.get("KILN_KERNEL_CACHE", "1").strip().lower() in ("0", "off", "no",
                                                                      "false"):
            return None
        from ..runtime.native_build import NativeBuildError, cache_root, private_directory
        explicit = os.environ.get("KILN_KERNEL_CACHE_DIR")
        try:
            root = private_directory(Path(explicit) / FORMAT if explicit
                                     else cache_root() / FORMAT)
        except NativeBuildError as err:
            logger.warning("kernel cache off: %s", err)
            return None
        limit = os.environ.get("KILN_KERNEL_CACHE_MB", "")
        try:
            limit_mb = int(limit) if limit else DEFAULT_LIMIT_MB
        except ValueError:
            logger.warning("KILN_KERNEL_CACHE_MB=%r is not a whole number of MB; using %d",
                           limit, DEFAULT_LIMIT_MB)
            limit_mb = DEFAULT_LIMIT_MB
        return KernelCache(root, max(1, limit_mb) << 20)

    def _path(self, key: str, suffix: str) -> Path:
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"a kernel cache key is 64 hex digits, got {key!r}")
        return self.root / key[:2] / f"{key}{suffix}"

    # ---------------------------------------------------------------------------- index
    def get_asked(self, key: str) -> list | None:
        """The task keys recorded for function key `key` (None: not known).

        Example:
            >>> cache.get_asked(k1)       # doctest: +SKIP
            ['["x86.conv2d_nchwc",[...],"llvm"]']
        """
        path = self._path(key, ".asked")
        data = self._read(path)
        if data is None:
            return None
        try:
            record = json.loads(data)
            asked = record["asked"]
            if record["key"] != key or not all(isinstance(k, str) for k in asked):
                raise ValueError("it holds another key, or task keys that are not text")
        except (ValueError, KeyError, TypeError) as err:
            self._damaged(path, f"malformed index entry ({err})")
            return None
        return list(asked)

    def put_asked(self, key: str, asked: list) -> None:
        """Record the task keys the templates of function key `key` ask."""
        self._write(self._path(key, ".asked"),
                    json.dumps({"key": key, "asked": list(asked)}).encode())

    # ---------------------------------------------------------------------------- kernels
    def get_kernel(self, key: str) -> KernelEntry | None:
        """The kernel stored under object key `key`, or None (missing, or damaged: logged)."""
        path = self._path(key, ".kernel")
        data = self._read(path)
        if data is None:
            return None
        try:
            entry = decode_kernel(key, data)
        except CacheEntryError as err:
            self._damaged(path, str(err))
            return None
        try:
            os.utime(path)            # recently used: pruned last
        except OSError:
            pass
        return entry

    def put_kernel(self, key: str, entry: KernelEntry) -> None:
        """Store a compiled kernel under object key `key` (atomically)."""
        self._write(self._path(key, ".kernel"), encode_kernel(key, entry))

    # ---------------------------------------------------------------------------- files
    @staticmethod
    def _read(path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            logger.warning("kernel cache: cannot read %s (%s); rebuilding it", path, err)
            return None

    @staticmethod
    def _damaged(path: Path, why: str) -> None:
        logger.warning("kernel cache entry %s is damaged (%s); rebuilding it", path, why)

    def _write(self, path: Path, data: bytes) -> None:
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as err:       # a full disk costs the cache, never the compile
            logger.warning("kernel cache: cannot write %s (%s)", path, err)
            return
        self._count_write(len(data))

    def _count_write(self, size: int) -> None:
        with _usage_lock:
            usage = _usage.setdefault(self.root, [0, None])
            usage[0] += 1
            if usage[1] is not None:
                usage[1] += size
            look = usage[1] is None or usage[1] > self.limit_bytes \
                or usage[0] % _RESCAN_EVERY == 0
        if look:
            self.prune()            # scans, and records the size it found

    def size_bytes(self) -> int:
        """The bytes the cache's entries take."""
        return sum(size for _, size, _ in self._entries())

    def _entries(self):
        for path in self.root.glob("??/*"):
            try:
                info = path.stat()
            except OSError:
                continue
            yield path, info.st_size, info.st_mtime

    def prune(self) -> int:
        """Remove the least recently used entries until the cache is within three quarters of
        its bound (when it is over the bound); returns how many were removed.

        Example:
            >>> KernelCache(root, limit_bytes=1).prune()     # doctest: +SKIP
            12
        """
        entries = list(self._entries())
        total = sum(size for _, size, _ in entries)
        removed = 0
        if total > self.limit_bytes:
            for path, size, _ in sorted(entries, key=lambda e: e[2]):
                if total <= self.limit_bytes * 3 // 4:
                    break
                try:
                    path.unlink()
                except OSError:
                    continue
                total -= size
                removed += 1
        with _usage_lock:
            _usage.setdefault(self.root, [0, None])[1] = total
        return removed

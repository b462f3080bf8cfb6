"""Loading native code safely (issue 31): a model library reloaded from the same path is the
file as it is now (item 1), a truncated, corrupt or foreign library is an error naming the file,
never a signal (item 4), a damaged cached helper library is rebuilt (item 6), and kiln loads
code only from directories that are the user's alone (item 9).

Crash cases run in a subprocess and assert an exit status with a message, not a signal.
"""
import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.graph import Function, IRModule, call, var
from kiln.runtime import GraphExecutor, ModelError, NativeBuildError, build_shared_library
from kiln.runtime import native_build

ROOT = Path(__file__).resolve().parents[2]


def _export(path, weight: float):
    """y = relu(x) + w with w bound as a weight: two weights give libraries of one size."""
    x, w = var("x", (2, 8)), var("w", (2, 8))
    mod = IRModule.from_expr(Function([x, w], call("add", call("nn.relu", x), w)))
    lib = kiln.compile(mod, params={"w": np.full((2, 8), weight, "float32")})
    lib.export_library(str(path))


def _run(lib):
    m = GraphExecutor(lib)
    m.set_input("x", np.ones((2, 8), "float32"))
    m.run()
    return float(m.get_output(0).numpy()[0, 0])


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    path = tmp_path_factory.mktemp("lib") / "model.so"
    _export(path, 1.0)
    return path


def _cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "kiln.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def _assert_one_line_error(result, *names):
    assert result.returncode in (1, 2), (result.returncode, result.stderr)   # not a signal
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kiln: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for name in names:
        assert str(name) in lines[0], (name, lines[0])


# ------------------------------------------------------------------ item 1: stale reload
def test_reloading_a_recompiled_library_gives_the_new_model(tmp_path):
    path = tmp_path / "model.so"
    _export(path, 1.0)
    first = kiln.runtime.load_module(path)
    assert _run(first) == 2.0
    _export(path, 5.0)                              # recompiled to the same path
    second = kiln.runtime.load_module(path)
    assert _run(second) == 6.0
    assert _run(first) == 2.0                       # the first keeps its own mapping
    again = kiln.runtime.load_module(path)          # unchanged file: the same code, mapped once
    assert _run(again) == 6.0


def test_reloading_a_library_rewritten_in_place_gives_the_new_model(tmp_path):
    # `cp new.so model.so` writes into the existing file (same inode): the dynamic loader
    # would hand back the mapping it already has.
    path, other = tmp_path / "model.so", tmp_path / "other.so"
    _export(path, 1.0)
    assert _run(kiln.runtime.load_module(path)) == 2.0
    _export(other, 7.0)
    data = other.read_bytes()
    inode = path.stat().st_ino
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate()
    assert path.stat().st_ino == inode
    reloaded = kiln.runtime.load_module(path)
    assert _run(reloaded) == 8.0
    # Loading it again maps no second copy (a server reloading on a timer would leak one each).
    assert kiln.runtime.load_module(path).module.keepalive is reloaded.module.keepalive


# ------------------------------------------------------------------ item 4: bad libraries
def _truncations(size):
    return [0, 1, 63, 64, 200, size // 3, size // 2, size - 1]


def test_truncated_libraries_are_errors_naming_the_file(library, tmp_path):
    data = library.read_bytes()
    for n in _truncations(len(data)):
        bad = tmp_path / f"cut{n}.so"
        bad.write_bytes(data[:n])
        with pytest.raises(ModelError, match=f"cut{n}.so"):
            kiln.runtime.load_module(bad)


def test_truncated_library_through_the_cli_exits_with_a_message(library, tmp_path):
    data = library.read_bytes()
    for n in (0, len(data) // 2, len(data) - 1):
        bad = tmp_path / f"cut{n}.so"
        bad.write_bytes(data[:n])
        for command in ("run", "inspect"):
            _assert_one_line_error(_cli(command, bad), bad.name)


def test_a_flipped_bit_in_the_weights_is_detected(library, tmp_path):
    data = bytearray(library.read_bytes())
    start = data.find(b'{"format": "kiln-model"')
    assert start > 0
    # w = 1.0 is float32 0x3f800000: flip a bit of the first weight after the header
    first = data.find(np.float32(1.0).tobytes(), start)
    data[first] ^= 0x10
    bad = tmp_path / "flipped.so"
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="flipped.so: corrupt kiln model library.*checksum"):
        kiln.runtime.load_module(bad)
    _assert_one_line_error(_cli("run", bad), "flipped.so", "checksum")


def test_foreign_files_are_errors_naming_the_file(tmp_path):
    text = tmp_path / "notes.so"
    text.write_text("this is not a library\n" * 10)
    libm = tmp_path / "libm.so"
    shutil.copy(_libm_path(), libm)
    executable = Path(sys.executable).resolve()
    cases = {text: "not a shared library \\(no ELF header\\)",
             libm: "not a kiln model library",
             # a PIE executable is ELF type "shared object" too; the loader refuses it
             executable: "(an ELF file, but )?not a shared library \\(type 2\\)|"
                         "cannot be loaded as a shared"}
    for path, message in cases.items():
        with pytest.raises(ModelError, match=f"{path.name}: ({message})"):
            kiln.runtime.load_module(path)


def _libm_path():
    import ctypes.util
    name = ctypes.util.find_library("m")
    for directory in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
                      "/lib/aarch64-linux-gnu", "/usr/lib"):
        candidate = Path(directory) / name
        if candidate.exists():
            return candidate
    pytest.skip(f"cannot find {name} on this machine")


# ------------------------------------------------------------------ item 6: the build cache
SOURCE = "int kiln_safety_answer(void) { return 42; }\n"


@pytest.mark.parametrize("damage", ["truncate", "empty", "flip"])
def test_a_damaged_cached_library_is_rebuilt(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    path = build_shared_library(SOURCE, "answer")
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    assert build_shared_library(SOURCE, "answer") == path
    assert ctypes.CDLL(str(path)).kiln_safety_answer() == 42
    assert len(path.read_bytes()) == len(data)


def test_a_truncated_support_library_does_not_kill_later_runs(library, tmp_path):
    cache = tmp_path / "cache"
    env = {"KILN_CACHE_DIR": str(cache)}
    first = _cli("inspect", library, env=env)
    assert first.returncode == 0, first.stderr
    support = list(cache.glob("*/libkiln_support.so"))
    assert len(support) == 1
    support[0].write_bytes(support[0].read_bytes()[:4096])
    for _ in range(2):                  # the first rebuilds it; the second finds it intact
        again = _cli("inspect", library, env=env)
        assert again.returncode == 0, (again.returncode, again.stderr)


# ------------------------------------------------------------------ item 9: private directories
@pytest.fixture
def unwritable_cache(tmp_path, monkeypatch):
    """KILN_CACHE_DIR where no directory can be made (under a file), and a private temporary
    directory for the fallback; yields the fallback's path."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KILN_CACHE_DIR", str(blocker / "kiln"))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    return temp / f"kiln-cache-{os.getuid()}"


def test_the_fallback_cache_is_created_private(unwritable_cache):
    path = build_shared_library(SOURCE, "answer")
    assert path.parent.parent == unwritable_cache
    for directory in (unwritable_cache, path.parent):
        assert (directory.stat().st_mode & 0o777) == 0o700
    assert ctypes.CDLL(str(path)).kiln_safety_answer() == 42


def test_a_cache_others_could_write_is_made_private_and_rebuilt(tmp_path, monkeypatch):
    # Made under a umask of 002 (or chmod 777): someone else may have planted a library there,
    # with a matching checksum. kiln removes their write permission and rebuilds.
    cache = tmp_path / "cache"
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache))
    path = build_shared_library(SOURCE, "answer")
    planted = build_shared_library(SOURCE.replace("42", "666"), "planted")
    shutil.copy(planted, path)
    shutil.copy(native_build._digest_path(planted), native_build._digest_path(path))
    for directory in (cache, path.parent):
        directory.chmod(0o777)
    rebuilt = build_shared_library(SOURCE, "answer")
    assert rebuilt == path and ctypes.CDLL(str(rebuilt)).kiln_safety_answer() == 42
    for directory in (cache, path.parent):
        assert directory.stat().st_mode & 0o022 == 0


def test_a_fallback_cache_that_is_a_link_is_refused(unwritable_cache, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    unwritable_cache.symlink_to(elsewhere)
    with pytest.raises(NativeBuildError, match="not a directory"):
        build_shared_library(SOURCE, "answer")


def test_a_cache_of_another_user_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    build_shared_library(SOURCE, "answer")
    monkeypatch.setattr(os, "getuid", lambda: 54321)     # as if someone else made it
    with pytest.raises(NativeBuildError, match="belongs to user id .*not to you \\(54321\\)"):
        build_shared_library(SOURCE, "answer")


def test_a_library_without_its_checksum_is_not_loaded(tmp_path, monkeypatch):
    # A library where kiln's would be, without kiln's checksum (a crash between the two
    # writes, or a copy from elsewhere): kiln rebuilds its own.
    cache = tmp_path / "cache"
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache))
    path = build_shared_library(SOURCE, "answer")
    planted = build_shared_library(SOURCE.replace("42", "666"), "planted")
    shutil.copy(planted, path)
    native_build._digest_path(path).unlink()
    rebuilt = build_shared_library(SOURCE, "answer")
    assert ctypes.CDLL(str(rebuilt)).kiln_safety_answer() == 42


def test_a_cache_directory_that_is_a_link_is_refused(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "link"))
    with pytest.raises(NativeBuildError, match="not a directory \\(a link or a file\\)"):
        build_shared_library(SOURCE, "answer")


def test_a_flipped_bit_anywhere_is_detected_before_loading(library, tmp_path):
    # Code included: a flipped bit in a kernel's machine code could crash the process, so the
    # whole file is checked before the loader maps any of it.
    data = library.read_bytes()
    rng = np.random.default_rng(7)
    for k, at in enumerate(rng.choice(len(data), size=24, replace=False)):
        flipped = bytearray(data)
        flipped[at] ^= 1 << int(rng.integers(8))
        bad = tmp_path / f"flip{k}.so"
        bad.write_bytes(bytes(flipped))
        with pytest.raises(ModelError, match=f"flip{k}.so"):
            kiln.runtime.load_module(bad)

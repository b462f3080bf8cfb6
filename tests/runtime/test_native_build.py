"""The cached builder of runtime C helpers."""
import ctypes

import pytest

from kiln.runtime import NativeBuildError, build_shared_library, cache_dir

SOURCE = "int kiln_test_answer(void) { return 42; }\n"


def test_builds_once_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path
    path = build_shared_library(SOURCE, "answer")
    assert path.parent.parent == tmp_path and path.name == "libanswer.so"
    assert ctypes.CDLL(str(path)).kiln_test_answer() == 42
    mtime = path.stat().st_mtime_ns
    assert build_shared_library(SOURCE, "answer") == path and path.stat().st_mtime_ns == mtime
    other = build_shared_library(SOURCE.replace("42", "43"), "answer")
    assert other != path
    # no temporary files left behind: the library and its checksum
    assert sorted(p.name for p in path.parent.iterdir()) == ["libanswer.so", "libanswer.so.sha256"]


def test_compiler_errors_are_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    with pytest.raises(NativeBuildError, match="building libbroken.so failed.*error"):
        build_shared_library("int broken(void) { return }", "broken")


def test_missing_compiler_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "/nonexistent/kiln-cc")
    with pytest.raises(NativeBuildError, match="no C compiler found"):
        build_shared_library(SOURCE, "answer")

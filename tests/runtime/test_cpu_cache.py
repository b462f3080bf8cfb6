"""core_cache_bytes reads Linux's cache description (sysfs), here a fake tree."""
from kiln.runtime.cpu_cache import core_cache_bytes


def _cache(root, index, level, kind, size, shared="0"):
    d = root / "cache" / f"index{index}"
    d.mkdir(parents=True)
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{kind}\n")
    (d / "size").write_text(f"{size}\n")
    if shared is not None:
        (d / "shared_cpu_list").write_text(f"{shared}\n")


def _siblings(root, cpus):
    (root / "topology").mkdir(parents=True)
    (root / "topology" / "thread_siblings_list").write_text(f"{cpus}\n")


def test_the_highest_level_the_core_keeps_to_itself_wins(tmp_path):
    _cache(tmp_path, 0, 1, "Data", "48K")
    _cache(tmp_path, 1, 1, "Instruction", "32K")
    _cache(tmp_path, 2, 2, "Unified", "2048K")
    _cache(tmp_path, 3, 3, "Unified", "266240K", shared="0-1")   # shared with another core
    assert core_cache_bytes(tmp_path) == 2 << 20


def test_hardware_threads_of_the_core_do_not_make_a_cache_shared(tmp_path):
    _siblings(tmp_path, "0,8")
    _cache(tmp_path, 0, 1, "Data", "32K", shared="0,8")
    _cache(tmp_path, 1, 2, "Unified", "1M", shared="0,8")
    _cache(tmp_path, 2, 3, "Unified", "32M", shared="0-7,8-15")
    assert core_cache_bytes(tmp_path) == 1 << 20


def test_instruction_caches_and_unreadable_entries_do_not_count(tmp_path):
    _cache(tmp_path, 0, 2, "Data", "2M")
    _cache(tmp_path, 1, 4, "Instruction", "64M")     # an instruction cache is never the answer
    _cache(tmp_path, 2, 3, "Unified", "lots")        # unreadable: skipped
    _cache(tmp_path, 3, 3, "Unified", "8M", shared=None)   # no sharing information: skipped
    (tmp_path / "cache" / "index4").mkdir()          # incomplete: skipped
    assert core_cache_bytes(tmp_path) == 2 << 20


def test_no_information_is_none(tmp_path):
    assert core_cache_bytes(tmp_path / "missing") is None
    assert core_cache_bytes(tmp_path) is None

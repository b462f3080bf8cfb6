"""last_level_cache_bytes reads Linux's cache description (sysfs), here a fake tree."""
from kiln.runtime.cpu_cache import last_level_cache_bytes


def _cache(root, index, level, kind, size):
    d = root / f"index{index}"
    d.mkdir(parents=True)
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{kind}\n")
    (d / "size").write_text(f"{size}\n")


def test_the_highest_data_level_wins(tmp_path):
    _cache(tmp_path, 0, 1, "Data", "48K")
    _cache(tmp_path, 1, 1, "Instruction", "32K")
    _cache(tmp_path, 2, 2, "Unified", "1024K")
    _cache(tmp_path, 3, 3, "Unified", "32768K")
    assert last_level_cache_bytes(tmp_path) == 32 << 20


def test_instruction_caches_and_unreadable_entries_do_not_count(tmp_path):
    _cache(tmp_path, 0, 2, "Data", "2M")
    _cache(tmp_path, 1, 4, "Instruction", "64M")     # an instruction cache is never the answer
    _cache(tmp_path, 2, 3, "Unified", "lots")        # unreadable: skipped
    (tmp_path / "index3").mkdir()                    # incomplete: skipped
    assert last_level_cache_bytes(tmp_path) == 2 << 20


def test_no_information_is_none(tmp_path):
    assert last_level_cache_bytes(tmp_path / "missing") is None
    assert last_level_cache_bytes(tmp_path) is None

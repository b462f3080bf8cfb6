"""Issue 31 item 10: the deploy guide says plainly that loading a model library runs its code,
and the security page (whose code runs in test_docs) is listed among the guides."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_deploy_guide_says_loading_a_library_runs_its_code():
    text = " ".join((ROOT / "docs" / "deploy.md").read_text().split())
    assert "Load only libraries you built or trust." in text
    assert "loading one runs its code in your process" in text
    assert "(security.md)" in text


def test_security_page_is_a_guide():
    assert (ROOT / "docs" / "security.md").is_file()
    assert "(docs/security.md)" in (ROOT / "README.md").read_text()

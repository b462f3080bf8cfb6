"""The docs' code runs: every ```python block of README.md and docs/*.md, and every `$ kiln ...`
line of their ```console blocks, page by page, in the order the page shows them.

Each page runs in a Python process of its own (what one page registers -- an operator, a
converter, torch.compile's caches -- cannot leak into another) and in a fresh directory, which
is also put on sys.path: files a page writes are importable, as tuning's worker processes need
for a template. A page's python blocks share one namespace, and a failure points at the line
of the .md file. A `$ kiln ARGS` line runs `python -m kiln.cli ARGS` (what the console script
runs) in that directory and must exit 0.

Fences (the info string after the opening ```):
    python               run
    python skip-test     shown, not run (sparingly: a full-size model, say)
    python file=NAME.py  written to NAME.py in the page's directory, not run
    console              its `$ kiln ...` lines run; other lines are sample output
Any other fence (sh, text ...) is not run. A page whose code needs an optional tool says so
in a line `<!-- needs: opencl -->`; where the tool is missing, the page is skipped with the
reason (as the tests of that tool are). The code itself checks its results against a
reference (numpy, PyTorch, ONNX's reference evaluator), as a user would.

Run one page by hand (in a new temporary directory, which is kept):
    .venv/bin/python tests/docs/test_docs.py docs/tune.md
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGE_TIMEOUT = 300          # seconds; a page takes 2 to 20
# Pages run two at a time: a page keeps about one core busy (imports, tracing, compiling), so
# two halve the wall time on a 2-core machine.
JOBS = 2

FENCE = "```"
# `python` fence options -> block kind; "file=NAME" is handled apart (it carries a value).
PYTHON_OPTIONS = {(): "python", ("skip-test",): "skip"}
FILE_OPTION = re.compile(r"^file=([\w.-]+\.py)$")


class DocsError(ValueError):
    """A page whose code blocks cannot be read (an unknown fence option, an unclosed fence)."""


@dataclass(frozen=True)
class Block:
    """One fenced code block: its kind ("python", "skip", "file", "console"), the page line of
    its first code line (1-based), its text, and for "file" the file name.

    Example:
        >>> parse_page("```python\\nx = 1\\n```\\n", "p.md")
        [Block(kind='python', line=2, code='x = 1', name=None)]
    """

    kind: str
    line: int
    code: str
    name: str | None = None


def _block_kind(info: str, where: str) -> tuple[str, str | None] | None:
    """(kind, file name) for a fence's info string; None for blocks that are not run."""
    words = info.split()
    if not words or words[0] not in ("python", "console"):
        return None
    if words[0] == "console":
        return "console", None
    options = tuple(words[1:])
    if options in PYTHON_OPTIONS:
        return PYTHON_OPTIONS[options], None
    match = FILE_OPTION.match(options[0]) if len(options) == 1 else None
    if match:
        return "file", match.group(1)
    raise DocsError(f"{where}: unknown python fence options {' '.join(options)!r} (known: "
                    f"skip-test, file=NAME.py)")


def parse_page(text: str, where) -> list[Block]:
    """The blocks of a markdown page that the docs test knows, in page order. Fences are
    recognised at the start of a line only.

    Example:
        >>> [b.kind for b in parse_page("```console\\n$ kiln selfcheck\\n```\\n", "p.md")]
        ['console']
    """
    lines = text.splitlines()
    blocks, k = [], 0
    while k < len(lines):
        if not lines[k].startswith(FENCE):
            k += 1
            continue
        opening = k
        kind = _block_kind(lines[k][len(FENCE):], f"{where}:{k + 1}")
        k += 1
        while k < len(lines) and not lines[k].startswith(FENCE):
            k += 1
        if k == len(lines):
            raise DocsError(f"{where}:{opening + 1}: code fence is never closed")
        if kind is not None:
            code = "\n".join(lines[opening + 1:k])
            blocks.append(Block(kind[0], opening + 2, code, kind[1]))
        k += 1
    return blocks


def kiln_commands(block: Block) -> list[tuple[int, list[str]]]:
    """(page line, argv) of each `$ kiln ...` command of a console block; a line ending in a
    backslash continues on the next. Other lines (output, other programs) are left alone.

    Example:
        >>> kiln_commands(Block("console", 5, "$ kiln run m.so\\nok\\n$ ls"))
        [(5, ['kiln', 'run', 'm.so'])]
    """
    commands, pending, start = [], None, 0
    for offset, line in enumerate(block.code.splitlines()):
        if pending is None:
            if not line.startswith("$ "):
                continue
            pending, start, line = "", block.line + offset, line[2:]
        pending += line.rstrip().removesuffix("\\")
        if not line.rstrip().endswith("\\"):
            argv = shlex.split(pending)
            if argv and argv[0] == "kiln":
                commands.append((start, argv))
            pending = None
    return commands


# ------------------------------------------------------------------------------ running a page
def _run_python(block: Block, page: Path, namespace: dict, workdir: Path) -> None:
    # Padded so that line numbers in a traceback are the page's (and linecache shows its text).
    code = compile("\n" * (block.line - 1) + block.code + "\n", str(page), "exec")
    exec(code, namespace)


def _write_file(block: Block, page: Path, namespace: dict, workdir: Path) -> None:
    (workdir / block.name).write_text(block.code + "\n")


def _run_console(block: Block, page: Path, namespace: dict, workdir: Path) -> None:
    for line, argv in kiln_commands(block):
        argv = [os.path.expandvars(arg) for arg in argv]    # "$SCHEDULER", as a shell would
        print(f"$ {shlex.join(argv)}", flush=True)
        done = subprocess.run([sys.executable, "-m", "kiln.cli", *argv[1:]], cwd=workdir)
        if done.returncode != 0:
            raise SystemExit(f"{page}:{line}: `{shlex.join(argv)}` exited with status "
                             f"{done.returncode}")


def _skip(block: Block, page: Path, namespace: dict, workdir: Path) -> None:
    pass


RUNNERS = {"python": _run_python, "file": _write_file, "console": _run_console, "skip": _skip}


def run_page(page: Path, workdir: Path) -> None:
    """Run a page's blocks in order, in `workdir` (which goes on sys.path).

    Example:
        >>> run_page(Path("docs/tune.md"), Path(tempfile.mkdtemp()))   # doctest: +SKIP
    """
    page, workdir = Path(page).resolve(), Path(workdir).resolve()
    blocks = parse_page(page.read_text(), page)
    os.chdir(workdir)
    sys.path.insert(0, str(workdir))
    namespace = {"__name__": "__main__"}
    for block in blocks:
        RUNNERS[block.kind](block, page, namespace, workdir)


def _run_in_subprocess(page: Path, workdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, __file__, str(page), str(workdir)], cwd=workdir,
                          capture_output=True, text=True, timeout=PAGE_TIMEOUT)


def _opencl_missing():
    from kiln.runtime.gpu import DeviceUnavailableError, device_api
    from kiln.runtime import opencl
    try:
        device_api(opencl(0))
    except DeviceUnavailableError as err:
        return f"no OpenCL device ({err})"
    return None


def _arm_missing():
    from kiln.runtime.toolchain import missing
    return missing("aarch64-linux-gnu")


# Optional tools a page may need: name -> a probe returning why it is missing, or None.
PROBES = {"opencl": _opencl_missing, "arm": _arm_missing}


def missing_needs(page: Path) -> str | None:
    """Why a page cannot run here (a tool its `<!-- needs: ... -->` line names is missing).

    Example:
        >>> missing_needs(ROOT / "docs" / "tune.md") is None
        True
    """
    for match in re.finditer(r"<!-- needs: ([\w, ]+) -->", page.read_text()):
        for need in (n.strip() for n in match.group(1).split(",")):
            why = PROBES[need]()
            if why:
                return f"{page.name} needs {need}: {why}"
    return None


# ------------------------------------------------------------------------------ the tests
@pytest.fixture(scope="module")
def page_runs(request, tmp_path_factory):
    """page -> Future of its run: the pages selected for this session, JOBS at a time, in
    test order (each test waits for its own page while the next one runs)."""
    from kiln.runtime.peak import peak_gflops

    # Measured (once per machine, then cached) before the pages load the cores: the pages
    # that profile read it, and a figure measured under their load would be cached too low.
    peak_gflops()
    pages = [item.callspec.params["page"] for item in request.session.items
             if getattr(item, "originalname", None) == "test_page_runs"
             and missing_needs(item.callspec.params["page"]) is None]
    pool = ThreadPoolExecutor(JOBS)
    try:
        yield {page: pool.submit(_run_in_subprocess, page, tmp_path_factory.mktemp(page.stem))
               for page in pages}
    finally:
        pool.shutdown(cancel_futures=True)


# One xdist worker runs every page: `page_runs` starts all the session's pages in whichever
# worker builds it, so pages split over two workers would each run twice, at the same time.
@pytest.mark.xdist_group("docs_pages")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_runs(page, page_runs):
    why = missing_needs(page)
    if why:
        pytest.skip(why)
    done = page_runs[page].result()
    assert done.returncode == 0, (f"{page.relative_to(ROOT)} failed (exit {done.returncode})\n"
                                  f"--- stdout\n{done.stdout[-3000:]}\n"
                                  f"--- stderr\n{done.stderr[-6000:]}")


def test_every_guide_has_code_that_runs_and_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    guides = PAGES[1:]
    assert len(guides) >= 8, [p.name for p in guides]
    for page in guides:
        kinds = {b.kind for b in parse_page(page.read_text(), page)}
        assert "python" in kinds, f"{page.name} has no python block that runs"
        assert f"(docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"


def test_parse_page_kinds_lines_and_commands():
    text = "\n".join([
        "# A page",                          # 1
        "```python",                         # 2
        "a = 1",                             # 3
        "```",                               # 4
        "```python skip-test",               # 5
        "raise SystemExit(3)",               # 6
        "```",                               # 7
        "```python file=helper_mod.py",      # 8
        "VALUE = 7",                         # 9
        "```",                               # 10
        "```sh",                             # 11
        "make test",                         # 12
        "```",                               # 13
        "```console",                        # 14
        "$ kiln compile m.onnx \\",          # 15
        "    -o 'my model.so'",              # 16
        "wrote my model.so",                 # 17
        "$ ls -l",                           # 18
        "$ kiln selfcheck",                  # 19
        "```",                               # 20
    ])
    blocks = parse_page(text, "p.md")
    assert [(b.kind, b.line, b.name) for b in blocks] == [
        ("python", 3, None), ("skip", 6, None), ("file", 9, "helper_mod.py"),
        ("console", 15, None)]
    assert kiln_commands(blocks[-1]) == [
        (15, ["kiln", "compile", "m.onnx", "-o", "my model.so"]), (19, ["kiln", "selfcheck"])]


@pytest.mark.parametrize("text, message", [
    ("```python\nx = 1\n", "p.md:1: code fence is never closed"),
    ("intro\n```python run-me\nx = 1\n```\n", "p.md:2: unknown python fence options 'run-me'"),
    ("```python file=../escape.py\n```\n", "unknown python fence options 'file=../escape.py'"),
])
def test_bad_fences_are_named(text, message):
    with pytest.raises(DocsError) as err:
        parse_page(text, "p.md")
    assert message in str(err.value)


def test_runner_shares_a_namespace_writes_files_and_skips(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "```python file=helper_mod.py",
        "VALUE = 7",
        "```",
        "```python",
        "import helper_mod",
        "total = helper_mod.VALUE",
        "```",
        "```python skip-test",
        "raise SystemExit('a skipped block ran')",
        "```",
        "```python",
        "assert total == 7",
        "open('ran.txt', 'w').write(str(total * 6))",
        "```",
    ]) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    done = _run_in_subprocess(page, work)
    assert done.returncode == 0, done.stderr
    assert (work / "ran.txt").read_text() == "42"


def test_a_failing_block_names_the_page_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# title\n\n```python\nx = 1\nassert x == 2, 'x is not 2'\n```\n")
    done = _run_in_subprocess(page, tmp_path)
    assert done.returncode == 1
    assert f'File "{page.resolve()}", line 5' in done.stderr and "x is not 2" in done.stderr


def test_a_failing_kiln_command_fails_the_page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```console\n$ kiln run missing.so\n```\n")
    done = _run_in_subprocess(page, tmp_path)
    assert done.returncode == 1
    assert "kiln: error: missing.so: no such model library" in done.stderr
    assert f"{page.resolve()}:2: `kiln run missing.so` exited with status 2" in done.stderr


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(f"usage: {sys.argv[0]} PAGE.md [WORKDIR]")
    directory = Path(sys.argv[2]) if len(sys.argv) == 3 else \
        Path(tempfile.mkdtemp(prefix="kiln_docs_"))
    print(f"running {sys.argv[1]} in {directory}", file=sys.stderr)
    run_page(Path(sys.argv[1]), directory)

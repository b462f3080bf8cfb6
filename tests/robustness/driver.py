"""Runs many `kiln` command lines in one process, for the robustness suite (a process per case
would spend the suite's time importing kiln).

    python driver.py CASES.json RESULTS.jsonl

CASES.json is a list of {"id", "argv", "cwd"}. Each case runs kiln.cli.main.main(argv) in
`cwd` with file descriptors 1 and 2 sent to files (so the dynamic loader's, LLVM's and the C
runtime's own writes are caught too) and an alarm after CASE_TIMEOUT seconds. RESULTS.jsonl
gets {"id", "started": true} before a case and {"id", "status", "stdout", "stderr"} after it; a case that
kills the process (a signal) leaves only its "started" line, which the test reports.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import tempfile

CASE_TIMEOUT = 120


class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout(f"no exit after {CASE_TIMEOUT} s")


def _run_case(argv: list[str], cwd: str) -> tuple[int | str, str, str]:
    from kiln.cli.main import main
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        here = os.getcwd()
        signal.alarm(CASE_TIMEOUT)
        try:
            os.chdir(cwd)
            status = main(argv)
        except CaseTimeout as err:
            status = f"timeout: {err}"
        except SystemExit as err:            # argparse's --help, say
            status = err.code if isinstance(err.code, int) else 1
        except BaseException as error:       # main lets nothing out but this would show it
            status = f"escaped: {type(error).__name__}: {error}"
        finally:
            signal.alarm(0)
            os.chdir(here)
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode(errors="replace"))
    return status, *texts


def main() -> None:
    cases = json.loads(open(sys.argv[1]).read())
    signal.signal(signal.SIGALRM, _alarm)
    with open(sys.argv[2], "a") as results:
        for case in cases:
            results.write(json.dumps({"id": case["id"], "started": True}) + "\n")
            results.flush()
            status, out, err = _run_case(case["argv"], case["cwd"])
            results.write(json.dumps({"id": case["id"], "status": status, "stdout": out,
                                      "stderr": err}) + "\n")
            results.flush()


if __name__ == "__main__":
    main()

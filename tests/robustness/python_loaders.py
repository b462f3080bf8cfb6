"""Runs kiln's Python loaders on files, for the robustness suite: one process, many files.

    python python_loaders.py CASES.json RESULTS.jsonl

CASES.json is a list of {"id", "loader", "path"}; RESULTS.jsonl gets {"id", "started": true}
before each case and {"id", "outcome", "type", "message", "warnings"} after it ("ok", or
"raised" with the exception's type and message). A case that kills the process leaves only its
"started" line.
"""
from __future__ import annotations

import json
import sys
import warnings


def _load_records(path):
    from kiln.autotvm import load_records
    return list(load_records(path))


def _loaders():
    import kiln
    from kiln.frontend import load_exported_program
    return {"load_module": kiln.runtime.load_module, "from_onnx": kiln.frontend.from_onnx,
            "load_exported_program": load_exported_program, "load_records": _load_records}


def main() -> None:
    loaders = _loaders()
    cases = json.loads(open(sys.argv[1]).read())
    with open(sys.argv[2], "a") as results:
        for case in cases:
            results.write(json.dumps({"id": case["id"], "started": True}) + "\n")
            results.flush()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    loaders[case["loader"]](case["path"])
                    record = {"outcome": "ok"}
                except Exception as err:       # what the test inspects
                    record = {"outcome": "raised", "type": [c.__name__ for c in
                                                            type(err).__mro__],
                              "message": str(err)}
            record.update(id=case["id"], warnings=[str(w.message) for w in caught])
            results.write(json.dumps(record) + "\n")
            results.flush()


if __name__ == "__main__":
    main()

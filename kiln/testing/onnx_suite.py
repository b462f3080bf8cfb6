"""The ONNX project's backend node tests (`onnx.backend.test`, 1,884 single-op models with inputs
and expected outputs) run through kiln's ONNX backend, each case in an isolated worker process
with a time limit.

Each case gets a status: "pass"; "unsupported" (an op type or variant kiln does not import,
or inputs that are not tensors of numbers); "error" (import or compilation failed); "wrong"
(outputs differ beyond the case's own tolerance, compared by the suite's own
`Runner.assert_similar_outputs`); "crash" or "timeout". A case counts as passing only when
every node of it (subgraphs included) has a kiln converter, so nothing is computed by the
ONNX reference interpreter that the importer uses for constant subgraphs of unknown ops.

The checked-in expected statuses (tests/frontend/onnx_node_status.json) and the coverage table
(docs/onnx_coverage.md) are written by

    python -m kiln.testing.onnx_suite --update

and tests/frontend/test_onnx_backend.py fails when a case's status differs from the file.

Example:
    >>> results = run_suite(pattern="test_relu")          # doctest: +SKIP
    >>> results["test_relu"]["status"]                    # doctest: +SKIP
    'pass'
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from pathlib import Path

STATUSES = ("pass", "unsupported", "error", "wrong", "crash", "timeout")
CASE_TIMEOUT = 60.0
ROOT = Path(__file__).resolve().parents[2]
STATUS_FILE = ROOT / "tests" / "frontend" / "onnx_node_status.json"
COVERAGE_DOC = ROOT / "docs" / "onnx_coverage.md"
_REASON_CHARS = 200

_cases: dict | None = None


def _all_cases() -> dict:
    global _cases
    if _cases is None:
        from onnx.backend.test.case.node import collect_testcases
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _cases = {c.name: c for c in collect_testcases()}
    return _cases


def case_names(pattern: str | None = None) -> list[str]:
    """The suite's case names (sorted), those matching the regex `pattern` when given.

    Example:
        >>> "test_relu" in case_names("relu")
        True
    """
    names = sorted(_all_cases())
    if pattern:
        names = [n for n in names if re.search(pattern, n)]
    return names


def _op_types(graph) -> set:
    """(domain, op type) of every node of a graph and of its subgraphs."""
    from onnx import AttributeProto
    out = set()
    for node in graph.node:
        out.add((node.domain, node.op_type))
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                out |= _op_types(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for g in attr.graphs:
                    out |= _op_types(g)
    return out


def case_op_types(name: str) -> list[str]:
    """The op types a case's model uses (its main graph's nodes), sorted.

    Example:
        >>> case_op_types("test_relu")
        ['Relu']
    """
    return sorted({op for _, op in _op_types(_all_cases()[name].model.graph)})


def is_expanded(name: str) -> bool:
    """A case that runs an op's function body (its definition in other ops), not the op.

    Example:
        >>> is_expanded("test_celu_expanded"), is_expanded("test_celu")
        (True, False)
    """
    return re.search(r"_expanded(_ver\d+)?$", name) is not None


def case_op(name: str) -> str:
    """The op type a case tests: its node's op type; for a case of several nodes the one its
    name starts with (test_if_seq -> If); an _expanded case tests the op of its base case.

    Example:
        >>> case_op("test_celu_expanded")
        'Celu'
    """
    base = re.sub(r"_expanded(_ver\d+)?$", "", name)
    ops = case_op_types(base) if base in _all_cases() else case_op_types(name)
    if len(ops) == 1:
        return ops[0]
    plain = base[len("test_"):].replace("_", "").lower()
    named = [op for op in ops if plain.startswith(op.lower())]
    return max(named, key=len) if named else ops[0]


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 3] + "..."


def run_case(payload: dict) -> dict:
    """Run one case (payload {"name": ...}) through kiln's backend: {"status", "reason"}.

    Example:
        >>> run_case({"name": "test_relu"})["status"]      # doctest: +SKIP
        'pass'
    """
    import numpy as np
    from onnx import TensorProto, numpy_helper
    from onnx.backend.test.runner import Runner

    from ..frontend import FrontendError, UnsupportedOpsError
    from ..frontend.onnx import supported_ops
    from ..frontend.onnx_backend import KilnBackend

    case = _all_cases()[payload["name"]]
    known = set(supported_ops())
    missing = sorted({op if dom in ("", "ai.onnx") else f"{dom}.{op}"
                      for dom, op in _op_types(case.model.graph)
                      if dom not in ("", "ai.onnx") or op not in known})
    if missing:
        return {"status": "unsupported", "reason": "no converter: " + ", ".join(missing)}
    try:
        rep = KilnBackend.prepare(case.model)
        for inputs, ref_outputs in case.data_sets:
            if any(not isinstance(v, (np.ndarray, np.generic)) or v.dtype == object
                   for v in inputs):
                return {"status": "unsupported", "reason": "inputs that are not tensors "
                        "of numbers (sequences, optionals, strings)"}
            outputs = rep.run([np.asarray(v) for v in inputs])
            # Some expected outputs are TensorProtos (int16, int4, float8 ...): as arrays.
            ref_outputs = [numpy_helper.to_array(v) if isinstance(v, TensorProto) else v
                           for v in ref_outputs]
            try:
                Runner.assert_similar_outputs(list(ref_outputs), outputs, rtol=case.rtol,
                                              atol=case.atol)
            except (AssertionError, TypeError, ValueError) as err:
                return {"status": "wrong", "reason": _short(err)}
    except UnsupportedOpsError as err:
        return {"status": "unsupported", "reason": _short(err)}
    except FrontendError as err:
        text = str(err)
        if "element type" in text or "not a tensor" in text:
            return {"status": "unsupported", "reason": _short(text)}
        return {"status": "error", "reason": _short(f"{type(err).__name__}: {text}")}
    except Exception as err:      # a compiler bug: recorded for this case, the run goes on
        return {"status": "error", "reason": _short(f"{type(err).__name__}: {err}")}
    reason = f"inputs bound at compile time: {rep.specialized}" if rep.specialized else ""
    return {"status": "pass", "reason": reason}


def run_suite(pattern: str | None = None, jobs: int = 2, timeout: float = CASE_TIMEOUT,
              progress=None) -> dict:
    """{case name: {"status", "reason", "seconds"}} for the cases matching `pattern`, run in
    `jobs` isolated worker processes with a per-case `timeout` (seconds).

    Example:
        >>> run_suite("test_abs$")["test_abs"]["status"]   # doctest: +SKIP
        'pass'
    """
    from ..autotvm.workers import WorkerPool

    names = case_names(pattern)
    pool = WorkerPool(jobs, env={"KILN_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
                      max_jobs=400, preload=("kiln.testing.onnx_suite", "kiln"))
    results = {}
    try:
        batch = max(jobs * 8, 1)
        for start in range(0, len(names), batch):
            chunk = names[start:start + batch]
            outcomes = pool.map("kiln.testing.onnx_suite:run_case",
                                [{"name": n} for n in chunk], timeout=timeout)
            for name, outcome in zip(chunk, outcomes):
                if outcome.kind == "ok":
                    result = dict(outcome.value)
                elif outcome.kind == "error":
                    result = {"status": "error", "reason": _short(outcome.value)}
                else:
                    result = {"status": outcome.kind, "reason": _short(outcome.value)}
                result["seconds"] = round(outcome.seconds, 2)
                results[name] = result
            if progress:
                progress(len(results), len(names))
    finally:
        pool.close()
    return results


def summarize(results: dict) -> dict:
    """Counts per status, and the op types with at least one passing case of their own node
    (case_op; an _expanded case runs the op's function body in other ops, so it does not
    count for the op).

    Example:
        >>> summarize({"test_relu": {"status": "pass"}})["op_types_passing"]
        ['Relu']
    """
    counts = {s: 0 for s in STATUSES}
    passing = set()
    for name, r in results.items():
        counts[r["status"]] += 1
        if r["status"] == "pass" and not is_expanded(name):
            passing.add(case_op(name))
    return {"cases": len(results), "counts": counts, "op_types_passing": sorted(passing)}


def compare(expected: dict, results: dict) -> tuple[list, list]:
    """(regressions, newly passing): cases expected to pass that did not, and cases
    expected to fail that pass now; each as (name, expected status, status, reason).

    Example:
        >>> compare({"a": {"status": "pass"}}, {"a": {"status": "wrong", "reason": "x"}})[0]
        [('a', 'pass', 'wrong', 'x')]
    """
    regressions, fixed = [], []
    for name, r in sorted(results.items()):
        want = expected.get(name, {}).get("status")
        row = (name, want, r["status"], r.get("reason", ""))
        if want == "pass" and r["status"] != "pass":
            regressions.append(row)
        elif want != "pass" and r["status"] == "pass":
            fixed.append(row)
    return regressions, fixed


def load_status(path: Path = STATUS_FILE) -> dict:
    """The checked-in expected statuses: {case name: {"status", "reason"}}."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)["cases"]


def write_status(results: dict, path: Path = STATUS_FILE) -> None:
    import onnx

    cases = {n: {"status": r["status"], "reason": r.get("reason", "")}
             for n, r in sorted(results.items())}
    doc = {"onnx_version": onnx.__version__, "summary": summarize(results), "cases": cases}
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.testing.onnx_suite",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--filter", help="regex: run only the matching cases")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=CASE_TIMEOUT)
    parser.add_argument("--update", action="store_true",
                        help="write the status file and the coverage doc (whole suite only)")
    parser.add_argument("--show", default="wrong,error,crash,timeout",
                        help="statuses whose cases are listed (comma-separated)")
    args = parser.parse_args(argv)
    if args.update and args.filter:
        parser.error("--update runs the whole suite; drop --filter")
    started = time.monotonic()

    def progress(done, total):
        print(f"\r{done}/{total} cases, {time.monotonic() - started:.0f} s", end="",
              file=sys.stderr, flush=True)

    results = run_suite(args.filter, args.jobs, args.timeout, progress)
    print(file=sys.stderr)
    shown = set(args.show.split(","))
    for name, r in sorted(results.items()):
        if r["status"] in shown:
            print(f"{r['status']:8} {name}: {r.get('reason', '')}")
    summary = summarize(results)
    print(f"{summary['counts']} - {summary['counts']['pass']}/{summary['cases']} pass, "
          f"{len(summary['op_types_passing'])} op types with a passing case, "
          f"{time.monotonic() - started:.0f} s")
    if args.update:
        write_status(results)
        from .onnx_coverage import write_coverage_doc
        write_coverage_doc(results)
        print(f"wrote {STATUS_FILE} and {COVERAGE_DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())

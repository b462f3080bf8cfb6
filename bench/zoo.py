"""The model zoo (issue 32): every kiln.testing.zoo architecture imported from PyTorch, compiled
untuned with an empty kernel cache, checked against eager PyTorch, and timed against eager
PyTorch and ONNX Runtime in the same process, interleaved.

    python bench/zoo.py [--models SUBSTRING ...] [--json out.json] [--docs docs/model_zoo.md]
                        [--rounds 3] [--runs 3] [--no-timing]

Each model runs in a fresh process (a crash or a hang costs that model, not the run), batch 1,
2 threads per system. A model "matches" when max |kiln - eager| <= 1e-4 * max |eager|
(float32). --docs writes the zoo's table page from this run (tests/testing/test_zoo.py checks
that the page lists exactly the zoo's entries).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

THREADS = peers.configure_threads(int(os.environ.get("BENCH_THREADS", "2")))
TOLERANCE = 1e-4            # max |kiln - eager| / max |eager|
TIMEOUT_S = 1200


def _arrays(inputs) -> list:
    return [x.numpy() for x in inputs]


def measure(name: str, rounds: int, runs: int, timing: bool) -> dict:
    """Build, import, compile, check and time zoo model `name` in this process."""
    import numpy as np
    import torch

    import kiln
    from kiln.frontend import from_pytorch
    from kiln.testing import zoo
    torch.set_num_threads(THREADS)
    result = {"name": name, "errors": {}}
    entry = zoo.entry(name)
    result["task"] = entry.task
    model, inputs = entry.build()
    with torch.inference_mode():
        ref = model(*inputs)
    ref = ref.float().numpy()
    t0 = time.perf_counter()
    try:
        mod, params = from_pytorch(model, inputs)
        t1 = time.perf_counter()
        lib = kiln.compile(mod, target="llvm", params=params)
        t2 = time.perf_counter()
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        result.update(status="error", error=peers.short_error(exc))
        return result
    result.update(import_s=t1 - t0, compile_s=t2 - t1)
    ex = peers.kiln_executor(lib, _arrays(inputs))
    ex.run()
    out = ex.get_output(0).numpy()
    if out.shape != ref.shape:
        result.update(status="mismatch", error=f"shape {out.shape} != eager's {ref.shape}")
        return result
    err = float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))
    result.update(max_rel_err=err, status="ok" if err <= TOLERANCE else "mismatch")
    if not timing:
        return result
    calls = {"kiln": ex.run, "eager": peers.torch_eager(model, inputs)}
    with tempfile.TemporaryDirectory(prefix="kiln_zoo_") as workdir:
        try:
            path = peers.onnx_export(model, inputs, os.path.join(workdir, "m.onnx"))
            calls["onnxruntime"] = peers.onnxruntime_call(path, _arrays(inputs), THREADS)
        except Exception as exc:  # noqa: BLE001 - a failing peer is reported, not fatal
            result["errors"]["onnxruntime"] = peers.short_error(exc)
        samples = peers.interleave(calls, rounds, runs, min_sample_s=0.002)
    result["median_ms"] = {k: peers.median_ms(v) for k, v in samples.items()}
    return result


def _ratio(r: dict, peer: str):
    ms = r.get("median_ms", {})
    return ms[peer] / ms["kiln"] if ms.get(peer) and ms.get("kiln") else None


def table_rows(results: list) -> list:
    rows = []
    for r in results:
        ms = r.get("median_ms", {})
        rows.append([r["name"], r.get("task", ""), r["status"],
                     peers.fmt(r.get("compile_s"), ".1f"), peers.fmt(ms.get("kiln"), ".1f"),
                     peers.fmt(ms.get("eager"), ".1f"), peers.fmt(ms.get("onnxruntime"), ".1f"),
                     peers.fmt(_ratio(r, "eager")), peers.fmt(_ratio(r, "onnxruntime")),
                     r.get("error") or r.get("errors", {}).get("onnxruntime", "")])
    return rows


HEADERS = ["model", "task", "status", "compile s", "kiln ms", "eager ms", "ORT ms",
           "eager/kiln", "ORT/kiln", "note"]


def summary(results: list) -> str:
    """One paragraph of counts: matched, failed, faster than eager, compile times."""
    import statistics
    n = len(results)
    ok = [r for r in results if r["status"] == "ok"]
    compiled = [r["compile_s"] for r in results if "compile_s" in r]
    faster = [r for r in ok if (_ratio(r, "eager") or 0) >= 1.0]
    timed = [r for r in ok if _ratio(r, "eager") is not None]
    text = f"{len(ok)} of {n} compile and match eager PyTorch within {TOLERANCE:g} x max|y|"
    if compiled:
        text += (f"; compile time median {statistics.median(compiled):.1f} s, max "
                 f"{max(compiled):.1f} s")
    if timed:
        text += f"; kiln at least as fast as eager on {len(faster)} of {len(timed)} timed"
    return text + "."


def write_docs(path: str, results: list, info: dict, argv: list) -> None:
    """The zoo's page: how it was made, the summary, and one row per model."""
    lines = ["# Model zoo", "",
             "Generated by `python bench/zoo.py " + " ".join(argv) + "` "
             f"({info['time']}, {info.get('cpu')}, {info['threads']} threads per system, "
             f"torch {info['torch']}, onnxruntime {info['onnxruntime']}). Do not edit by hand: "
             "rerun the bench. `tests/testing/test_zoo.py` checks that this page lists every "
             "entry of `kiln.testing.zoo`.", "",
             "Every model has seeded random weights (nothing is downloaded), batch 1, float32, "
             "and is compiled untuned with an empty kernel cache. *status* `ok`: kiln's output "
             f"equals eager PyTorch's within {TOLERANCE:g} x max|y|. Times are medians of "
             "interleaved runs in one process; *eager/kiln* and *ORT/kiln* above 1 mean kiln "
             "is faster. CPU figures only.", "",
             "A zoo model is built by name (torchvision and timm come from the folder `make` "
             "installs them into, see `kiln.testing.zoo`):", "",
             "```python",
             "from kiln.testing import zoo",
             "",
             'entry = zoo.entry("transformers/distilbert")',
             'assert entry.task == "encoder"',
             "```", "",
             "```python skip-test",
             "import kiln",
             "from kiln.frontend import from_pytorch",
             "",
             "model, inputs = entry.build()",
             "mod, params = from_pytorch(model, inputs)",
             'lib = kiln.compile(mod, target="llvm", params=params)',
             "```", "",
             summary(results), "",
             "| " + " | ".join(HEADERS) + " |",
             "|" + "---|" * len(HEADERS)]
    for row in table_rows(results):
        lines.append("| " + " | ".join(c.replace("|", "/") for c in row) + " |")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", metavar="SUBSTRING",
                   help="only the entries whose name contains one of these")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-timing", action="store_true")
    p.add_argument("--json")
    p.add_argument("--docs")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.rounds, args.runs, not args.no_timing)))
        return

    from kiln.testing import zoo
    names = [e.name for e in zoo.entries()
             if not args.models or any(s in e.name for s in args.models)]
    results = []
    child_args = ["--rounds", str(args.rounds), "--runs", str(args.runs)]
    child_args += ["--no-timing"] if args.no_timing else []
    for name in names:
        with tempfile.TemporaryDirectory(prefix="kiln_zoo_cache_") as cache:
            os.environ["KILN_KERNEL_CACHE_DIR"] = cache        # cold: an empty cache each
            r = peers.run_child([__file__, "--one", name, *child_args], TIMEOUT_S)
        if "name" not in r:
            r = {"name": name, "status": "error", "error": r.get("error", "no result"),
                 "task": zoo.entry(name).task}
        results.append(r)
        row = table_rows([r])[0]
        print("  " + "  ".join(row), file=sys.stderr, flush=True)
    info = peers.machine_info(THREADS)
    print(peers.format_table(HEADERS, table_rows(results)))
    print(summary(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": info, "results": results}, fh, indent=1)
    if args.docs:
        write_docs(args.docs, results, info, argv)


if __name__ == "__main__":
    main()

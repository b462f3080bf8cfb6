"""PyTorch's own OpInfo samples (`torch.testing._internal.common_methods_invocations.op_db`) run
through from_pytorch + kiln.compile and compared with eager PyTorch, each sample in an isolated
worker process with a time limit.

Every float32 sample of an OpInfo (`op.sample_inputs("cpu", torch.float32)`, generated under a
fixed seed so that every process sees the same samples) is wrapped in a tiny nn.Module whose
inputs are the sample's tensors (its other arguments are baked in), exported with torch.export,
imported with from_pytorch, compiled for llvm, run, and compared with eager `op.op(...)`.

Each sample gets a status: "pass"; "unsupported" (kiln lacks a converter or an op form, i.e.
UnsupportedOpsError, or torch.export could not trace or decompose the call, or its values are
not tensors of kiln's dtypes: recorded, but not kiln's fault); "skip" (eager output that cannot
be compared: random or uninitialized values); "error" (kiln raised); "wrong"; "crash";
"timeout"; "untried" (not run: the first samples of its OpInfo were all unsupported, see
run_opinfos' probe).

Tolerance: float outputs |kiln - eager| <= 1e-5 + 1e-4 * |eager| elementwise, with nan and
inf where eager has them; integer and bool outputs equal; shapes and dtypes equal. Where a
value is the small difference of large terms, float32 rounding alone can exceed that bound
for both systems; such an element still matches when kiln is no farther from eager's float64
result than eager's float32 result is (|kiln - eager64| <= |eager - eager64| + the same
tolerance), i.e. kiln is at least as accurate as eager.

An OpInfo is "pass" (claimed by kiln) when every float32 sample passes, "partial" when some do,
and otherwise takes the status of its failing samples. "Core ATen ops covered" are the distinct
ATen overload packets (aten.add, ...) in the exported graphs of the claimed OpInfos.

    python -m kiln.testing.opinfo --filter '^(abs|add)$'     # a few OpInfos
    python -m kiln.testing.opinfo --update                   # all; rewrites the two files below

--update writes tests/frontend/opinfo_status.json (read by tests/frontend/test_pytorch_opinfo.py)
and docs/pytorch_coverage.md.

Example:
    >>> results = run_opinfos(["abs"])                       # doctest: +SKIP
    >>> summarize_op(results["abs"])["status"]               # doctest: +SKIP
    'pass'
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

SAMPLE_STATUSES = ("pass", "unsupported", "skip", "error", "wrong", "crash", "timeout",
                   "untried")
# How an OpInfo with no passing sample is labelled: its worst sample status, in this order.
_SEVERITY = ("wrong", "error", "crash", "timeout", "unsupported", "skip", "untried")
# run_opinfos' probe for --update: runs of an OpInfo's samples past this many stop when all
# of these are unsupported.
PROBE = 6
SAMPLE_TIMEOUT = 60.0
RTOL, ATOL = 1e-4, 1e-5
SEED = 0
# With a lock (run_samples), how long one turn holding it lasts, in seconds.
LOCK_TURN = 60.0
ROOT = Path(__file__).resolve().parents[2]
STATUS_FILE = ROOT / "tests" / "frontend" / "opinfo_status.json"
COVERAGE_DOC = ROOT / "docs" / "pytorch_coverage.md"
_REASON_CHARS = 240

# FrontendErrors that state a limit of kiln's importer (not a bug): dtypes and inputs it does
# not take, mutation of inputs, shapes that depend on data.
_LIMITS = ("not supported", "mutates", "static shapes", "returns no tensors", "not a tensor")
# OpInfos whose eager output is uninitialized memory: nothing to compare with.
_UNINITIALIZED = {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty",
                  "new_empty_strided"}


# --------------------------------------------------------------------------- the samples
_db: dict | None = None


def _op_db() -> dict:
    """{OpInfo key: OpInfo}; the key is the name, with ".variant" for variants."""
    global _db
    if _db is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db
        _db = {opinfo_key(op): op for op in op_db}
    return _db


def opinfo_key(op) -> str:
    """The name an OpInfo is listed under: its name, and its variant after a dot.

    Example:
        >>> opinfo_key(op)          # the OpInfo of torch.max(x, dim)   # doctest: +SKIP
        'max.reduction_with_dim'
    """
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def opinfo_names(pattern: str | None = None) -> list[str]:
    """The OpInfo keys of op_db with float32 support, sorted; those matching regex `pattern`.

    Example:
        >>> opinfo_names("^abs$")
        ['abs']
    """
    import torch
    names = sorted(k for k, op in _op_db().items() if torch.float32 in op.supported_dtypes("cpu"))
    if pattern:
        names = [n for n in names if re.search(pattern, n)]
    return names


_samples_cache: tuple = (None, [])


def float32_samples(key: str) -> list:
    """The float32 SampleInputs of an OpInfo, the same list in every process (seeded).

    Example:
        >>> len(float32_samples("abs")) > 0
        True
    """
    global _samples_cache
    if _samples_cache[0] == key:
        return _samples_cache[1]
    import random

    import numpy as np
    import torch
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = list(_op_db()[key].sample_inputs("cpu", torch.float32))
    _samples_cache = (key, samples)
    return samples


class _Slot:
    """Where the i-th tensor input goes in a call's arguments."""

    def __init__(self, index):
        self.index = index


def _map_leaves(value, fn):
    """`value` (nested lists, tuples and dicts) with fn applied to every other value."""
    if type(value) in (list, tuple):
        return type(value)(_map_leaves(v, fn) for v in value)
    if type(value) is dict:
        return {k: _map_leaves(v, fn) for k, v in value.items()}
    return fn(value)


def split_tensors(value, tensors: list):
    """`value` (nested lists, tuples and dicts) with every tensor replaced by a _Slot; the
    tensors are appended to `tensors` in order.

    Example:
        >>> ts = []; split_tensors((torch.ones(2), 3), ts)   # doctest: +SKIP
        (<_Slot 0>, 3)
    """
    import torch

    def slot(v):
        if not isinstance(v, torch.Tensor):
            return v
        tensors.append(v)
        return _Slot(len(tensors) - 1)
    return _map_leaves(value, slot)


def _fill(template, tensors):
    return _map_leaves(template, lambda v: tensors[v.index] if isinstance(v, _Slot) else v)


def _op_call_module(fn, template):
    """An nn.Module whose forward(*tensors) is fn(*args, **kwargs) of the filled template."""
    import torch

    class OpCall(torch.nn.Module):
        def forward(self, *tensors):
            args, kwargs = _fill(template, tensors)
            return fn(*args, **kwargs)

    return OpCall().eval()


def flat_outputs(out) -> list:
    """A call's result as a flat list in torch.export's output order (tuples, lists and
    structseqs such as torch.return_types.max flattened; None dropped).

    Example:
        >>> [t.shape for t in flat_outputs(torch.ones(2, 3).max(0))]   # doctest: +SKIP
        [torch.Size([3]), torch.Size([3])]
    """
    if out is None:
        return []
    if isinstance(out, (list, tuple)):
        flat = []
        for o in out:
            flat += flat_outputs(o)
        return flat
    return [out]


# --------------------------------------------------------------------------- one sample
def _short(text) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 3] + "..."


def compare(got, want, exact=None) -> str | None:
    """None when kiln's output `got` (numpy) matches eager's `want` (a tensor), else why not.
    With `exact` (eager's float64 output of the same call, numpy), an element out of tolerance
    of `want` still matches when `got` is no farther from `exact` than `want` is (plus the
    tolerance).

    Example:
        >>> compare(np.ones(2, "float32"), torch.ones(2)) is None   # doctest: +SKIP
        True
    """
    import numpy as np
    want = want.detach().resolve_conj().numpy()
    if got.shape != want.shape:
        return f"shape {got.shape}, eager {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, eager {want.dtype}"
    if want.dtype.kind != "f":
        bad = got != want
        return None if not bad.any() else f"{int(bad.sum())} of {want.size} values differ"
    nan = np.isnan(want)
    if (np.isnan(got) != nan).any():
        return "nan where eager has none, or a number where eager has nan"
    inf = np.isinf(want)
    if (got[inf] != want[inf]).any() or np.isinf(got[~inf]).any():
        return "inf values differ"
    finite = ~(nan | inf)
    g, w = got[finite].astype(np.float64), want[finite].astype(np.float64)
    err = np.abs(g - w)
    bad = err > ATOL + RTOL * np.abs(w)
    if bad.any() and exact is not None and exact.shape == want.shape:
        x = exact[finite].astype(np.float64)
        bad &= np.abs(g - x) > np.abs(w - x) + ATOL + RTOL * np.abs(x)
    if bad.any():
        k = int(np.argmax(err - RTOL * np.abs(w)))
        return (f"{int(bad.sum())} of {want.size} values beyond rtol {RTOL:g} / atol {ATOL:g}; "
                f"e.g. {g[k]:.7g} vs eager {w[k]:.7g}")
    return None


def _packets(program) -> list[str]:
    """The distinct ops (overload packets, e.g. aten.add) called in an exported program, with
    the runtime checks the importer ignores left out."""
    import operator

    import torch

    from ..frontend.pytorch.importer import _IGNORED
    from ..frontend.pytorch.registry import target_name
    out = set()
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if target_name(node.target) in _IGNORED:
            continue
        if isinstance(node.target, torch._ops.OpOverload):
            out.add(str(node.target.overloadpacket))
        else:
            out.add(target_name(node.target))
    return sorted(out)


def _float64_eager(op, template, tensors) -> list:
    """Eager outputs of the call with its float tensors in float64 (numpy), or [] where the
    OpInfo has no float64 or the call fails."""
    import torch
    if torch.float64 not in op.supported_dtypes("cpu"):
        return []
    wide = [t.double() if t.is_floating_point() else t.clone() for t in tensors]
    try:
        with torch.no_grad():
            args, kwargs = _fill(template, wide)
            out = flat_outputs(op.op(*args, **kwargs))
        return [o.detach().numpy() if isinstance(o, torch.Tensor) else None for o in out]
    except Exception:   # a dtype argument baked into the sample, say: no second opinion
        return []


def _without_converter(program) -> list[str]:
    """The call targets of an exported program that have no kiln converter."""
    import operator

    from ..frontend.pytorch.importer import _IGNORED, functional_twin
    from ..frontend.pytorch.registry import CONVERTERS, target_name
    missing = set()
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        name = target_name(node.target)
        if name not in _IGNORED and name not in CONVERTERS \
                and functional_twin(node) not in CONVERTERS:
            missing.add(name)
    return sorted(missing)


def _eager(fn, template, tensors):
    """Eager outputs of the call, or a reason they cannot be compared."""
    import torch
    with torch.no_grad():
        # clones: an in-place op must not change the inputs kiln gets
        args, kwargs = _fill(template, [t.clone() for t in tensors])
        out = flat_outputs(fn(*args, **kwargs))
        args, kwargs = _fill(template, [t.clone() for t in tensors])
        again = flat_outputs(fn(*args, **kwargs))
    for a, b in zip(out, again):
        if isinstance(a, torch.Tensor) and not torch.equal(a, b) \
                and not (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                         and torch.equal(a.nan_to_num(), b.nan_to_num())):
            return None, "eager gives different values on two calls (random)"
    return out, None


def run_sample(payload: dict) -> dict:
    """Run sample payload["index"] of OpInfo payload["op"] through kiln:
    {"status", "reason", "ops", "total"} (ops: the overload packets of its exported graph;
    total: how many float32 samples the OpInfo has in this process's torch).

    Example:
        >>> run_sample({"op": "abs", "index": 0})["status"]   # doctest: +SKIP
        'pass'
    """
    key = payload["op"]
    samples = float32_samples(key)
    return {**_run_one(_op_db()[key], samples[payload["index"]]), "total": len(samples)}


def _run_one(op, sample) -> dict:
    import numpy as np
    import torch

    if op.name in _UNINITIALIZED:
        return {"status": "skip", "reason": "eager output is uninitialized memory", "ops": []}
    tensors: list = []
    template = split_tensors(((sample.input, *sample.args), dict(sample.kwargs)), tensors)
    try:
        want, why = _eager(op.op, template, tensors)
    except Exception as err:   # a sample eager itself rejects
        return {"status": "skip", "reason": _short(f"eager failed: {type(err).__name__}: {err}"),
                "ops": []}
    if why:
        return {"status": "skip", "reason": why, "ops": []}
    if not want or not all(isinstance(w, torch.Tensor) for w in want):
        return {"status": "unsupported", "reason": "returns a value that is not a tensor",
                "ops": []}
    if any(w.is_complex() or t.is_complex() for w in want for t in tensors):
        return {"status": "unsupported", "reason": "complex tensors", "ops": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _through_kiln(op, template, tensors, want, np, torch)


def _through_kiln(op, template, tensors, want, np, torch) -> dict:
    from .. import compile as kiln_compile
    from ..frontend import FrontendError, UnsupportedOpsError, from_pytorch
    from ..frontend.pytorch import export_program
    from ..runtime import GraphExecutor

    module = _op_call_module(op.op, template)
    try:
        program = export_program(torch.export.export(module, tuple(tensors)))
    except Exception as err:   # torch.export or torch's decompositions: not kiln's
        return {"status": "unsupported", "ops": [],
                "reason": _short(f"torch.export: {type(err).__name__}: {err}")}
    ops = _packets(program)
    missing = _without_converter(program)
    if missing:
        # the importer folds a node whose operands are all empty with torch itself; such a
        # sample never ran a kiln converter, so it does not count for the op
        return {"status": "unsupported", "ops": ops,
                "reason": "no kiln converter for " + ", ".join(missing)}
    try:
        mod, params = from_pytorch(program)
    except UnsupportedOpsError as err:
        return {"status": "unsupported", "reason": _short(err), "ops": ops}
    except FrontendError as err:
        status = "unsupported" if any(k in str(err) for k in _LIMITS) else "error"
        return {"status": status, "reason": _short(err), "ops": ops}
    except Exception as err:   # a bug in a converter
        return {"status": "error", "reason": _short(f"import: {type(err).__name__}: {err}"),
                "ops": ops}
    try:
        executor = GraphExecutor(kiln_compile(mod, target="llvm", params=params))
        names = [p.name_hint for p in mod["main"].params if p.name_hint not in params]
        # np.array, not ascontiguousarray, which makes 0-d arrays 1-d
        executor.run(**{n: np.array(t.numpy(), order="C") for n, t in zip(names, tensors)})
        got = [executor.get_output(i).numpy() for i in range(executor.get_num_outputs())]
    except Exception as err:   # compilation or run: kiln's
        return {"status": "error", "reason": _short(f"{type(err).__name__}: {err}"), "ops": ops}
    if len(got) != len(want):
        return {"status": "wrong", "reason": f"{len(got)} outputs, eager {len(want)}", "ops": ops}
    exact = None
    for i, (g, w) in enumerate(zip(got, want)):
        why = compare(g, w)
        if why and w.is_floating_point():
            exact = _float64_eager(op, template, tensors) if exact is None else exact
            if exact and i < len(exact):
                why = compare(g, w, exact[i])
        if why:
            return {"status": "wrong", "reason": _short(f"output {i}: {why}"), "ops": ops}
    return {"status": "pass", "reason": "", "ops": ops}


# --------------------------------------------------------------------------- many samples
def run_samples(pairs, jobs: int = 2, timeout: float = SAMPLE_TIMEOUT, progress=None,
                lock: str | None = None) -> list:
    """The results of the samples `pairs` ((OpInfo key, sample index), ...), in order, each
    run in one of `jobs` isolated worker processes with a `timeout` (seconds). With `lock` (a
    file path) each batch of samples runs holding an exclusive flock on it, so a long run takes
    turns with other users of a shared machine.

    Example:
        >>> run_samples([("abs", 0)])[0]["status"]          # doctest: +SKIP
        'pass'
    """
    from ..autotvm.workers import WorkerPool

    payloads = [{"op": key, "index": i} for key, i in pairs]
    pool = WorkerPool(jobs, env={"KILN_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
                      max_jobs=500, preload=("kiln.testing.opinfo", "kiln",
                                             "torch.testing._internal.common_methods_invocations"))
    results: list = []
    batch = max(jobs * 16, 1)
    try:
        while len(results) < len(payloads):
            with _held(lock):
                # batches back to back while the lock is held, up to LOCK_TURN seconds
                turn_end = time.monotonic() + LOCK_TURN
                while len(results) < len(payloads) and time.monotonic() < turn_end:
                    chunk = payloads[len(results):len(results) + batch]
                    outcomes = pool.map("kiln.testing.opinfo:run_sample", chunk,
                                        timeout=timeout)
                    results += [_result(o) for o in outcomes]
                    if progress:
                        progress(len(results), len(payloads))
    finally:
        pool.close()
    return results


def _result(outcome) -> dict:
    if outcome.kind == "ok":
        result = dict(outcome.value)
    else:
        status = "error" if outcome.kind == "error" else outcome.kind
        result = {"status": status, "reason": _short(outcome.value), "ops": []}
    result["seconds"] = round(outcome.seconds, 2)
    return result


def run_opinfos(keys, jobs: int = 2, timeout: float = SAMPLE_TIMEOUT, progress=None,
                lock: str | None = None, probe: int | None = None) -> dict:
    """{OpInfo key: [sample result, ...]} for every float32 sample of the OpInfos `keys` (see
    run_samples for the other arguments).

    With `probe`, the first `probe` samples of each OpInfo run first, and its other samples
    only when one of those got past "unsupported" and "skip"; the others are then recorded as
    "untried". This saves most of a full run's time (OpInfos of linear algebra, FFTs, sparse
    tensors ... have hundreds of samples that kiln cannot import) and never changes which
    OpInfos are claimed: one unsupported sample already rules an OpInfo out.

    Example:
        >>> run_opinfos(["abs"])["abs"][0]["status"]          # doctest: +SKIP
        'pass'
    """
    counts = {key: len(float32_samples(key)) for key in keys}
    first = {key: range(min(n, probe) if probe else n) for key, n in counts.items()}
    pairs = [(key, i) for key in keys for i in first[key]]
    results = {key: [] for key in keys}
    for (key, _), r in zip(pairs, run_samples(pairs, jobs, timeout, progress, lock)):
        results[key].append(r)
    if not probe:
        return results
    go_on = [key for key in keys if any(r["status"] not in ("unsupported", "skip")
                                        for r in results[key])]
    rest = [(key, i) for key in go_on for i in range(probe, counts[key])]
    for (key, _), r in zip(rest, run_samples(rest, jobs, timeout, progress, lock)):
        results[key].append(r)
    for key in keys:
        untried = {"status": "untried", "ops": [], "reason": f"the first {probe} samples were "
                   f"unsupported or skipped, so the others were not run"}
        results[key] += [dict(untried) for _ in range(counts[key] - len(results[key]))]
    return results


@contextlib.contextmanager
def _held(lock: str | None):
    if lock is None:
        yield
        return
    import fcntl
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def summarize_op(samples: list) -> dict:
    """An OpInfo's record from its sample results: status ("pass" when every sample passes,
    "partial" when some do, else the worst sample status), passing and total counts, counts
    per status, the first failure's reason, and the ops of its exported graphs.

    Example:
        >>> summarize_op([{"status": "pass", "ops": ["aten.abs"]}])["status"]
        'pass'
    """
    counts = Counter(s["status"] for s in samples)
    passed = counts.get("pass", 0)
    failing = [s for s in samples if s["status"] != "pass"]
    if not samples:
        status = "skip"
    elif not failing:
        status = "pass"
    elif passed:
        status = "partial"
    else:
        status = next(s for s in _SEVERITY if counts.get(s))
    first = next((s for s in failing if s["status"] == status), failing[0] if failing else None)
    ops = sorted({o for s in samples for o in s.get("ops", [])})
    return {"status": status, "passed": passed, "total": len(samples),
            "counts": {s: counts[s] for s in SAMPLE_STATUSES if counts.get(s)},
            "reason": "" if first is None else f"{first['status']}: {first.get('reason', '')}",
            # which samples fail, where some pass (the first 50)
            "failing_samples": [i for i, s in enumerate(samples)
                                if s["status"] != "pass"][:50] if status == "partial" else [],
            "aten_ops": ops}


def core_aten_ops(records: dict) -> tuple[list, list]:
    """(ops, core): the overload packets in the exported graphs of claimed OpInfos, and those
    of them that PyTorch tags as core ATen IR (torch.Tag.core).

    Example:
        >>> core_aten_ops({"abs": {"status": "pass", "aten_ops": ["aten.abs"]}})
        (['aten.abs'], ['aten.abs'])
    """
    ops = sorted({o for r in records.values() if r["status"] == "pass" for o in r["aten_ops"]
                  if o.startswith("aten.")})
    return ops, [o for o in ops if _is_core(o)]


def _is_core(packet: str) -> bool:
    import torch
    packet_op = getattr(torch.ops.aten, packet.split(".", 1)[1], None)
    if packet_op is None:
        return False
    return any(torch.Tag.core in getattr(packet_op, o).tags for o in packet_op.overloads())


def summary(records: dict) -> dict:
    """Counts of OpInfos per status, samples per status, and the covered ATen ops.

    Example:
        >>> summary({"abs": {"status": "pass", "passed": 1, "total": 1, "counts": {"pass": 1},
        ...                  "aten_ops": ["aten.abs"]}})["claimed"]
        1
    """
    by_status = Counter(r["status"] for r in records.values())
    samples = Counter()
    for r in records.values():
        samples.update(r["counts"])
    ops, core = core_aten_ops(records)
    return {"opinfos": len(records), "claimed": by_status.get("pass", 0),
            "opinfo_statuses": dict(sorted(by_status.items())),
            "samples": sum(samples.values()),
            "sample_statuses": {s: samples[s] for s in SAMPLE_STATUSES if samples.get(s)},
            "aten_ops_covered": len(ops), "core_tagged_aten_ops_covered": len(core),
            "aten_ops": ops}


def compare_records(expected: dict, records: dict) -> tuple[list, list]:
    """(regressions, newly passing) of `records` against the status file's: OpInfos claimed
    there that are not now (or a partial one that lost a passing sample), and OpInfos not
    claimed there that pass now; each as (key, expected status, status, reason).

    Example:
        >>> compare_records({"a": {"status": "pass"}}, {"a": {"status": "wrong", "reason": "x"}})
        ([('a', 'pass', 'wrong', 'x')], [])
    """
    regressions, fixed = [], []
    for key, r in sorted(records.items()):
        want = expected.get(key, {})
        row = (key, want.get("status"), r["status"], r.get("reason", ""))
        if want.get("status") == "pass" and r["status"] != "pass":
            regressions.append(row)
        elif want.get("status") != "pass" and r["status"] == "pass":
            fixed.append(row)
        elif want.get("status") == "partial" and r.get("passed", 0) < want.get("passed", 0):
            regressions.append(row)
    return regressions, fixed


# --------------------------------------------------------------------------- the files
def load_status(path: Path = STATUS_FILE) -> dict:
    """The checked-in status file: {"torch_version", "summary", "opinfos": {key: record}}."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_status(records: dict, seconds: float, probe: int | None = PROBE, jobs: int = 2,
                 path: Path = STATUS_FILE) -> dict:
    """Write the status file for `records` (summarize_op's, per OpInfo) of a run that took
    `seconds` with run_opinfos' `probe` and `jobs`; returns its contents."""
    import platform

    import torch
    doc = {"torch_version": torch.__version__, "python_version": platform.python_version(),
           "seed": SEED, "rtol": RTOL, "atol": ATOL, "probe": probe,
           "sample_timeout": SAMPLE_TIMEOUT, "jobs": jobs, "wall_seconds": round(seconds),
           "summary": summary(records), "opinfos": dict(sorted(records.items()))}
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return doc


def _cell(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip().replace("|", "/")
    return text if len(text) <= 110 else text[:107] + "..."


def render(doc: dict) -> str:
    """docs/pytorch_coverage.md from the status file's contents.

    Example:
        >>> render(load_status()).startswith("# PyTorch op coverage")   # doctest: +SKIP
        True
    """
    return "\n".join(_render_method(doc) + _render_summary(doc["summary"]) +
                     _render_table(doc["opinfos"]) + _render_ops(doc["summary"]))


def _render_method(doc: dict) -> list:
    s = doc["summary"]
    return [
        "# PyTorch op coverage (OpInfo samples)", "",
        "Generated by `python -m kiln.testing.opinfo --update`; do not edit by hand. "
        "`tests/frontend/test_pytorch_opinfo.py` checks the claimed OpInfos against it.", "",
        f"PyTorch's own OpInfo database (`torch.testing._internal.common_methods_invocations."
        f"op_db`, torch {doc['torch_version']}, Python {doc['python_version']}) gives sample "
        f"inputs for each op. Every float32 sample (`op.sample_inputs(\"cpu\", torch.float32)`, "
        f"seed {doc['seed']}) of the {s['opinfos']} OpInfos that support float32 ({s['samples']} "
        f"samples) was wrapped in a one-op nn.Module (tensor arguments as inputs, the others "
        f"baked in), exported with torch.export, imported with `kiln.frontend.from_pytorch`, "
        f"compiled for llvm, run and compared with eager PyTorch, each sample in an isolated "
        f"worker process with a {doc['sample_timeout']:g} s limit. The run took "
        f"{doc['wall_seconds'] / 60:.0f} minutes with {doc['jobs']} worker processes.", "",
        f"Tolerance: float outputs within {doc['atol']:g} + {doc['rtol']:g} x |eager| per "
        f"element (nan and inf where eager has them); integer and bool outputs equal. An "
        f"element outside that (the small difference of large terms, where float32 rounding "
        f"alone exceeds it) still matches when kiln is no farther from eager's float64 result "
        f"than eager's float32 result is, plus the same tolerance.", "",
        "An OpInfo is **pass** (claimed) when all its float32 samples pass, **partial** when "
        "some do; otherwise it shows its samples' worst status: wrong, error, crash, timeout, "
        "unsupported (no converter or an op form kiln lacks, or torch.export could not trace "
        "the call: recorded, not counted against kiln) or skip (eager output is random or "
        "uninitialized: nothing to compare).", ""] + _render_probe(doc["probe"]) + [
        "One sample runs the same way in your own process:", "",
        "```python",
        "from kiln.testing import opinfo",
        "",
        "result = opinfo.run_sample({\"op\": \"abs\", \"index\": 0})   # torch.abs, sample 0",
        "print(result[\"status\"], result[\"ops\"])                  # pass ['aten.abs']",
        "assert result[\"status\"] == \"pass\"",
        "```", ""]


def _render_probe(probe) -> list:
    if not probe:
        return []
    return [f"When the first {probe} samples of an OpInfo were all unsupported or skipped, its "
            f"other samples were not run (\"untried\"): it cannot be claimed anyway.", ""]


def _render_summary(s: dict) -> list:
    return [
        "## Summary", "",
        f"- OpInfos claimed (every float32 sample passes): **{s['claimed']}** of {s['opinfos']}",
        "- OpInfos per status: " + ", ".join(f"{k} {v}" for k, v in
                                             s["opinfo_statuses"].items()),
        "- samples per status: " + ", ".join(f"{k} {v}" for k, v in
                                             s["sample_statuses"].items()),
        f"- ATen ops covered (distinct overload packets in the exported graphs of claimed "
        f"OpInfos): **{s['aten_ops_covered']}**, of which {s['core_tagged_aten_ops_covered']} "
        f"are tagged core ATen IR (`torch.Tag.core`)", ""]


def _render_table(records: dict) -> list:
    lines = ["## OpInfos", "",
             "| OpInfo | samples passing | status | reason (first failing sample) | ATen ops |",
             "|---|---|---|---|---|"]
    for key, r in records.items():
        ops = ", ".join(o.removeprefix("aten.") for o in r["aten_ops"])
        reason = _cell(r["reason"]) if r["status"] != "pass" else ""
        lines.append(f"| {key} | {r['passed']}/{r['total']} | {r['status']} | {reason} | "
                     f"{_cell(ops)} |")
    return lines + [""]


def _render_ops(s: dict) -> list:
    return ["## ATen ops covered", "", ", ".join(f"`{o}`" for o in s["aten_ops"]), ""]


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.testing.opinfo",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--filter", help="regex on OpInfo keys: run only the matching ones")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=SAMPLE_TIMEOUT)
    parser.add_argument("--update", action="store_true",
                        help="run every OpInfo; write the status file and the coverage doc")
    parser.add_argument("--all-samples", action="store_true",
                        help=f"run every sample, also of OpInfos whose first {PROBE} are "
                             f"unsupported (hours rather than minutes)")
    parser.add_argument("--lock", help="a file to flock while each batch of samples runs "
                                       "(take turns with others on a shared machine)")
    parser.add_argument("--show", default="partial,wrong,error,crash,timeout",
                        help="OpInfo statuses to list (comma-separated)")
    args = parser.parse_args(argv)
    if args.update and args.filter:
        parser.error("--update runs every OpInfo; drop --filter")
    started = time.monotonic()

    def progress(done, total):
        print(f"\r{done}/{total} samples, {time.monotonic() - started:.0f} s", end="",
              file=sys.stderr, flush=True)

    probe = None if args.all_samples else PROBE
    results = run_opinfos(opinfo_names(args.filter), args.jobs, args.timeout, progress,
                          args.lock, probe)
    print(file=sys.stderr)
    records = {k: summarize_op(v) for k, v in results.items()}
    shown = set(args.show.split(","))
    for key, r in records.items():
        if r["status"] in shown:
            print(f"{r['status']:11} {key} {r['passed']}/{r['total']}: {r['reason']}")
    s = summary(records)
    print(f"OpInfos {s['opinfo_statuses']}; samples {s['sample_statuses']}")
    print(f"{s['claimed']}/{s['opinfos']} OpInfos claimed (all float32 samples pass); "
          f"{s['aten_ops_covered']} ATen ops covered ({s['core_tagged_aten_ops_covered']} "
          f"tagged core); {time.monotonic() - started:.0f} s")
    if args.update:
        doc = write_status(records, time.monotonic() - started, probe, args.jobs)
        COVERAGE_DOC.write_text(render(doc), encoding="utf-8")
        print(f"wrote {STATUS_FILE} and {COVERAGE_DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())

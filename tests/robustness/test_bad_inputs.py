"""Generated bad inputs for every file kind kiln reads and every numeric option and environment
variable it takes (issue 31): each gives exit status 1 or 2 with one `kiln: error:` line that
names the file or option -- no traceback, no signal, no file of the user's changed. The Python
loaders (load_module, from_onnx, load_exported_program, load_records) get the same files and
must raise a ValueError or OSError naming the file (python_loaders.py runs them).

Files: a small ONNX model, a torch.export program (.pt2), the compiled library (.so), its inputs
(.npz), a tuning log (.jsonl) and kiln's cache entries, each cut short (halfway, one byte
short), empty, with flipped bits (seeded positions), replaced by another kind's file or by
random bytes. A flipped bit may leave a file valid (a weight's value changes): such a case may
also succeed (exit 0, stderr only `kiln:` lines), as may a tuning log, whose bad lines are
skipped with a warning naming the file and line. A damaged cache entry is rebuilt: those cases
must succeed and give the right answer.

The command lines run in batches in one process (driver.py), each in a directory of its own
holding copies of the files it needs; a case that kills its process is reported by name and the
batch goes on in a new process. Environment variables are read once per process, so their cases
run a process each.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
DRIVER = HERE / "driver.py"
INPUT = "input"
SHAPE = (1, 3, 8, 8)


# ---------------------------------------------------------------------------------- valid files
def _onnx_model(path: Path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype("float32"), "w")
    fc = numpy_helper.from_array(rng.standard_normal((4, 5)).astype("float32"), "fc")
    nodes = [helper.make_node("Conv", [INPUT, "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["out"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 5))], [w, fc])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _pt2_program(path: Path):
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3)).eval()
    torch.export.save(torch.export.export(model, (torch.randn(2, 6),)), str(path))


def _tuning_log(path: Path):
    # Records of another workload: compile reads them and finds none of its own tasks.
    record = {"v": 1, "task": json.dumps(["dense_pack.x86", [[8, 64], [64, 64], "float32"],
                                          "llvm"]),
              "target": "llvm", "config": {"index": 0, "knobs": {}},
              "result": {"costs": [1e-5], "status": "ok", "message": "", "all_cost": 0.1,
                         "timestamp": 1.7e9}}
    path.write_text("".join(json.dumps({**record, "config": {"index": k, "knobs": {}}}) + "\n"
                            for k in range(8)))


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """The valid files every case starts from: model.onnx, model.pt2, model.so, inputs.npz,
    tune.jsonl."""
    d = tmp_path_factory.mktemp("originals")
    _onnx_model(d / "model.onnx")
    _pt2_program(d / "model.pt2")
    _tuning_log(d / "tune.jsonl")
    done = subprocess.run([sys.executable, "-m", "kiln.cli", "compile", "model.onnx", "-o",
                           "model.so"], cwd=d, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    np.savez(d / "inputs.npz", **{INPUT: np.random.default_rng(1).standard_normal(SHAPE)
                                  .astype("float32")})
    return d


# ---------------------------------------------------------------------------------- damage
def _damages(kind: str, data: bytes, foreign: bytes) -> dict[str, bytes]:
    """Damaged versions of a file's bytes, by name."""
    rng = random.Random(f"kiln-{kind}")       # the same positions every run
    out = {"half": data[:len(data) // 2], "short1": data[:-1], "empty": b"",
           "foreign": foreign, "random": bytes(rng.getrandbits(8) for _ in range(4096))}
    for k in range(2):
        flipped = bytearray(data)
        flipped[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        out[f"flip{k}"] = bytes(flipped)
    return out


# What each file kind is fed to: command lines with FILE for the damaged file. The other files
# a command needs are the valid ones; outputs go to names no case starts with.
COMMANDS = {
    "model.onnx": [["inspect", "FILE"], ["compile", "FILE", "-o", "out.so"]],
    "model.pt2": [["inspect", "FILE"], ["compile", "FILE", "-o", "out.so"]],
    "model.so": [["run", "FILE", "--inputs", "inputs.npz"], ["inspect", "FILE"],
                 ["profile", "FILE", "--number", "1", "--repeat", "1"]],
    "inputs.npz": [["run", "model.so", "--inputs", "FILE", "--outputs", "outputs.npz"],
                   ["profile", "model.so", "--inputs", "FILE", "--number", "1", "--repeat", "1"]],
    "tune.jsonl": [["compile", "model.onnx", "--tuning-log", "FILE", "-o", "out.so"]],
}
# Another kind's file under this kind's name.
FOREIGN = {"model.onnx": "model.so", "model.pt2": "inputs.npz", "model.so": "model.onnx",
           "inputs.npz": "model.pt2", "tune.jsonl": "model.so"}
COMPANIONS = ("model.onnx", "model.so", "inputs.npz")


@dataclass
class Case:
    id: str
    argv: list
    cwd: Path
    names: tuple             # what the error line must name (any one of them)
    may_succeed: bool = False
    before: dict = field(default_factory=dict)


def _snapshot(directory: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir()) if p.is_file()}


def _file_cases(originals: Path, root: Path) -> list[Case]:
    cases = []
    for kind, commands in COMMANDS.items():
        data = (originals / kind).read_bytes()
        foreign = (originals / FOREIGN[kind]).read_bytes()
        stem, suffix = kind.split(".")
        for damage, bad in _damages(kind, data, foreign).items():
            for c, command in enumerate(commands):
                case_id = f"{kind}-{damage}-{command[0]}{c}"
                cwd = root / case_id
                cwd.mkdir(parents=True)
                for name in COMPANIONS:
                    shutil.copy(originals / name, cwd / name)
                damaged = f"{damage}_{stem}.{suffix}"
                (cwd / damaged).write_bytes(bad)
                argv = [damaged if word == "FILE" else word for word in command]
                cases.append(Case(case_id, argv, cwd, (damaged,),
                                  may_succeed=damage.startswith("flip") or kind == "tune.jsonl"))
    return cases


ABSURD = ["0", "-1", "1e999", "nan", "abc", "", "99999999999999999999", "1.5"]


def _option_cases(originals: Path, root: Path) -> list[Case]:
    """Absurd values for every numeric option (and --input-shape's dimensions)."""
    options = [
        (["run", "model.so", "--inputs", "inputs.npz", "--benchmark"], "--number"),
        (["run", "model.so", "--inputs", "inputs.npz", "--benchmark"], "--repeat"),
        (["profile", "model.so"], "--number"),
        (["profile", "model.so"], "--repeat"),
        (["compile", "model.onnx", "-o", "out.so"], "--opt-level"),
        (["tune", "model.onnx", "-o", "log.jsonl"], "--trials"),
        (["tune", "model.onnx", "-o", "log.jsonl"], "--budget"),
        (["tune", "model.onnx", "-o", "log.jsonl"], "--seed"),
    ]
    cases = []
    for base, option in options:
        values = {"--seed": ["-1", "abc", "1e999", "1" * 30],
                  "--opt-level": [v for v in ABSURD if v != "0"],
                  "--budget": [v for v in ABSURD if v != "1.5"]}.get(option, ABSURD)
        for k, value in enumerate(values):
            cases.append(_case(originals, root, f"{base[0]}{option}-{k}", [*base, option, value],
                               (option,)))
    for k, dims in enumerate(["0x3x8x8", "1x3x8x-1", "1x3x8", "99999999999x3x8x8",
                              "1x3x99999999x99999999", "abc", "1x3x8x8x1"]):
        cases.append(_case(originals, root, f"input-shape-{k}",
                           ["compile", "model.onnx", "-o", "out.so", "--input-shape",
                            f"{INPUT}:{dims}"], ("--input-shape", "model.onnx")))
    return cases


def _case(originals, root, case_id, argv, names) -> Case:
    cwd = root / case_id
    cwd.mkdir(parents=True)
    for name in COMPANIONS:
        shutil.copy(originals / name, cwd / name)
    return Case(case_id, argv, cwd, names)


# ---------------------------------------------------------------------------------- running
def _run_in_processes(script: Path, specs: list[dict], workdir: Path) -> dict:
    """{case id: result record} from running `script` on the case specs (each with an "id"),
    in as many processes as it takes: a case that kills its process gets a record saying so
    (status "signal N"), and the rest go on in a new one."""
    results, todo = {}, list(specs)
    spec, out = workdir / "cases.json", workdir / "results.jsonl"
    while todo:
        spec.write_text(json.dumps(todo))
        out.unlink(missing_ok=True)
        done = subprocess.run([sys.executable, str(script), str(spec), str(out)],
                              capture_output=True, text=True, timeout=1800)
        started = None
        for line in out.read_text().splitlines() if out.exists() else []:
            record = json.loads(line)
            if record.get("started"):
                started = record["id"]
            else:
                results[record["id"]], started = record, None
        if done.returncode != 0:
            assert started is not None, f"{script.name} failed outside any case:\n{done.stderr}"
            status = (f"signal {-done.returncode}" if done.returncode < 0
                      else f"died ({done.returncode})")
            results[started] = {"id": started, "status": status, "outcome": status,
                                "stderr": done.stderr[-2000:], "stdout": ""}
        todo = [c for c in todo if c["id"] not in results]
    return results


def _run_batch(cases: list[Case], workdir: Path) -> dict:
    """{case id: result dict} of the CLI cases (driver.py)."""
    for case in cases:
        case.before = _snapshot(case.cwd)
    return _run_in_processes(DRIVER, [{"id": c.id, "argv": c.argv, "cwd": str(c.cwd)}
                                      for c in cases], workdir)


def _problems(case: Case, result: dict) -> list[str]:
    status, err = result["status"], result["stderr"]
    lines = [line for line in err.splitlines() if line.strip()]
    found = []
    if not isinstance(status, int):
        return [f"{status}: {err[-500:]}"]
    if "Traceback" in err:
        found.append("a traceback on stderr")
    stray = [line for line in lines if not line.startswith("kiln")]
    if stray:
        found.append(f"stderr lines not from kiln: {stray[:3]}")
    if status == 0:
        if not case.may_succeed:
            found.append("exit 0 for an input that cannot be valid")
    elif status in (1, 2):
        errors = [line for line in lines if line.startswith("kiln: error: ")]
        if len(errors) != 1:
            found.append(f"{len(errors)} error lines")
        elif not any(name in errors[0] for name in case.names):
            found.append(f"the error does not name {' or '.join(case.names)}")
    else:
        found.append(f"exit status {status}")
    changed = {name for name, digest in case.before.items()
               if _snapshot(case.cwd).get(name) != digest}
    if changed:
        found.append(f"changed the user's files {sorted(changed)}")
    return [f"{p} (stderr: {err.strip()[-300:]!r})" for p in found]


def _check(cases, results):
    report = []
    for case in cases:
        for problem in _problems(case, results[case.id]):
            report.append(f"{case.id}: kiln {' '.join(case.argv)}: {problem}")
    assert not report, f"{len(report)} of {len(cases)} cases failed:\n" + "\n".join(report)


def test_damaged_files(originals, tmp_path):
    cases = _file_cases(originals, tmp_path / "cases")
    assert len(cases) > 60
    _check(cases, _run_batch(cases, tmp_path))


def test_absurd_option_values(originals, tmp_path):
    cases = _option_cases(originals, tmp_path / "cases")      # none may succeed
    _check(cases, _run_batch(cases, tmp_path))


# ---------------------------------------------------------------------------------- environment
def _cli_process(args, cwd, env):
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-m", "kiln.cli", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1e3", "100000", "99999999999999999999",
                                   "2.5"])
def test_absurd_thread_counts(originals, tmp_path, value):
    for name in COMPANIONS:
        shutil.copy(originals / name, tmp_path / name)
    before = _snapshot(tmp_path)
    done = _cli_process(["run", "model.so", "--inputs", "inputs.npz"], tmp_path,
                        {"KILN_NUM_THREADS": value})
    case = Case(f"KILN_NUM_THREADS={value}", ["run"], tmp_path, ("KILN_NUM_THREADS",),
                before=before)
    problems = _problems(case, {"status": done.returncode, "stderr": done.stderr})
    assert done.returncode in (1, 2) and not problems, problems or done.stderr


@pytest.mark.parametrize("damage", ["half", "empty", "flip0", "foreign"])
def test_damaged_cache_entries_are_rebuilt(originals, tmp_path, damage):
    cache = tmp_path / "cache"
    for name in COMPANIONS:
        shutil.copy(originals / name, tmp_path / name)
    env = {"KILN_CACHE_DIR": str(cache)}
    args = ["run", "model.so", "--inputs", "inputs.npz", "--outputs", "out.npz"]
    first = _cli_process(args, tmp_path, env)
    assert first.returncode == 0, first.stderr
    expected = np.load(tmp_path / "out.npz")["output0"]
    entries = sorted(cache.glob("*/*.so"))
    assert entries
    foreign = (originals / "model.onnx").read_bytes()
    for entry in entries:
        entry.write_bytes(_damages(entry.name, entry.read_bytes(), foreign)[damage])
    (tmp_path / "out.npz").unlink()
    again = _cli_process(args, tmp_path, env)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    lines = again.stderr.splitlines()
    assert lines and all(line.startswith("kiln: ") and "error" not in line for line in lines), \
        again.stderr                        # the rebuild is said, as a warning
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["output0"], expected)


def test_unusable_cache_directories(originals, tmp_path):
    for name in COMPANIONS:
        shutil.copy(originals / name, tmp_path / name)
    args = ["run", "model.so", "--inputs", "inputs.npz"]
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    done = _cli_process(args, tmp_path, {"KILN_CACHE_DIR": str(link)})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"kiln: error: kiln will not load code from {link}: it is "
                                  f"not a directory")
    # Under a file, no directory can be made: kiln falls back to a private temporary one.
    (tmp_path / "file").write_text("")
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = _cli_process(args, tmp_path, {"KILN_CACHE_DIR": str(tmp_path / "file" / "kiln"),
                                         "TMPDIR": str(temp)})
    assert done.returncode == 0, done.stderr
    assert (temp / f"kiln-cache-{os.getuid()}").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("content", ["library", "random", "utf16"])
def test_tune_does_not_append_to_a_file_that_is_not_a_log(originals, tmp_path, content):
    victim = tmp_path / "victim.jsonl"
    victim.write_bytes({"library": (originals / "model.so").read_bytes(),
                        "random": bytes(random.Random(3).getrandbits(8) for _ in range(512)),
                        "utf16": "not a log\n".encode("utf-16")}[content])
    case = Case("tune", ["tune"], tmp_path, ("victim.jsonl",), before=_snapshot(tmp_path))
    done = _cli_process(["tune", str(originals / "model.onnx"), "-o", str(victim), "--trials",
                         "1"], tmp_path, {})
    assert done.returncode == 2, done.stderr
    assert not _problems(case, {"status": 2, "stderr": done.stderr})      # incl. victim unchanged
    assert "is not a tuning log" in done.stderr


# ---------------------------------------------------------------------------------- Python API
LOADERS = {"model.so": "load_module", "model.onnx": "from_onnx",
           "model.pt2": "load_exported_program", "tune.jsonl": "load_records"}
# What a loader may raise for a bad file: kiln's errors derive from these (ModelError,
# FrontendError, UntrustedModelError ... are ValueErrors).
USER_ERRORS = ("ValueError", "OSError")


def test_python_loaders_on_damaged_files(originals, tmp_path):
    cases = []
    for kind, loader in LOADERS.items():
        data = (originals / kind).read_bytes()
        foreign = (originals / FOREIGN[kind]).read_bytes()
        for damage, bad in _damages(kind, data, foreign).items():
            path = tmp_path / f"{damage}_{kind}"
            path.write_bytes(bad)
            cases.append({"id": f"{loader}-{damage}", "loader": loader, "path": str(path),
                          "damage": damage})
    results = _run_in_processes(HERE / "python_loaders.py", cases, tmp_path)
    report = []
    for case in cases:
        r, name = results[case["id"]], Path(case["path"]).name
        if r["outcome"] == "ok":
            # a log's bad lines are skipped, each with a warning naming the file; a flipped bit
            # may leave any file valid
            if case["loader"] == "load_records":
                bad = [w for w in r["warnings"] if name not in w]
                if bad:
                    report.append(f"{case['id']}: a warning that does not name {name}: {bad[0]}")
            elif not case["damage"].startswith("flip"):
                report.append(f"{case['id']}: loaded a file that cannot be valid")
        elif r["outcome"] != "raised":
            report.append(f"{case['id']}: {r['outcome']}")
        elif not any(t in r["type"] for t in USER_ERRORS):
            report.append(f"{case['id']}: raised {r['type'][0]}: {r['message'][:200]}")
        elif name not in r["message"]:
            report.append(f"{case['id']}: the {r['type'][0]} does not name {name}: "
                          f"{r['message'][:200]}")
    assert not report, "\n".join(report)

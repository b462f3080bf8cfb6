"""kiln's C runtime on this machine: an exported model run from C gives the Python
GraphExecutor's outputs, and every wrong call of its C API is an error code with a message
that names the problem, never a crash (also for corrupt libraries)."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import kiln
from kiln.runtime.c import build_runtime
from kiln.runtime.c.plan import MAGIC, PlanError, pack_plan
from kiln.runtime.c.runner import DeviceRunError, run_exported

HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")


def _small_cnn():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 10)).eval()
    return model, torch.randn(1, 3, 16, 16)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model, x = _small_cnn()
    mod, params = kiln.frontend.from_pytorch(model, (x,))
    lib = kiln.compile(mod, params=params)
    path = tmp_path_factory.mktemp("c_runtime") / "model.so"
    lib.export_library(path)
    name = json.loads(lib.graph_json)["inputs"][0]["name"]
    return {"lib": lib, "path": path, "x": x.numpy(), "name": name, "model": model}


def test_c_runtime_gives_the_graph_executors_outputs(exported):
    # The Python runtime loads the same file (the plan beside the blob changes nothing for it).
    m = kiln.runtime.GraphExecutor(kiln.runtime.load_module(exported["path"]))
    m.set_input(exported["name"], exported["x"])
    m.run()
    expected = m.get_output(0).numpy()
    (y,), median = run_exported(exported["path"], {exported["name"]: exported["x"]}, repeat=3,
                                threads=1)
    # The same kernels on the same input: the same bits.
    np.testing.assert_array_equal(y, expected)
    assert y.shape == (1, 10) and y.dtype == np.float32
    assert 0 < median < 1.0


def test_c_api_wrong_calls_are_errors_with_messages(exported, tmp_path):
    runtime = build_runtime(tmp_path / "rt")
    program = tmp_path / "c_api_errors"
    subprocess.run(["cc", "-O1", f"-I{runtime.parent}", str(HERE / "c_api_errors.c"),
                    f"-L{runtime.parent}", "-lkiln_runtime", "-Wl,-rpath,$ORIGIN/rt",
                    "-o", str(program)], check=True, capture_output=True, text=True)
    done = subprocess.run([str(program), str(exported["path"]), exported["name"]],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = {label: (int(status), message) for label, status, message in
             (line.split(" ", 2) for line in done.stdout.splitlines())}
    name = exported["name"]
    expected = {
        "load_missing": (1, "/no/such/model.so: cannot load the model library"),
        "load_null_out": (3, "out is NULL"),
        "load": (0, ""),
        "input_info": (0, ""),
        "run_unset": (6, f"input '{name}' is not set"),
        "get_before_run": (3, "output 0 has 40 bytes (float32, 2 dimensions), got 0"),
        "wrong_name": (3, f"the model has no input named 'no_such_input'; its inputs are: "
                          f"{name}"),
        "wrong_size": (3, f"input '{name}' takes 3072 bytes (float32, 4 dimensions), got 3076"),
        "null_data": (3, "must not be NULL"),
        "input_index": (3, "input index 7 is out of range: the model has 1 inputs"),
        "output_index": (3, "output index -1 is out of range: the model has 1 outputs"),
        "set": (0, ""), "run": (0, ""), "output_info": (0, ""),
        "get_wrong_size": (3, "output 0 has 40 bytes (float32, 2 dimensions), got 41"),
        "get_index": (3, "output index 3 is out of range"),
        "get": (0, ""),
    }
    assert set(lines) == set(expected)
    for label, (status, text) in expected.items():
        assert lines[label][0] == status, (label, lines[label])
        assert text in lines[label][1], (label, lines[label])


def _corrupted(path: Path, tmp_path: Path, offset_in_plan: int, data: bytes) -> Path:
    """A copy of the library at `path` with `data` written into its plan at `offset_in_plan`
    (the C runtime does not check the file checksum the Python loader checks)."""
    raw = bytearray(path.read_bytes())
    at = raw.find(MAGIC)
    assert at > 0 and raw.find(MAGIC, at + 1) < 0
    raw[at + offset_in_plan:at + offset_in_plan + len(data)] = data
    bad = tmp_path / f"bad{offset_in_plan}.so"
    bad.write_bytes(raw)
    return bad


@pytest.mark.parametrize("offset, data, message", [
    (0, b"NOTAPLAN", "no plan header"),
    (8, struct.pack("<I", 99), "execution plan version 99; this runtime reads version 1"),
    (12, struct.pack("<I", 0x7FFFFFFF), "corrupt execution plan (counts)"),
    # an arena whose size would wrap when rounded up
    (28, struct.pack("<Q", 2**64 - 1), "corrupt execution plan (counts)"),
    (36, struct.pack("<I", 7), "corrupt execution plan (entry 0 place 7)"),
    # entry 0's offset pushed past the arena
    (36 + 4, struct.pack("<Q", 1 << 40), "corrupt execution plan (entry 0 lies outside"),
    # entry 0's dtype length made huge
    (36 + 20, struct.pack("<I", 0xFFFFFFF0), "corrupt execution plan (entry 0)"),
])
def test_a_corrupt_plan_is_a_format_error(exported, tmp_path, offset, data, message):
    bad = _corrupted(exported["path"], tmp_path, offset, data)
    with pytest.raises(DeviceRunError, match=r"load: .*" + re.escape(message)):
        run_exported(bad, {exported["name"]: exported["x"]})


def _plan_layout(raw: bytes) -> dict:
    """Offsets (from the plan's start) of fields of the plan in `raw`: each entry's place, each
    input's entry index, each kernel's symbol (plan.py's format)."""
    at0 = raw.find(MAGIC)
    entries, inputs, outputs, kernels = struct.unpack_from("<4I", raw, at0 + 12)
    at, layout = at0 + 36, {"entry_place": [], "input_entry": [], "kernel_symbol": []}
    for _ in range(entries):
        layout["entry_place"].append(at - at0)
        (n,) = struct.unpack_from("<I", raw, at + 20)
        (ndim,) = struct.unpack_from("<I", raw, at + 24 + n)
        at += 28 + n + 8 * ndim
    for _ in range(inputs):
        (n,) = struct.unpack_from("<I", raw, at)
        layout["input_entry"].append(at + 4 + n - at0)
        at += 8 + n
    at += 4 * outputs
    for _ in range(kernels):
        layout["kernel_symbol"].append(at + 4 - at0)
        (n,) = struct.unpack_from("<I", raw, at)
        ins, outs = struct.unpack_from("<II", raw, at + 4 + n)
        at += 12 + n + 4 * (ins + outs)
        (messages,) = struct.unpack_from("<I", raw, at)
        at += 4
        for _ in range(messages):
            at += 4 + struct.unpack_from("<I", raw, at)[0]
    return layout


def test_a_plan_that_would_write_read_only_memory_or_call_foreign_code_is_refused(exported,
                                                                                  tmp_path):
    raw = exported["path"].read_bytes()
    layout = _plan_layout(raw)
    (entry,) = struct.unpack_from("<I", raw, raw.find(MAGIC) + layout["input_entry"][0])
    # The model's input placed in the library's constants, at offset 0: kiln_set_input would
    # write into read-only pages.
    bad = _corrupted(exported["path"], tmp_path, layout["entry_place"][entry],
                     struct.pack("<IQ", 1, 0))
    with pytest.raises(DeviceRunError, match=re.escape("corrupt execution plan (input 0)")):
        run_exported(bad, {exported["name"]: exported["x"]})
    # A kernel named after a libc function ("kfn_" replaced): not the model's own code.
    symbol = layout["kernel_symbol"][0]
    bad = _corrupted(exported["path"], tmp_path, symbol, b"abs\0")
    with pytest.raises(DeviceRunError, match=re.escape("corrupt execution plan (kernel 0)")):
        run_exported(bad, {exported["name"]: exported["x"]})


def test_a_library_that_is_not_a_model_is_refused(tmp_path):
    runtime = build_runtime(tmp_path / "rt")
    with pytest.raises(DeviceRunError, match="not a kiln model library"):
        run_exported(runtime, {})


def test_models_the_c_runtime_cannot_run_get_no_plan():
    graph = {"entries": [], "storages": [], "inputs": [], "outputs": [], "constants": [],
             "kernels": [], "functions": {}}
    with pytest.raises(PlanError, match="external"):
        pack_plan({**graph, "external_modules": [{"name": "toy"}]}, {}, "kfn_")
    with pytest.raises(PlanError, match="GPU"):
        pack_plan({**graph, "device_module": {}}, {}, "kfn_")
    symbolic = {**graph, "kernels": [{"func": "f", "inputs": [], "outputs": []}],
                "functions": {"f": {"shape_vars": [["n", "int64"]]}}}
    with pytest.raises(PlanError, match="symbolic"):
        pack_plan(symbolic, {}, "kfn_")


def test_a_hung_program_is_a_classified_error(exported, monkeypatch):
    import kiln.runtime.c.runner as runner
    monkeypatch.setattr(runner, "program_for", lambda triple=None: ["sh", "-c", "exec sleep 30"])
    with pytest.raises(DeviceRunError, match="no answer within 1 s"):
        run_exported(exported["path"], {}, timeout=1)


def test_the_c_example_builds_and_prints_the_graph_executors_outputs(exported, tmp_path):
    example = tmp_path / "c_deploy"
    shutil.copytree(Path(__file__).parents[2] / "examples" / "c_deploy", example)
    kiln_cli = Path(sys.executable).with_name("kiln")
    subprocess.run(["make", f"KILN={kiln_cli}"], cwd=example, check=True, capture_output=True,
                   text=True, timeout=300)
    exported["x"].tofile(example / "x.bin")
    done = subprocess.run(["./main", str(exported["path"]), "x.bin"], cwd=example,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    label, values = done.stdout.strip().split(":")
    assert label == "output0 (float32)"
    m = kiln.runtime.GraphExecutor(exported["lib"])
    m.run(**{exported["name"]: exported["x"]})
    np.testing.assert_allclose([float(v) for v in values.split()],
                               m.get_output(0).numpy().ravel(), rtol=0, atol=5e-7)   # %.6f
    short = subprocess.run(["./main", str(exported["path"]), "Makefile"], cwd=example,
                           capture_output=True, text=True, timeout=60)
    assert short.returncode == 1
    assert f"input '{exported['name']}' takes 3072 bytes" in short.stderr

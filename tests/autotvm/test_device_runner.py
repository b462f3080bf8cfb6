"""Tuning on the device through kiln's C runtime (DeviceRunner): for 64-bit ARM, candidates are
cross-compiled, timed under qemu-aarch64 (which proves the path; its timings are not an ARM
CPU's), logged, and the log drives an aarch64 compile. A candidate that crashes, fails its
checks or hangs on the device is classified and the others are still measured."""
from __future__ import annotations

import json
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

import kiln
from kiln import autotvm
from kiln.autotvm import BuildResult, DeviceRunner
from kiln.runtime.c import host_triple
from kiln.runtime.c.runner import run_exported
from kiln.runtime.toolchain import compiler_for, host_arch, missing

ARM = "aarch64-linux-gnu"
ARM_MISSING = missing(ARM) if host_arch() != "aarch64" else "this machine is aarch64"

NO_CC = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")
# (triple, login): this machine; QEMU; and a "board" reached by a login command that runs a
# shell line (here a local shell, with its own directory: the files travel as over ssh).
DEVICES = [pytest.param(None, False, id="host", marks=NO_CC),
           pytest.param(ARM, False, id="aarch64-qemu", marks=pytest.mark.skipif(
               ARM_MISSING is not None, reason=f"{ARM_MISSING}")),
           pytest.param(None, True, id="host-login", marks=NO_CC)]

# Kernels in kiln's calling convention that misbehave on the device.
BAD_KERNELS = r"""
#include <stdint.h>
int32_t kfn_good(void** args, int32_t n) { float* y = args[0]; y[0] += 1.0f; return 0; }
int32_t kfn_crash(void** args, int32_t n) { *(volatile int*)8 = 1; return 0; }
int32_t kfn_fail(void** args, int32_t n) { return 1; }
int32_t kfn_hang(void** args, int32_t n) { for (volatile int i = 0;; i = i + 1) {} return 0; }
"""
SIGNATURE = {"name": "{}", "params": [{"name": "y", "kind": "buffer", "dtype": "float32",
                                       "shape": [4]}], "shape_vars": []}


@pytest.mark.parametrize("triple, login", DEVICES)
def test_crashing_failing_and_hanging_candidates_are_classified(triple, login, tmp_path):
    source = tmp_path / "bad.c"
    source.write_text(BAD_KERNELS)
    library = tmp_path / "bad.so"
    subprocess.run([*compiler_for(triple or host_triple()), "-O1", "-shared", "-fPIC",
                    "-o", str(library), str(source)], check=True)
    builds = []
    for k, name in enumerate(["good", "crash", "fail", "hang", "good"]):
        copy = tmp_path / f"candidate{k}.so"       # the runner deletes each after measuring
        shutil.copyfile(library, copy)
        signature = {**SIGNATURE, "name": name}
        builds.append(BuildResult({"index": k}, {"file": str(copy), "entry": name,
                                                 "functions": {name: signature}}, "ok", "", 0.1))
    builds.insert(2, BuildResult({"index": 9}, None, "compile_error", "did not build", 0.1))
    board = tmp_path / "board"
    runner = DeviceRunner(triple, number=2, repeat=2, timeout=5, device_dir=board,
                          login=["sh", "-c"] if login else None)
    try:
        results = runner.run(SimpleNamespace(key="bad kernels"), builds)
    finally:
        runner.close()
    if login:       # the program, its library and nothing else are left on the board
        assert sorted(f.name for f in board.iterdir()) == ["libkiln_runtime.so", "time_kernel"]
    statuses = [r.status for r in results]
    assert statuses == ["ok", "runtime_error", "compile_error", "runtime_error", "timeout", "ok"]
    assert len(results[0].costs) == 2 and all(c > 0 for c in results[0].costs)
    assert "config #1" in results[1].message and "killed by signal 11" in results[1].message
    assert results[2].message == "did not build"
    assert "kfn_fail returned status 1" in results[3].message
    assert "no answer within 5 s" in results[4].message


@pytest.mark.skipif(ARM_MISSING is not None, reason=f"{ARM_MISSING}")
def test_tuning_for_aarch64_measures_under_qemu_and_the_log_compiles_the_model(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 8 * 8, 10)).eval()
    x = torch.randn(1, 3, 8, 8)
    mod, params = kiln.frontend.from_pytorch(model, (x,))
    log = tmp_path / "arm.jsonl"
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(),
        runner=DeviceRunner(ARM, number=2, repeat=2, check_correctness=True, timeout=60))
    tasks = autotvm.tune_model(mod, params, target="rasp4b", trials_per_task=3,
                               log_file=str(log), measure_option=option)
    assert len(tasks) == 2
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) >= 2 * 3
    assert {r["target"] for r in records} == {str(kiln.target.Target("rasp4b"))}
    assert all(r["result"]["status"] == "ok" for r in records), \
        [r["result"]["message"] for r in records]
    with autotvm.apply_history_best(str(log)) as best:
        lib = kiln.compile(mod, target="rasp4b", params=params)
    assert not best.untuned
    lib.export_library(tmp_path / "model.so")
    name = json.loads(lib.graph_json)["inputs"][0]["name"]
    (y,), _ = run_exported(tmp_path / "model.so", {name: x.numpy()}, ARM)
    with torch.no_grad():
        expected = model(x).numpy()
    assert np.abs(y - expected).max() <= 1e-4 * np.abs(expected).max()


def test_a_runner_that_cannot_run_the_tasks_code_says_which_to_use():
    arm_task = SimpleNamespace(target=kiln.target.Target("rasp4b"), key="conv for rasp4b")
    with pytest.raises(ValueError, match=r"cannot run code for .*aarch64.*DeviceRunner\("
                                         r"'aarch64-linux-gnu'\)"):
        autotvm.LocalRunner().run(arm_task, [])
    with pytest.raises(ValueError, match="DeviceRunner\\('x86_64-linux-gnu'\\) cannot measure "
                                         "task conv for rasp4b"):
        DeviceRunner("x86_64-linux-gnu").run(arm_task, [])
    with pytest.raises(ValueError, match="enable_cpu_cache_flush must be True or False"):
        DeviceRunner(ARM, enable_cpu_cache_flush="yes")

"""`kiln profile` driven as a user would: `python -m kiln.cli profile ...` in a subprocess, on a
small ResNet-18 compiled once for the module. Each error path checks its one-line message, the
exit status and that no traceback is shown (unless --verbose).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import kiln
from kiln.runtime import load_module
from kiln.testing.models import resnet18

PYTHON = sys.executable


def kiln_cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(kiln.__file__)), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([PYTHON, "-m", "kiln.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=120)


def assert_error(result, message, status=2):
    assert result.returncode == status, result.stderr
    assert result.stderr.strip() == f"kiln: error: {message}", result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(library path, its input name, an input array)."""
    root = tmp_path_factory.mktemp("cli_profile")
    net = resnet18(width=8, layers=(1, 1, 1, 1), num_classes=10)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    mod, params = kiln.frontend.from_pytorch(net, (x,))
    path = root / "resnet.so"
    kiln.compile(mod, params=params).export_library(str(path))
    name = load_module(path).graph["inputs"][0]["name"]
    return path, name, x.numpy()


def _kernel_funcs(path):
    return [k["func"] for k in load_module(path).graph["kernels"]]


def test_profile_prints_a_row_per_kernel_and_the_latency_line(model):
    path, _, _ = model
    result = kiln_cli("profile", path, "--number", 5, "--repeat", 3)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].split()[:2] == ["kernel", "calls"]
    funcs = _kernel_funcs(path)
    rows = {line.split()[0]: line.split() for line in lines[2:2 + len(set(funcs))]}
    assert set(rows) == set(funcs)
    assert sum(int(r[1]) for r in rows.values()) == len(funcs)
    assert lines[-2].startswith("peak: ") and "GFLOPS" in lines[-2]
    assert lines[-1].startswith("sum of kernel times ") and "vs end-to-end latency" in lines[-1]


def test_profile_with_inputs_writes_json(model, tmp_path):
    path, name, x = model
    np.savez(tmp_path / "in.npz", **{name: x})
    out = tmp_path / "profile.json"
    result = kiln_cli("profile", path, "--inputs", tmp_path / "in.npz", "--number", 4,
                      "--repeat", 2, "--json", out)
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    funcs = _kernel_funcs(path)
    assert sorted(k["name"] for k in data["kernels"]) == sorted(set(funcs))
    assert data["total"]["calls"] == len(funcs)
    assert (data["number"], data["repeat"]) == (4, 2)
    flops = load_module(path).graph["flops"]
    for k in data["kernels"]:
        assert k["flop"] == flops[k["name"]] * k["calls"]
        assert (k["gflops"] is None) == (k["flop"] == 0)
    # The JSON and the printed table are the same profile.
    last = result.stdout.strip().splitlines()[-1]
    assert f"({data['coverage']:.1%})" in last


def test_missing_library(tmp_path):
    assert_error(kiln_cli("profile", tmp_path / "nope.so"),
                 f"{tmp_path / 'nope.so'}: no such model library")


def test_a_model_file_is_not_a_library(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"onnx")
    assert_error(kiln_cli("profile", tmp_path / "m.onnx"),
                 f"{tmp_path / 'm.onnx'} is a model, not a compiled library; compile it first: "
                 f"kiln compile {tmp_path / 'm.onnx'} -o m.so")


def test_not_a_kiln_library(tmp_path):
    (tmp_path / "junk.so").write_text("not a shared library")
    result = kiln_cli("profile", tmp_path / "junk.so")
    assert result.returncode == 2
    assert result.stderr.startswith(f"kiln: error: {tmp_path / 'junk.so'}: not a shared "
                                    f"library (20 bytes, too short for an ELF header)")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("option", ["--number", "--repeat"])
def test_counts_must_be_positive(model, option):
    assert_error(kiln_cli("profile", model[0], option, 0),
                 f"argument {option}: expected a positive integer of at most 1,000,000, got '0' "
                 f"(see 'kiln profile --help')")


def test_count_must_be_an_integer(model):
    assert_error(kiln_cli("profile", model[0], "--number", "ten"),
                 "argument --number: expected a positive integer of at most 1,000,000, got 'ten' "
                 "(see 'kiln profile --help')")


def test_inputs_file_errors(model, tmp_path):
    path, name, x = model
    spec = "float32[1x3x32x32]"
    missing = tmp_path / "none.npz"
    assert_error(kiln_cli("profile", path, "--inputs", missing),
                 f"{missing}: no such inputs file")
    bad = tmp_path / "bad.npz"
    bad.write_text("not a zip")
    assert_error(kiln_cli("profile", path, "--inputs", bad),
                 f"{bad}: not a readable .npz file of arrays (not a zip archive; write one with "
                 f"np.savez)")
    np.savez(tmp_path / "objects.npz", **{name: np.array([{"a": 1}], dtype=object)})
    result = kiln_cli("profile", path, "--inputs", tmp_path / "objects.npz")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"kiln: error: {tmp_path / 'objects.npz'}: not a readable "
                                    f".npz file of arrays (ValueError: Object arrays cannot be "
                                    f"loaded")
    np.savez(tmp_path / "extra.npz", **{name: x, "y": x})
    assert_error(kiln_cli("profile", path, "--inputs", tmp_path / "extra.npz"),
                 f"{tmp_path / 'extra.npz'}: 'y' is not an input of the model; its inputs "
                 f"are {name}: {spec}")
    np.savez(tmp_path / "empty.npz", **{})
    assert_error(kiln_cli("profile", path, "--inputs", tmp_path / "empty.npz"),
                 f"{tmp_path / 'empty.npz'}: no array for input {name!r} (expected {spec})")
    np.savez(tmp_path / "shape.npz", **{name: x[:, :, :16]})
    assert_error(kiln_cli("profile", path, "--inputs", tmp_path / "shape.npz"),
                 f"{tmp_path / 'shape.npz'}: input {name!r} is float32[1x3x16x32], expected "
                 f"{spec}")


def test_json_into_a_missing_directory(model, tmp_path):
    out = tmp_path / "no" / "p.json"
    assert_error(kiln_cli("profile", model[0], "--json", out),
                 f"cannot write JSON table {out}: directory {out.parent} does not exist")


def test_verbose_shows_the_traceback(tmp_path):
    result = kiln_cli("--verbose", "profile", tmp_path / "nope.so")
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "no such model library" in result.stderr

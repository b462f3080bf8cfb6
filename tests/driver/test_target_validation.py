"""An "llvm" target's CPU, features and triple are checked against LLVM's own lists before LLVM
sees them (issue 31, item 3): a misspelt -mcpu used to end the process ("LLVM ERROR: 64-bit code
requested on a subtarget that doesn't support it!") and an unknown -mattr feature was ignored
after a warning. Now each is a TargetNameError (a ValueError) naming the closest known names.

The crash cases run in a subprocess: the process must exit with the message, not die in LLVM.
"""
import os
import subprocess
import sys

import pytest

from kiln import target_names
from kiln.target import Target, TargetNameError, _CPU_VECTOR_BITS, _host
from pinned_targets import AVX512

HOST_TRIPLE = _host()[1]
X86 = "x86_64-unknown-linux-gnu"
AARCH64 = "aarch64-linux-gnu"


# ---------------------------------------------------------------------------------- messages
def test_misspelt_cpu_names_the_closest():
    with pytest.raises(TargetNameError) as err:
        Target("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=haswel")
    message = str(err.value)
    assert isinstance(err.value, ValueError)
    assert message.startswith(f"unknown CPU 'haswel' for {X86} in target "
                              "'llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=haswel'; "
                              "did you mean haswell")
    assert f"python -m kiln.target_names {X86})" in message
    assert "\n" not in message and len(message) < 300


def test_unknown_feature_is_rejected_not_ignored():
    with pytest.raises(TargetNameError, match=r"unknown CPU feature '\+avx513' for .* in target "
                                              r"'llvm -mattr=\+avx2,\+avx513'; did you mean "
                                              r"\+avx512f"):
        Target("llvm -mattr=+avx2,+avx513")


def test_disabled_unknown_feature_keeps_its_sign():
    with pytest.raises(TargetNameError,
                       match=r"unknown CPU feature '-avx2x' .* did you mean -avx2"):
        Target("llvm -mcpu=haswell -mattr=-avx2x")


def test_name_with_nothing_close():
    with pytest.raises(TargetNameError, match=r"unknown CPU 'qqqqqqqq' .*; no CPU name is close "
                                              r"\(all \d+: python -m kiln.target_names"):
        Target("llvm -mcpu=qqqqqqqq")


def test_help_is_not_a_cpu():
    # LLVM would print its tables and carry on with no CPU.
    with pytest.raises(TargetNameError, match="unknown CPU 'help'"):
        Target("llvm -mcpu=help")


def test_unknown_triple():
    with pytest.raises(TargetNameError, match=r"^unknown target triple 'sparcle-linux-gnu' in "
                                              r"target 'llvm -mtriple=sparcle-linux-gnu'; LLVM "
                                              r"has no target for it"):
        Target("llvm -mtriple=sparcle-linux-gnu")


def test_other_architecture_uses_its_own_lists():
    Target(f"llvm -mtriple={AARCH64} -mcpu=neoverse-v2 -mattr=+sve2")
    with pytest.raises(TargetNameError, match=rf"unknown CPU 'haswell' for {AARCH64}"):
        Target(f"llvm -mtriple={AARCH64} -mcpu=haswell")
    with pytest.raises(TargetNameError, match=r"unknown CPU feature '\+avx2' for " + AARCH64):
        Target(f"llvm -mtriple={AARCH64} -mattr=+avx2")


# ------------------------------------------------------------------------- valid names pass
@pytest.mark.parametrize("spec", [AVX512, "llvm -mcpu=x86-64", "llvm -mcpu=haswell",
                                  "llvm -mcpu=znver5", "llvm -mcpu=native",
                                  "llvm -mcpu=native -mattr=+avx2", "llvm -mattr=+avx512f",
                                  "llvm -mcpu=skylake-avx512 -mattr=-avx512f",
                                  f"llvm -mtriple={HOST_TRIPLE}", "llvm -opt-level=2"])
def test_valid_targets_parse(spec):
    assert Target(spec).kind == "llvm"


def test_every_cpu_of_the_vector_width_table_exists():
    known = target_names.llvm_names(X86).cpus
    assert sorted(set(_CPU_VECTOR_BITS) - known) == []


def test_c_kind_is_left_to_the_c_compiler():
    assert Target("c -mcpu=haswel").mcpu == "haswel"


# ----------------------------------------------------------------------------------- the cost
def test_lists_are_read_once_per_triple(monkeypatch):
    """Targets are parsed often: one child process per triple, then set lookups."""
    real_run, calls = subprocess.run, []

    def counting_run(*args, **kwargs):
        calls.append(args)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(target_names.subprocess, "run", counting_run)
    target_names._read.cache_clear()
    for _ in range(200):
        Target("llvm -mcpu=skylake-avx512 -mattr=+avx512f")
        Target("llvm -mcpu=haswell")
    assert len(calls) == 1


def test_unreadable_lists_warn_and_pass(monkeypatch):
    def failing_run(*args, **kwargs):
        raise OSError("no such file")

    monkeypatch.setattr(target_names.subprocess, "run", failing_run)
    target_names._read.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="could not read LLVM's CPU and feature names"):
            assert Target("llvm -mcpu=haswell").mcpu == "haswell"
    finally:
        target_names._read.cache_clear()


def test_parse_help_reads_both_tables():
    text = ("Available CPUs for this target:\n\n  a-1   - Select the a-1 processor.\n  b  - x\n\n"
            "Available features for this target:\n\n  f1  - Enable f1.\n\n"
            "Use +feature to enable a feature, or -feature to disable it.\n"
            "For example, llc -mcpu=mycpu -mattr=+feature1,-feature2\n")
    assert target_names.parse_help(text) == (frozenset({"a-1", "b"}), frozenset({"f1"}))


# ------------------------------------------------------------------- the process survives
_COMPILE = """
import sys
from onnx import TensorProto, helper
import kiln
from kiln.frontend import from_onnx

graph = helper.make_graph(
    [helper.make_node("Relu", ["x"], ["y"])], "relu",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
if len(sys.argv) > 2:
    import onnx
    onnx.save(model, sys.argv[2])
    sys.exit(0)
mod, params = from_onnx(model)
kiln.compile(mod, target=sys.argv[1], params=params)
print("compiled")
"""

BAD = [("llvm -mcpu=haswel", "unknown CPU 'haswel'", "did you mean haswell?"),
       ("llvm -mattr=+avx513", "unknown CPU feature '+avx513'", "did you mean +avx512f")]


def _python(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ))


@pytest.mark.parametrize("spec, what, hint", BAD)
def test_python_api_raises_and_the_process_survives(spec, what, hint):
    pytest.importorskip("onnx")
    result = _python("-c", _COMPILE, spec)
    assert result.returncode > 0, f"exit {result.returncode}\n{result.stderr}"
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("kiln.target_names.TargetNameError: " + what), result.stderr
    assert hint in last
    assert "LLVM ERROR" not in result.stderr and "is not a recognized" not in result.stderr


@pytest.mark.parametrize("spec, what, hint", BAD)
def test_cli_compile_says_bad_target(spec, what, hint, tmp_path):
    pytest.importorskip("onnx")
    model = tmp_path / "relu.onnx"
    assert _python("-c", _COMPILE, "llvm", str(model)).returncode == 0
    result = _python("-m", "kiln.cli", "compile", str(model), "--target", spec,
                     "-o", str(tmp_path / "x.so"))
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stderr}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"kiln: error: bad --target: {what} for {HOST_TRIPLE} in target "
                               f"'{spec}'; {hint}"), lines[0]
    assert not (tmp_path / "x.so").exists()


def test_cli_tune_says_bad_target(tmp_path):
    pytest.importorskip("onnx")
    model = tmp_path / "relu.onnx"
    assert _python("-c", _COMPILE, "llvm", str(model)).returncode == 0
    result = _python("-m", "kiln.cli", "tune", str(model), "--target", "llvm -mcpu=haswel",
                     "-o", str(tmp_path / "log.jsonl"))
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stderr}"
    assert result.stderr.startswith("kiln: error: bad --target: unknown CPU 'haswel'")
    assert "Traceback" not in result.stderr


def test_listing_module_prints_the_names():
    result = _python("-m", "kiln.target_names", X86)
    assert result.returncode == 0, result.stderr
    assert "haswell" in result.stdout and "avx512f" in result.stdout
    result = _python("-m", "kiln.target_names", "sparcle-linux-gnu")
    assert result.returncode == 1 and "unknown target triple 'sparcle-linux-gnu'" in result.stderr

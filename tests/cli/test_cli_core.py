"""The `kiln` command line's core, driven in subprocesses on tiny models: compile -> run round
trips against ONNX's reference evaluator and eager PyTorch (tolerance in conftest: 1e-4 x
max|reference|), tune -> resume -> compile with the log, selfcheck, and every error path
(one `kiln: error:` line, the exit status, no traceback unless --verbose)."""
import os
import stat
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from kiln.cli.main import COMMANDS


# ------------------------------------------------------------------------------------ the shell
def test_help_lists_every_command_with_its_help_line(cli):
    for args in (["--help"], []):         # `kiln` alone prints the same help
        out = cli.ok(cli(*args)).stdout
        flat = " ".join(out.split())             # argparse wraps long help lines
        for name, (_, help_line) in COMMANDS.items():
            assert f"{name} {help_line}" in flat, (name, out)
    assert "--verbose show tracebacks" in flat


def test_command_modules_say_the_registry_help_line():
    import importlib
    import importlib.util
    for name, (module_path, help_line) in COMMANDS.items():
        if importlib.util.find_spec(module_path) is None:
            continue            # written by another change; main reports it as unavailable
        module = importlib.import_module(module_path)
        assert module.HELP == help_line, name
        assert callable(module.add_arguments) and callable(module.run), name


def test_help_and_run_import_only_what_they_need(compiled, image, tmp_path):
    """`kiln --help` imports no command module; `kiln run` loads the runtime, not the
    compiler (a compiled model runs without it)."""
    lib, _ = compiled
    np.savez(tmp_path / "in.npz", data=image)
    script = (
        "import sys, contextlib, io\n"
        "from kiln.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['--help']) == 0\n"
        "assert not [m for m in sys.modules if m.endswith('_cmd')], 'a command was imported'\n"
        f"assert main(['run', {str(lib)!r}, '--inputs', {str(tmp_path / 'in.npz')!r}]) == 0\n"
        "loaded = [m for m in ('kiln.driver', 'kiln.frontend', 'kiln.codegen', 'llvmlite', "
        "'torch', 'onnx') if m in sys.modules]\n"
        "assert not loaded, loaded\n")
    import subprocess
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_unknown_command_and_bad_options(cli, model_dir):
    cli.error(cli("frobnicate"), 2, "unknown command 'frobnicate'", "compile, run, tune")
    cli.error(cli("compile", model_dir / "tiny.onnx"), 2,
              "the following arguments are required: -o/--output", "kiln compile --help")
    cli.error(cli("run", "x.so", "--number", "0"), 2, "--number", "expected a positive integer")


# ------------------------------------------------------------------------- compile and run: ONNX
def test_compile_onnx_says_what_it_wrote(compiled):
    lib, result = compiled
    assert lib.is_file()
    line = result.stdout.strip()
    assert line.startswith(f"wrote {lib} (") and "inputs data: float32[1x3x8x8]" in line, line
    assert "compiled in" in line and len(line.splitlines()) == 1


def test_run_onnx_matches_reference(cli, compiled, image, onnx_reference, tmp_path):
    lib, _ = compiled
    np.savez(tmp_path / "in.npz", data=image)
    out = cli.ok(cli("run", lib, "--inputs", tmp_path / "in.npz",
                     "--outputs", tmp_path / "out.npz")).stdout
    assert out.strip() == f"wrote {tmp_path / 'out.npz'}: output0 float32[1x5]"
    with np.load(tmp_path / "out.npz") as npz:
        assert npz.files == ["output0"]
        cli.close(npz["output0"], onnx_reference(image))


def test_run_summary_and_benchmark(cli, compiled, image, onnx_reference, tmp_path):
    lib, _ = compiled
    np.savez(tmp_path / "in.npz", data=image)
    lines = cli.ok(cli("run", lib, "--inputs", tmp_path / "in.npz", "--benchmark",
                       "--number", "2", "--repeat", "2")).stdout.strip().splitlines()
    assert len(lines) == 2, lines
    want = onnx_reference(image).reshape(-1)
    assert lines[0].startswith("output0: float32[1x5] [")
    shown = [float(v) for v in lines[0].split("[", 2)[2].split("]")[0].split(",")]
    # The model tests' tolerance, plus the summary's rounding to 6 significant digits.
    np.testing.assert_allclose(shown, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())
    assert lines[1].startswith("median ") and " ms per run (2 x 2 runs, " in lines[1]


def test_dynamic_batch_needs_and_takes_input_shape(cli, model_dir, tmp_path, onnx_reference):
    cli.error(cli("compile", model_dir / "dynamic.onnx", "-o", tmp_path / "d.so"), 2,
              "input 'data' has dynamic shape Nx3x8x8",
              "--input-shape data:1x3x8x8")
    cli.error(cli("compile", model_dir / "dynamic.onnx", "--input-shape", "image:1x3x8x8",
                  "-o", tmp_path / "d.so"), 2, "'image', which is not an input", "inputs are data")
    out = cli.ok(cli("compile", model_dir / "dynamic.onnx", "--input-shape", "data:2x3x8x8",
                     "-o", tmp_path / "d.so")).stdout
    assert "inputs data: float32[2x3x8x8]" in out
    x = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype("float32")
    np.savez(tmp_path / "in.npz", data=x)
    cli.ok(cli("run", tmp_path / "d.so", "--inputs", tmp_path / "in.npz",
               "--outputs", tmp_path / "out.npz"))
    with np.load(tmp_path / "out.npz") as npz:
        want = np.concatenate([onnx_reference(x[i:i + 1]) for i in range(2)])
        cli.close(npz["output0"], want)


# -------------------------------------------------------------------------- compile and run: pt2
def test_pt2_round_trip_matches_torch(cli, pt2_model, tmp_path):
    torch = pytest.importorskip("torch")
    path, model, x = pt2_model
    lib = tmp_path / "tiny.so"
    out = cli.ok(cli("compile", path, "--opt-level", "2", "-o", lib)).stdout
    assert "inputs x: float32[1x3x8x8]" in out
    np.savez(tmp_path / "in.npz", x=x.numpy())
    cli.ok(cli("run", lib, "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out"))
    with torch.no_grad():
        want = model(x).numpy()
    with np.load(tmp_path / "out.npz") as npz:          # ".npz" added, as np.savez does
        cli.close(npz["output0"], want)
    cli.error(cli("compile", path, "--input-shape", "x:2x3x8x8", "-o", lib), 2,
              "differs from the shape 1x3x8x8", "export it again")


# ------------------------------------------------------------------------------ compile errors
def test_compile_file_errors(cli, model_dir, tmp_path):
    cli.error(cli("compile", tmp_path / "nope.onnx", "-o", tmp_path / "x.so"), 2,
              f"{tmp_path / 'nope.onnx'}: no such model file")
    (tmp_path / "model.tflite").write_bytes(b"\0" * 16)
    cli.error(cli("compile", tmp_path / "model.tflite", "-o", tmp_path / "x.so"), 2,
              "unsupported model file type '.tflite'", "kiln reads .onnx, .pt2")
    (tmp_path / "broken.onnx").write_bytes(b"this is not protobuf")
    cli.error(cli("compile", tmp_path / "broken.onnx", "-o", tmp_path / "x.so"), 1,
              "broken.onnx", "corrupt or not an ONNX model")
    (tmp_path / "broken.pt2").write_bytes(b"not a zip")
    cli.error(cli("compile", tmp_path / "broken.pt2", "-o", tmp_path / "x.so"), 2,
              "broken.pt2: not a readable torch.export program (not a zip archive")
    with zipfile.ZipFile(tmp_path / "other.pt2", "w") as archive:   # a zip, but not torch's
        archive.writestr("hello.txt", "hi")
    cli.error(cli("compile", tmp_path / "other.pt2", "-o", tmp_path / "x.so"), 2,
              "other.pt2: not a readable torch.export program (")
    cli.error(cli("compile", model_dir / "tiny.onnx", "-o", tmp_path / "no" / "dir" / "x.so"),
              2, "directory", "does not exist")
    cli.error(cli("compile", model_dir / "tiny.onnx", "--tuning-log", tmp_path / "t.jsonl",
                  "-o", tmp_path / "x.so"), 2, "t.jsonl: no such tuning log")
    cli.error(cli("compile", model_dir / "tiny.onnx", "--target", "vulkan", "-o",
                  tmp_path / "x.so"), 2, "bad --target", "unknown target kind 'vulkan'")
    assert not (tmp_path / "x.so").exists()


@pytest.mark.parametrize("text, why", [
    ("data", "expected NAME:DIMS"),
    (":1x3x8x8", "expected NAME:DIMS"),
    ("data:1xax8x8", "positive integers"),
    ("data:1x0x8", "positive integers"),
    ("data:", "positive integers"),
])
def test_bad_input_shape_strings(cli, model_dir, tmp_path, text, why):
    cli.error(cli("compile", model_dir / "tiny.onnx", "--input-shape", text, "-o",
                  tmp_path / "x.so"), 2, f"bad --input-shape {text!r}", why,
              "data:1x3x224x224")


def test_repeated_input_shape_is_an_error(cli, model_dir, tmp_path):
    cli.error(cli("compile", model_dir / "tiny.onnx", "--input-shape", "data:1x3x8x8",
                  "--input-shape", "data:2x3x8x8", "-o", tmp_path / "x.so"), 2,
              "gives input 'data' twice")


def test_unsupported_op_is_one_line_and_verbose_shows_the_traceback(cli, model_dir, tmp_path):
    op = (model_dir / "unsupported_op.txt").read_text()
    args = ("compile", model_dir / "unsupported.onnx", "-o", tmp_path / "x.so")
    cli.error(cli(*args), 1, "1 unsupported op type in ONNX model (1 node):",
              f"{op}: the_unsupported_node")
    verbose = cli(*args, "--verbose")
    assert verbose.returncode == 1
    assert "Traceback" in verbose.stderr and "UnsupportedOpsError" in verbose.stderr
    assert cli("--verbose", *args).stderr.count("Traceback") == 1     # global position too


# --------------------------------------------------------------------------------- run errors
def test_run_library_errors(cli, tmp_path):
    cli.error(cli("run", tmp_path / "nope.so", "--inputs", tmp_path / "in.npz"), 2,
              "nope.so: no such model library")
    (tmp_path / "fake.so").write_text("not an ELF file")
    cli.error(cli("run", tmp_path / "fake.so"), 2, "fake.so", "not a shared library (15 bytes, "
              "too short for an ELF header)")
    (tmp_path / "m.onnx").write_bytes(b"onnx")
    cli.error(cli("run", tmp_path / "m.onnx"), 2, "m.onnx is a model, not a compiled library; "
              "compile it first: kiln compile", "-o m.so")


@pytest.mark.parametrize("arrays, fragments", [
    ({}, ["no array for input 'data' (expected float32[1x3x8x8])"]),
    ({"data": np.zeros((1, 3, 8, 9), "float32")},
     ["input 'data' is float32[1x3x8x9], expected float32[1x3x8x8]"]),
    ({"data": np.zeros((1, 3, 8, 8), "float64")},
     ["input 'data' is float64[1x3x8x8], expected float32[1x3x8x8]"]),
    ({"data": np.zeros((1, 3, 8, 8), "float32"), "mask": np.zeros(3)},
     ["'mask' is not an input of the model", "its inputs are data: float32[1x3x8x8]"]),
])
def test_run_input_errors(cli, compiled, tmp_path, arrays, fragments):
    lib, _ = compiled
    np.savez(tmp_path / "in.npz", **arrays)
    cli.error(cli("run", lib, "--inputs", tmp_path / "in.npz"), 2, "in.npz: ", *fragments)


def test_run_unreadable_or_absent_inputs(cli, compiled, tmp_path):
    lib, _ = compiled
    cli.error(cli("run", lib), 2, "the model needs inputs (data: float32[1x3x8x8])",
              "--inputs FILE.npz")
    cli.error(cli("run", lib, "--inputs", tmp_path / "none.npz"), 2,
              "none.npz: no such inputs file")
    np.save(tmp_path / "one.npy", np.zeros(3))
    cli.error(cli("run", lib, "--inputs", tmp_path / "one.npy"), 2,
              "one.npy: not a readable .npz file", "np.savez")


# ----------------------------------------------------------------------------------------- tune
def test_tune_resume_then_compile_with_the_log(cli, model_dir, tmp_path, image, onnx_reference):
    log = tmp_path / "tune.jsonl"
    args = ("tune", model_dir / "tiny.onnx", "--trials", "2", "--tuner", "random", "--seed",
            "0", "-o", log)
    first = cli.ok(cli(*args))
    assert first.stdout.startswith("tuned 2 tasks: "), first.stdout
    records = sum(1 for line in log.read_text().splitlines() if line.strip())
    # 2 tasks x 2 trials, and the best configs and the default measured twice more at the end
    # (tune_model's remeasure_top): each of at most 3 configs per task at most 3 times; then
    # each of those once more inside the model (select_in_model).
    assert 2 * 2 <= records <= 2 * 3 * 3 + 2 * 3
    assert "selecting in the model: 2 tasks" in first.stderr
    assert f"{records} new records, {records} in {log}" in first.stdout
    assert "[task 2/2]" in first.stderr         # the progress lines
    again = cli.ok(cli(*args))                  # resumed: nothing measured twice
    assert f"resuming from {records} records in {log}" in again.stderr
    assert f"0 new records, {records} in {log}" in again.stdout
    lib = tmp_path / "tuned.so"
    cli.ok(cli("compile", model_dir / "tiny.onnx", "--tuning-log", log, "-o", lib))
    np.savez(tmp_path / "in.npz", data=image)
    cli.ok(cli("run", lib, "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "o.npz"))
    with np.load(tmp_path / "o.npz") as npz:
        cli.close(npz["output0"], onnx_reference(image))


def test_tune_auto_schedules_every_kernel_resumes_and_compiles(cli, model_dir, tmp_path, image,
                                                               onnx_reference):
    log = tmp_path / "auto.jsonl"
    args = ("tune", model_dir / "tiny.onnx", "--auto", "--trials", "2", "--seed", "0", "-o",
            log)
    first = cli.ok(cli(*args))
    assert first.stdout.startswith("tuned "), first.stdout
    assert '\\"auto_schedule\\"' in log.read_text()   # (a task key inside JSON)
    records = sum(1 for line in log.read_text().splitlines() if line.strip())
    assert f"{records} new records, {records} in {log}" in first.stdout
    again = cli.ok(cli(*args))                  # resumed: nothing measured twice
    assert f"0 new records, {records} in {log}" in again.stdout, again.stdout
    lib = tmp_path / "auto.so"
    cli.ok(cli("compile", model_dir / "tiny.onnx", "--tuning-log", log, "-o", lib))
    np.savez(tmp_path / "in.npz", data=image)
    cli.ok(cli("run", lib, "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "o.npz"))
    with np.load(tmp_path / "o.npz") as npz:
        cli.close(npz["output0"], onnx_reference(image))


def test_tune_auto_refuses_a_tuner(cli, model_dir, tmp_path):
    log = tmp_path / "auto.jsonl"
    cli.error(cli("tune", model_dir / "tiny.onnx", "--auto", "--tuner", "ga", "-o", log), 2,
              "--tuner chooses the templates' search strategy")
    assert not log.exists()


def test_compile_with_a_log_of_other_tasks_says_so(cli, model_dir, tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    out = cli.ok(cli("compile", model_dir / "tiny.onnx", "--tuning-log",
                     tmp_path / "empty.jsonl", "-o", tmp_path / "x.so"))
    assert "kiln: apply_history_best: 2 of 2 tasks untuned" in out.stderr, out.stderr


@pytest.mark.parametrize("budget, why", [("soon", "not a number of seconds"),
                                         ("0m", "must be positive")])
def test_tune_bad_budget(cli, model_dir, tmp_path, budget, why):
    cli.error(cli("tune", model_dir / "tiny.onnx", "--budget", budget, "-o",
                  tmp_path / "t.jsonl"), 2, "bad --budget", repr(budget), why)
    assert not (tmp_path / "t.jsonl").exists()


def test_tune_cluster_options_are_checked_before_any_work(cli, model_dir, tmp_path):
    log = tmp_path / "t.jsonl"
    model = model_dir / "tiny.onnx"
    cli.error(cli("tune", model, "-o", log, "--tls-cert", "c.pem"), 2, "need --cluster")
    cli.error(cli("tune", model, "-o", log, "--cluster", "tls://127.0.0.1:1", "--tls-cert",
                  "c.pem"), 2, "all three of --tls-ca-file, --tls-cert and --tls-key")
    cli.error(cli("tune", model, "-o", log, "--cluster", "tls://127.0.0.1:1"), 1,
              "tls://127.0.0.1:1 speaks TLS: pass security=")
    cli.error(cli("tune", model, "-o", log, "--cluster", "tls://127.0.0.1:1", "--tls-ca-file",
                  tmp_path / "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem"), 1,
              "TLS CA certificate", "does not exist")
    assert not log.exists()


def test_device_key_names_this_cpu_and_other_targets(cli):
    pytest.importorskip("distributed", reason="dask.distributed is not installed")
    from kiln.autotvm.cluster import device_resource
    here = cli.ok(cli("device-key")).stdout.strip()
    assert here == device_resource("llvm") and here.startswith("kiln-device-x86_64-")
    other = cli.ok(cli("device-key", "--target", "llvm -mcpu=haswell")).stdout.strip()
    assert other == "kiln-device-x86_64-haswell"
    out = cli.ok(cli("selfcheck")).stdout
    status, line = _status_of(out, "cluster")
    assert status == "ok" and f"--resources {here}=1" in line
    cli.error(cli("device-key", "--target", "llvm -mcpu=nope"), 2, "bad --target")


# ------------------------------------------------------------------------------------ selfcheck
def _status_of(out, name):
    """The status word of the selfcheck line for `name`, and the line."""
    for line in out.splitlines():
        words = line.split()
        if len(words) > 1 and " ".join(words[1:]).startswith(name + " "):
            return words[0], line
    raise AssertionError(f"no {name!r} line in:\n{out}")


def test_selfcheck_reports_the_machine(cli):
    import llvmlite.binding as llvm
    out = cli.ok(cli("selfcheck", env={"KILN_NUM_THREADS": None})).stdout
    status, line = _status_of(out, "LLVM")
    assert status == "ok" and ".".join(map(str, llvm.llvm_version_info)) in line
    status, line = _status_of(out, "CPU")
    assert status == "ok" and llvm.get_host_cpu_name() in line
    features = llvm.get_host_cpu_features()
    for f in ("avx2", "avx512f", "fma"):
        assert f"{f} {'yes' if features.get(f) else 'no'}" in line
    for name in ("C compiler", "OpenMP", "kernel", "numpy", "onnx", "xgboost", "tqdm"):
        assert _status_of(out, name)[0] == "ok", name
    status, line = _status_of(out, "threads")
    assert status == "ok" and f" {len(os.sched_getaffinity(0))} (from the CPUs" in line
    assert out.strip().splitlines()[-1].startswith("everything kiln needs is here")


def test_selfcheck_graphviz_found_or_fix_given(cli, tmp_path):
    import shutil
    out = cli.ok(cli("selfcheck")).stdout
    status, line = _status_of(out, "graphviz")
    if shutil.which("dot") is None:
        assert status == "optional" and "apt-get install graphviz" in line
    else:
        assert status == "ok"
    fake = tmp_path / "dot"         # a `dot` that only answers -V, first on PATH
    fake.write_text("#!/bin/sh\necho 'dot - graphviz version 99.1.0 (0)' >&2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = cli.ok(cli("selfcheck", env={"PATH": f"{tmp_path}:{os.environ['PATH']}"})).stdout
    status, line = _status_of(out, "graphviz")
    assert status == "ok" and "graphviz version 99.1.0" in line


def test_selfcheck_says_how_to_install_the_model_zoo(cli, tmp_path):
    result = cli.ok(cli("selfcheck", env={"KILN_ZOO_PATH": str(tmp_path)}))
    status, line = _status_of(result.stdout, "zoo")
    assert status == "optional" and "torchvision and timm not in" in line
    assert "make zoo" in line


def test_selfcheck_fails_with_the_fix_when_something_needed_is_missing(cli, tmp_path):
    result = cli("selfcheck", env={"CC": str(tmp_path / "no-such-cc"),
                                   "KILN_NUM_THREADS": "3", "KILN_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 1, result.stdout + result.stderr
    status, line = _status_of(result.stdout, "C compiler")
    assert status == "MISSING" and "no-such-cc" in line and "set CC" in line
    assert _status_of(result.stdout, "OpenMP")[0] == "MISSING"
    assert _status_of(result.stdout, "threads")[1].endswith("3 (from $KILN_NUM_THREADS)")
    assert "kiln cannot work here until C compiler" in result.stdout.splitlines()[-1]
    result = cli("selfcheck", env={"KILN_NUM_THREADS": "zero"})
    assert result.returncode == 1
    status, line = _status_of(result.stdout, "threads")
    assert status == "MISSING" and "KILN_NUM_THREADS" in line and "positive integer" in line


# ------------------------------------------------------------------------------- ARM, C runtime
def test_compile_for_arm_then_run_with_the_c_runtime_under_qemu(cli, model_dir, image,
                                                                onnx_reference, tmp_path):
    from kiln.runtime.toolchain import compiler_for, emulator_for, host_arch, missing
    if host_arch() != "x86_64" or missing("aarch64-linux-gnu"):
        pytest.skip(missing("aarch64-linux-gnu") or "cross-compiles from an x86-64 machine")
    compiler, qemu = compiler_for("aarch64-linux-gnu"), emulator_for("aarch64-linux-gnu")
    lib = tmp_path / "arm.so"
    cli.ok(cli("compile", model_dir / "tiny.onnx", "--target", "rasp4b", "-o", lib))
    cli.error(cli("run", lib), 2, "built for aarch64, this machine is x86_64: run it there, "
                                  "with kiln's C runtime")
    out = cli.ok(cli("c-runtime", "--target", "rasp4b", "-o", tmp_path / "rt")).stdout
    assert out.startswith(f"wrote {tmp_path / 'rt'}/: kiln_runtime.h, libkiln_runtime.so")
    assert cli.ok(cli("c-runtime", "--target", "rasp4b", "--print-cc")).stdout.split() == compiler
    image.tofile(tmp_path / "x.bin")
    done = subprocess.run([*qemu, str(tmp_path / "rt" / "run_model"), str(lib),
                           f"data={tmp_path / 'x.bin'}", "-o", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("output0: float32[1x5]")
    got = np.fromfile(tmp_path / "output0.bin", dtype=np.float32).reshape(1, -1)
    cli.close(got, onnx_reference(image))
    cli.error(cli("c-runtime", "--target", "opencl", "-o", tmp_path / "x"), 2,
              "the C runtime runs CPU models only")
    cli.error(cli("c-runtime"), 2, "needs -o DIR")
    # Tuning for the ARM target times the candidates under QEMU; the log compiles the model.
    log = tmp_path / "arm.jsonl"
    out = cli.ok(cli("tune", model_dir / "tiny.onnx", "--target", "rasp4b", "--trials", "2",
                     "--tuner", "random", "-o", log)).stdout
    assert out.startswith("tuned ") and "new records" in out
    cli.ok(cli("compile", model_dir / "tiny.onnx", "--target", "rasp4b", "--tuning-log", log,
               "-o", tmp_path / "tuned.so"))
    cli.error(cli("tune", model_dir / "tiny.onnx", "--target", "rasp4b", "-o", log,
                  "--cluster", "tcp://127.0.0.1:1"), 2, "does not go with --device-login")

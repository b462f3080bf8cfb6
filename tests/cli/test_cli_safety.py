"""What the CLI must not do to a user's files and machine (issue 31): write an output over one
of the command's inputs, run code carried by a .pt2 file (unless --trust / trust=True), or
report the user's own problems (an ONNX shape overridden, external data missing, a shape too
large for memory) as internal errors. CLI runs are subprocesses; every refusal is one
`kiln: error:` line naming the option and file, and leaves the files as they were."""
import io
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from kiln.frontend import UntrustedModelError, from_pytorch, load_exported_program


def _snapshot(*paths):
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in paths if p.exists()}


# ------------------------------------------------------------------- outputs over inputs
@pytest.fixture
def work(model_dir, compiled, tmp_path):
    """tmp_path with m.onnx, m.so, in.npz (the tiny model's), and links to m.onnx."""
    shutil.copy(model_dir / "tiny.onnx", tmp_path / "m.onnx")
    shutil.copy(compiled[0], tmp_path / "m.so")
    np.savez(tmp_path / "in.npz", data=np.zeros((1, 3, 8, 8), "float32"))
    (tmp_path / "log.jsonl").write_text("")
    os.symlink(tmp_path / "m.onnx", tmp_path / "symlink.onnx")
    os.link(tmp_path / "m.onnx", tmp_path / "hardlink.onnx")
    return tmp_path


# (command line with {d} for the directory, the error line's fragments)
SAME_FILE_CASES = {
    "compile -o model": ("compile {d}/m.onnx -o {d}/m.onnx",
                         ["-o {d}/m.onnx is the model {d}/m.onnx"]),
    "compile -o symlink": ("compile {d}/m.onnx -o {d}/symlink.onnx",
                           ["-o {d}/symlink.onnx", "the model {d}/m.onnx"]),
    "compile -o hard link": ("compile {d}/m.onnx -o {d}/hardlink.onnx",
                             ["-o {d}/hardlink.onnx", "the model {d}/m.onnx"]),
    "compile -o relative": ("compile {d}/m.onnx -o {d}/../{n}/m.onnx",
                            ["the model {d}/m.onnx"]),
    "compile -o --tuning-log": ("compile {d}/m.onnx --tuning-log {d}/log.jsonl -o {d}/log.jsonl",
                                ["-o {d}/log.jsonl is the --tuning-log {d}/log.jsonl"]),
    "tune -o model": ("tune {d}/m.onnx -o {d}/symlink.onnx",
                      ["-o {d}/symlink.onnx", "the model {d}/m.onnx", "tuning log"]),
    "inspect -o model": ("inspect {d}/m.onnx -o {d}/hardlink.onnx",
                         ["-o {d}/hardlink.onnx", "{d}/m.onnx"]),
    "run --outputs inputs": ("run {d}/m.so --inputs {d}/in.npz --outputs {d}/in.npz",
                             ["--outputs {d}/in.npz is the --inputs file {d}/in.npz"]),
    "run --outputs inputs without .npz": ("run {d}/m.so --inputs {d}/in.npz --outputs {d}/in",
                                          ["--outputs {d}/in.npz", "--inputs file {d}/in.npz"]),
    "run --outputs library": ("run {d}/m.so --inputs {d}/in.npz --outputs {d}/m.so.npz",
                              None),
    "profile --json library": ("profile {d}/m.so --json {d}/m.so",
                               ["--json {d}/m.so is the library {d}/m.so"]),
}


@pytest.mark.parametrize("case", SAME_FILE_CASES)
def test_output_over_an_input_is_refused(cli, work, case):
    line, fragments = SAME_FILE_CASES[case]
    args = line.format(d=work, n=work.name).split()
    files = sorted(p for p in work.iterdir())
    before = _snapshot(*files)
    result = cli(*args)
    if fragments is None:          # m.so.npz is not the library: a different file, written
        cli.ok(result)
        return
    cli.error(result, 2, "refusing to write", *(f.format(d=work) for f in fragments))
    assert result.stdout == ""
    assert _snapshot(*files) == before
    assert sorted(work.iterdir()) == files, "a file was written"


def test_run_outputs_over_the_library_through_a_link(cli, work):
    os.symlink(work / "m.so", work / "lib.npz")
    before = _snapshot(work / "m.so")
    cli.error(cli("run", work / "m.so", "--inputs", work / "in.npz", "--outputs",
                  work / "lib.npz"), 2, f"--outputs {work}/lib.npz is the library {work}/m.so")
    assert _snapshot(work / "m.so") == before


# -------------------------------------------------------------------------------- .pt2 trust
# (the tests below that need torch take pt2_model, which skips them without it)


def _rewrite(src, dst, changes):
    """Copy the .pt2 archive src to dst, replacing (bytes), deleting (None) or adding the
    records named in `changes` (paths inside the archive's folder); a key starting with "/"
    is a top-level zip entry."""
    changes = dict(changes)
    with zipfile.ZipFile(src) as zin:
        root = zin.namelist()[0].split("/")[0]
        with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
            for info in zin.infolist():
                data = changes.pop(info.filename[len(root) + 1:], zin.read(info.filename))
                if data is not None:
                    zout.writestr(info.filename, data)
            for rel, data in changes.items():
                zout.writestr(rel[1:] if rel.startswith("/") else f"{root}/{rel}", data)
    return dst


def _read(path, record):
    with zipfile.ZipFile(path) as z:
        return z.read(f"{z.namelist()[0].split('/')[0]}/{record}")


class _MakesMarker:
    """Pickled, it runs `code` (an expression) when unpickled: what a crafted file carries."""

    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return (eval, (self.code,))


def _evil_torch_save(marker, value_code):
    import torch
    buf = io.BytesIO()
    torch.save(_MakesMarker(f"(open({str(marker)!r}, 'w').close(), {value_code})[1]"), buf)
    return buf.getvalue()


@pytest.fixture
def evil_pt2(pt2_model, tmp_path):
    """(a .pt2 whose first weight is a pickle that creates `marker` and returns the weight,
    marker): what torch.export.load runs when it loads the archive."""
    path, _, _ = pt2_model
    marker = tmp_path / "MARKER"
    config = json.loads(_read(path, "data/weights/model_weights_config.json"))
    fqn, meta = next(iter(config["config"].items()))
    meta["use_pickle"] = True
    shape = tuple(d["as_int"] for d in meta["tensor_meta"]["sizes"])
    payload = _evil_torch_save(marker, f"__import__('torch').nn.Parameter("
                                       f"__import__('torch').zeros({shape}))")
    evil = _rewrite(path, tmp_path / "evil.pt2", {
        "data/weights/model_weights_config.json": json.dumps(config).encode(),
        f"data/weights/{meta['path_name']}": payload})
    return evil, marker, fqn


def test_saved_programs_load_without_trust(pt2_model, tmp_path):
    import torch

    from kiln.testing.models import example_input, resnet18
    path, _, _ = pt2_model
    assert isinstance(load_exported_program(path), torch.export.ExportedProgram)
    net = resnet18(width=8, layers=(1, 1, 1, 1), num_classes=10)       # BN buffers, int64
    torch.export.save(torch.export.export(net, example_input(net, image_size=32)),
                      str(tmp_path / "resnet.pt2"))

    class WithConstant(torch.nn.Module):                     # a tensor constant, kwargs
        def __init__(self):
            super().__init__()
            self.c = torch.arange(4.0)

        def forward(self, x, *, y):
            return x * self.c + y

    torch.export.save(torch.export.export(WithConstant(), (torch.ones(4),), {"y": torch.ones(4)}),
                      str(tmp_path / "const.pt2"))
    for name in ("resnet.pt2", "const.pt2"):
        assert isinstance(load_exported_program(tmp_path / name), torch.export.ExportedProgram)


def test_cli_reads_a_saved_program_without_trust(cli, pt2_model):
    path, _, _ = pt2_model
    assert "def @main" in cli.ok(cli("inspect", path)).stdout


def test_pickled_weight_is_refused_and_runs_only_with_trust(evil_pt2):
    evil, marker, fqn = evil_pt2
    with pytest.raises(UntrustedModelError, match=f"weight '{fqn}'.* is a pickle") as info:
        load_exported_program(evil)
    assert "trust=True" in str(info.value)
    assert not marker.exists()
    program = load_exported_program(evil, trust=True)        # what torch.export.load does
    assert marker.exists()
    assert type(program).__name__ == "ExportedProgram"


@pytest.mark.parametrize("command", ["inspect", "compile", "tune"])
def test_cli_refuses_a_pickled_weight(cli, evil_pt2, tmp_path, command):
    evil, marker, fqn = evil_pt2
    before = _snapshot(evil)
    args = [] if command == "inspect" else ["-o", tmp_path / "out"]
    line = cli.error(cli(command, evil, *args), 2, f"{evil}: refusing to load",
                     "is a pickle", "--trust")
    assert fqn in line
    assert not marker.exists() and not (tmp_path / "out").exists()
    assert _snapshot(evil) == before


def test_cli_trust_loads_it(cli, evil_pt2):
    evil, marker, _ = evil_pt2
    assert "def @main" in cli.ok(cli("inspect", evil, "--trust")).stdout
    assert marker.exists()


def _crafted(path, tmp_path):
    """{case: (changes to the archive, a fragment of the refusal)}: each way a .pt2 makes
    torch.export.load run code."""
    marker = tmp_path / "MARKER"
    program = json.loads(_read(path, "models/model.json"))
    node = program["graph_module"]["graph"]["nodes"][0]

    def edited(change):
        copy = json.loads(json.dumps(program))
        change(copy)
        return {"models/model.json": json.dumps(copy).encode()}

    def graph(copy):
        return copy["graph_module"]["graph"]

    def set_target(target):
        return lambda copy: graph(copy)["nodes"][0].update(target=target)

    def set_in_spec(spec):
        return lambda copy: copy["graph_module"]["module_call_graph"][0]["signature"].update(
            in_spec=spec)

    opaque = {"config": {"obj": {"path_name": "opaque_obj_0", "is_param": False,
                                 "use_pickle": False, "tensor_meta": None}}}
    enum_spec = json.dumps([1, {"type": "builtins.dict", "children_spec": [], "context": json.dumps(
        [{"__enum__": True, "fqn": "antigravity:x", "name": "y"}])}])
    factory_spec = json.dumps([1, {"type": "collections.defaultdict", "children_spec": [],
                                   "context": json.dumps({"default_factory_module": "builtins",
                                                          "default_factory_name": "breakpoint",
                                                          "dict_context": []})}])
    return {
        "opaque constant": ({"data/constants/model_constants_config.json":
                             json.dumps(opaque).encode(), "data/constants/opaque_obj_0": b"x"},
                            "custom or opaque object"),
        "legacy weights": ({"data/weights/model.pt": b"x"}, "legacy weights file"),
        "aotinductor": ({"data/aotinductor/model/model.so": b"\x7fELF"}, "native code"),
        # not refused: left out of what torch loads (see test_sample_inputs_are_never_unpickled)
        "sample inputs": ({"data/sample_inputs/model.pt": _evil_torch_save(
            marker, "((__import__('torch').zeros(1, 3, 8, 8),), {})")}, None),
        "bare pickle inputs": ({"data/sample_inputs/model.pt": b"\x80\x02cos\nsystem\n."},
                               None),
        "call target": (edited(set_target("torch.os.system")),
                        f"node {node['name']!r} calls 'torch.os.system'"),
        "operator target": (edited(set_target("_operator.methodcaller")), "not an arithmetic"),
        "operator argument": (edited(lambda copy: graph(copy)["nodes"][0]["inputs"].append(
            {"name": "f", "arg": {"as_operator": "torch.os.system"}, "kind": 1})),
            "an argument names 'torch.os.system'"),
        "sympy eval": (edited(lambda copy: graph(copy)["sym_int_values"].update(
            s0={"as_expr": {"expr_str": "__import__('os').getpid()", "hint": None}})),
            "symbolic expression"),
        "guards code": (edited(lambda copy: copy.update(guards_code=["__import__('os')"])),
                        "guards_code"),
        "enum import": (edited(set_in_spec(enum_spec)), "antigravity"),
        "default factory": (edited(set_in_spec(factory_spec)), "builtins.breakpoint"),
        "other target": (edited(set_target("builtins.eval")), "not a PyTorch operator"),
        "top-level entries": ({"/version": b"1.0", "/serialized_exported_program.json": b"{}"},
                              "'version'"),
    }


@pytest.mark.parametrize("case", ["opaque constant", "legacy weights", "aotinductor",
                                  "call target",
                                  "operator target", "operator argument", "sympy eval",
                                  "guards code", "enum import", "default factory",
                                  "other target", "top-level entries"])
def test_crafted_archives_are_refused(pt2_model, tmp_path, case):
    path, _, _ = pt2_model
    changes, fragment = _crafted(path, tmp_path)[case]
    crafted = _rewrite(path, tmp_path / "crafted.pt2", changes)
    with pytest.raises(UntrustedModelError, match="refusing to load") as info:
        load_exported_program(crafted)
    assert fragment in info.value.reason, info.value.reason
    assert not (tmp_path / "MARKER").exists()


@pytest.mark.parametrize("case", ["sample inputs", "bare pickle inputs"])
def test_sample_inputs_are_never_unpickled(pt2_model, tmp_path, case):
    # torch.load would unpickle them (and retry a failure with the full unpickler): kiln hands
    # torch the archive without them, so even a pickle that runs code is never read.
    path, _, _ = pt2_model
    changes, _ = _crafted(path, tmp_path)[case]
    program = load_exported_program(_rewrite(path, tmp_path / "crafted.pt2", changes))
    assert program.example_inputs is None
    assert not (tmp_path / "MARKER").exists()
    from_pytorch(program)                     # and it imports as the program it is


def test_pre_archive_format_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "old.pt2", "w") as z:
        z.writestr("version", "8.0")
        z.writestr("serialized_exported_program.json", "{}")
        z.writestr("serialized_state_dict.json", b"\x80\x02cos\nsystem\n.")
    with pytest.raises(UntrustedModelError, match="pre-2.7 torch.export format"):
        load_exported_program(tmp_path / "old.pt2")


def test_pickled_sample_inputs_run_code_in_torch(pt2_model, tmp_path):
    """Why the sample inputs are left out: torch retries them with the full unpickler."""
    path, _, _ = pt2_model
    changes, _ = _crafted(path, tmp_path)["sample inputs"]
    crafted = _rewrite(path, tmp_path / "crafted.pt2", changes)
    # torch logs the fallback with a format string short of an argument: keep it quiet
    logging.disable(logging.CRITICAL)
    try:
        load_exported_program(crafted, trust=True)
    finally:
        logging.disable(logging.NOTSET)
    assert (tmp_path / "MARKER").exists()


# ------------------------------------------------------------------------ --input-shape notes
def test_overriding_a_static_shape_says_so(cli, model_dir):
    result = cli.ok(cli("inspect", model_dir / "tiny.onnx", "--input-shape", "data:2x3x8x8"))
    notes = result.stderr.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith("kiln: note: "), result.stderr
    for fragment in ("--input-shape data:2x3x8x8", "1x3x8x8", "tiny.onnx", "'data'"):
        assert fragment in notes[0]


def test_setting_dynamic_or_equal_dims_is_silent(cli, model_dir):
    for model, shape in (("dynamic.onnx", "data:2x3x8x8"), ("tiny.onnx", "data:1x3x8x8")):
        result = cli.ok(cli("inspect", model_dir / model, "--input-shape", shape))
        assert result.stderr == "", result.stderr
    result = cli.ok(cli("inspect", model_dir / "dynamic.onnx", "--input-shape", "data:2x3x9x9"))
    assert "overrides the shape Nx3x8x8" in result.stderr


# ------------------------------------------------------------------------------ external data
@pytest.fixture
def external(model_dir, tmp_path):
    """tmp_path/ext.onnx, whose weights are in tmp_path/ext.data (its bytes returned)."""
    import onnx
    model = onnx.load(str(model_dir / "tiny.onnx"))
    onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="ext.data", size_threshold=0)
    return tmp_path / "ext.onnx", (tmp_path / "ext.data").read_bytes()


def test_missing_external_data_names_the_file(cli, external, tmp_path):
    model, _ = external
    (tmp_path / "ext.data").unlink()
    cli.error(cli("compile", model, "-o", tmp_path / "m.so"), 1, "ext.onnx",
              "external data file 'ext.data'", "does not exist")
    assert not (tmp_path / "m.so").exists()


def test_truncated_external_data_names_the_file(cli, external, tmp_path):
    model, data = external
    (tmp_path / "ext.data").write_bytes(data[:100])
    cli.error(cli("inspect", model), 1, "external data file 'ext.data'", "only 100 bytes")
    (tmp_path / "ext.data").write_bytes(data)
    cli.ok(cli("inspect", model))


# ------------------------------------------------------------------------- out of memory
HUGE = "data:10000x3x224x224"      # 6 GB of float32, and 1.5e9 elements: under the element bound


def _limited(*args):
    """kiln in a subprocess whose address space is capped at 4 GB, so a huge allocation fails
    at once, whatever this machine's overcommit setting."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    return subprocess.run([sys.executable, "-m", "kiln.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=300, preexec_fn=cap)


@pytest.fixture
def constant_of_shape(tmp_path):
    """A model that folds ConstantOfShape(Shape(data)) at import: a constant of data's shape."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("Shape", ["data"], ["s"], name="shape"),
             helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill",
                              value=numpy_helper.from_array(np.array([1.0], "float32"))),
             helper.make_node("Add", ["data", "c"], ["y"], name="add")]
    io_type = ["N", 3, 224, 224]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("data", TensorProto.FLOAT, io_type)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, io_type)])
    path = tmp_path / "fill.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_constant_too_large_for_memory_names_the_shape(cli, constant_of_shape, tmp_path):
    result = _limited("compile", constant_of_shape, "--input-shape", HUGE, "-o", tmp_path / "x.so")
    cli.error(result, 1, "'fill' (ConstantOfShape)", "too large for memory",
              "data: 10000x3x224x224")
    assert "internal error" not in result.stderr


def test_running_out_of_memory_names_the_input_shapes(cli, model_dir, tmp_path):
    lib = tmp_path / "huge.so"
    cli.ok(cli("compile", model_dir / "dynamic.onnx", "--input-shape", HUGE, "-o", lib))
    result = _limited("profile", lib, "--number", "1", "--repeat", "1")
    cli.error(result, 1, f"{lib}: not enough memory to run it",
              "data: float32[10000x3x224x224]", "--input-shape")


def test_an_unchecked_pytorch_version_needs_trust(pt2_model, monkeypatch):
    # The check follows one PyTorch's loader; under another it cannot vouch for a file.
    path, _, _ = pt2_model
    monkeypatch.setattr("torch.__version__", "2.99.0")
    with pytest.raises(UntrustedModelError, match="follows PyTorch 2.13's loader, and this is "
                                                  "PyTorch 2.99.0"):
        load_exported_program(path)


@pytest.mark.parametrize("location", ["/etc/hostname", "../outside.data"])
def test_external_data_outside_the_model_directory_is_refused(external, tmp_path, location):
    import onnx

    from kiln.frontend import FrontendError, from_onnx
    model_path, _ = external
    model = onnx.load(str(model_path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, str(tmp_path / "moved.onnx"))
    with pytest.raises(FrontendError, match="not a path inside the model's directory"):
        from_onnx(str(tmp_path / "moved.onnx"))

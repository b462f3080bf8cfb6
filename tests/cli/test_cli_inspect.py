"""`kiln inspect` in a subprocess: the graph IR of a model file at each stage (checked against
the same stage computed here), its DOT drawing, a compiled library's listing, and each error
(one line, the right exit status, no traceback).
"""
import re
import shutil

import pytest

from kiln.cli.common import load_model
from kiln.driver.stages import STAGES, module_at_stage
from kiln.graph import Call, post_order
from kiln.graph.transform.fuse_ops import is_primitive
from kiln.runtime import load_module

HAVE_DOT = shutil.which("dot") is not None


@pytest.fixture(scope="module")
def tiny(model_dir):
    """The tiny ONNX model's path and its (mod, params), read here as the CLI reads it."""
    path = model_dir / "tiny.onnx"
    return path, load_model(path)


def _primitive_calls(mod):
    return [n for n in post_order(mod["main"].body, enter_functions=False)
            if isinstance(n, Call) and is_primitive(n.op)]


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_prints_that_stage(cli, tiny, stage):
    path, (mod, params) = tiny
    out = cli.ok(cli("inspect", path, "--stage", stage)).stdout
    want = module_at_stage(mod, stage, params=params)
    assert out == f"{want}\n"
    header = out.splitlines()[0]
    assert header.startswith("def @main (%data: Tensor[(1, 3, 8, 8), float32]")
    weights_bound = "%w:" not in header                       # weights are constants now
    assert weights_bound == (stage != "imported")
    assert out.count("Primitive=1") == len(_primitive_calls(want))
    assert (out.count("Primitive=1") > 0) == (stage == "fused")


def test_default_stage_is_imported(cli, tiny):
    path, (mod, _) = tiny
    out = cli.ok(cli("inspect", path)).stdout
    assert out == f"{mod}\n" and "nn.conv2d(%data, %w" in out


def test_dot_of_the_fused_stage_has_a_cluster_per_kernel(cli, tiny, tmp_path):
    path, (mod, params) = tiny
    kernels = len(_primitive_calls(module_at_stage(mod, "fused", params=params)))
    out = cli.ok(cli("inspect", path, "--stage", "fused", "--format", "dot")).stdout
    assert out.startswith('digraph "kiln graph" {') and out.count("subgraph cluster_") == kernels
    written = tmp_path / "fused.dot"
    result = cli.ok(cli("inspect", path, "--stage", "fused", "--format", "dot", "-o", written))
    assert written.read_text() == out
    assert result.stdout.startswith(f"wrote {written} (dot, ")


def test_library_lists_inputs_outputs_and_kernels(cli, compiled):
    so, _ = compiled
    lib = load_module(so)
    out = cli.ok(cli("inspect", so)).stdout
    lines = out.splitlines()
    assert lines[0].startswith(f"{so}: kiln model library, ")
    assert lines[1:5] == ["inputs:", "  data: float32[1x3x8x8]",
                          "outputs:", "  output0: float32[1x5]"]
    assert lines[5].startswith(f"constants: {len(lib.params)} (")
    calls = [k["func"] for k in lib.graph["kernels"]]
    names = list(dict.fromkeys(calls))
    assert lines[6] == f"kernels: {len(names)} functions, {len(calls)} calls"
    listed = [re.split(r"\s+", line.strip()) for line in lines[7:]]
    assert listed == [[n, f"x{calls.count(n)}"] for n in names]
    dot = cli.ok(cli("inspect", so, "--format", "dot")).stdout
    assert dot.startswith('digraph "kiln model" {')
    assert all(f'label="{n}\\n' in dot for n in names)


def test_stage_and_format_errors(cli, tiny, compiled, tmp_path):
    path, _ = tiny
    so, _ = compiled
    cli.error(cli("inspect", path, "--stage", "lowered"), 2,
              "unknown --stage 'lowered'; the stages are imported, optimized, fused")
    cli.error(cli("inspect", path, "--format", "jpeg"), 2,
              "unknown --format 'jpeg'; the formats are text, dot, svg, png")
    cli.error(cli("inspect", path, "--format", "png"), 2,
              "--format png writes binary data: give -o FILE")
    cli.error(cli("inspect", so, "--stage", "fused"), 2,
              "--stage applies to model files (.onnx, .pt2);", "is a compiled library")
    cli.error(cli("inspect", tmp_path / "absent.onnx"), 2, "absent.onnx: no such file")
    cli.error(cli("inspect", path, "--format", "dot", "-o", tmp_path / "no" / "g.dot"), 2,
              "directory", "does not exist")


def test_junk_library_is_one_line_like_run(cli, tmp_path):
    # the same loader and message as `kiln run` (test_run_library_errors)
    (tmp_path / "fake.so").write_text("not an ELF file")
    cli.error(cli("inspect", tmp_path / "fake.so"), 2, "fake.so",
              "not a shared library (15 bytes, too short for an ELF header)")


def test_png_without_dot_says_how_to_get_it(cli, tiny, tmp_path):
    path, _ = tiny
    out = tmp_path / "g.png"
    # PATH holds an empty directory only: no `dot` (python is run by its full path)
    result = cli("inspect", path, "--format", "png", "-o", out, env={"PATH": str(tmp_path)})
    cli.error(result, 1, "--format png needs Graphviz's `dot` program, which is not on PATH: "
                         "install it with `apt-get install graphviz`, or use --format dot")
    assert not out.exists()


@pytest.mark.skipif(not HAVE_DOT, reason="Graphviz's dot is not installed "
                                         "(apt-get install graphviz)")
def test_png_and_svg_with_dot(cli, tiny, compiled, tmp_path):
    path, _ = tiny
    png = tmp_path / "fused.png"
    cli.ok(cli("inspect", path, "--stage", "fused", "--format", "png", "-o", png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = cli.ok(cli("inspect", compiled[0], "--format", "svg")).stdout
    assert "<svg" in svg

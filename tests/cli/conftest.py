"""Shared fixtures for the CLI tests: small model files written once per session, and `cli`,
which runs `kiln` in a subprocess and checks its output and one-line errors.

Tolerance (stated, not tuned): float32 outputs may differ from the reference (ONNX's reference
evaluator, eager PyTorch) by at most 1e-4 x max|reference|, the bound of the model tests.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

TOL = 1e-4
IMAGE = (1, 3, 8, 8)          # the tiny models' input
CLASSES = 5


class KilnCLI:
    """The `cli` fixture: cli(ARGS...) runs `python -m kiln.cli ARGS` (what the console script
    runs) in a subprocess and returns the CompletedProcess (text stdout/stderr); cli.ok,
    cli.error and cli.close check what it did.

    Example:
        cli.error(cli("compile", "nope.onnx", "-o", "x.so"), 2, "nope.onnx: no such model file")
    """

    def __call__(self, *args, cwd=None, env=None, timeout=300):
        """`env` adds to (or, with None values, removes from) this process's environment."""
        full_env = dict(os.environ)
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        return subprocess.run([sys.executable, "-m", "kiln.cli", *map(str, args)], cwd=cwd,
                              env=full_env, capture_output=True, text=True, timeout=timeout)

    @staticmethod
    def ok(result):
        """The command succeeded; on failure show everything it printed."""
        assert result.returncode == 0, (f"exit {result.returncode}\nstdout:\n{result.stdout}\n"
                                        f"stderr:\n{result.stderr}")
        return result

    @staticmethod
    def error(result, status, *fragments):
        """The command failed with `status`, printed exactly one `kiln: error:` line holding
        every fragment, no traceback, and nothing on stderr but `kiln...` lines; returns the
        error line."""
        err = result.stderr
        assert result.returncode == status, f"exit {result.returncode} != {status}\n{err}"
        assert "Traceback" not in err, err
        lines = err.strip().splitlines()
        errors = [line for line in lines if line.startswith("kiln: error: ")]
        assert len(errors) == 1, f"expected one error line:\n{err}"
        assert all(line.startswith("kiln") for line in lines), f"stray stderr output:\n{err}"
        for fragment in fragments:
            assert fragment in errors[0], f"{fragment!r} not in {errors[0]!r}"
        return errors[0]

    @staticmethod
    def close(got, want, what="output"):
        """Shapes and dtypes equal; max abs error within TOL x max|want|."""
        assert got.shape == want.shape and got.dtype == want.dtype, \
            f"{what}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
        scale = max(float(np.abs(want).max()), 1e-30)
        err = float(np.abs(got.astype(np.float64) - want).max())
        assert err <= TOL * scale, f"{what}: max abs error {err:.3g} > {TOL} x {scale:.3g}"


@pytest.fixture(scope="session")
def cli():
    """Runs kiln in a subprocess and checks the result (see KilnCLI)."""
    return KilnCLI()


# ---------------------------------------------------------------------------------- ONNX models
def _conv_net(batch_dim=1):
    """Conv(3->4, 3x3, pad 1) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(4->5), seeded."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((4, 3, 3, 3)).astype("float32"),
               "b": rng.standard_normal(4).astype("float32"),
               "fc_w": rng.standard_normal((CLASSES, 4)).astype("float32"),
               "fc_b": rng.standard_normal(CLASSES).astype("float32")}
    nodes = [helper.make_node("Conv", ["data", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1, name="fc")]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("data", TensorProto.FLOAT,
                                                      [batch_dim, *IMAGE[1:]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch_dim, CLASSES])],
        [numpy_helper.from_array(a, n) for n, a in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _unsupported_op():
    """An ONNX op type kiln's importer has no converter for (from its registry)."""
    from kiln.frontend.onnx import supported_ops
    have = set(supported_ops())
    for op in ("GlobalLpPool", "MaxRoiPool", "TfIdfVectorizer"):
        if op not in have:
            return op
    pytest.fail("every candidate op is supported now: pick another for the error test")


def _unsupported_net(op):
    import onnx
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node(op, ["r"], ["y"], name="the_unsupported_node")]
    graph = helper.make_graph(nodes, "unsupported",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                              [helper.make_value_info("y", onnx.TypeProto())])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A directory with tiny.onnx, dynamic.onnx (batch dimension "N") and unsupported.onnx."""
    import onnx
    d = tmp_path_factory.mktemp("cli_models")
    onnx.save(_conv_net(), str(d / "tiny.onnx"))
    onnx.save(_conv_net("N"), str(d / "dynamic.onnx"))
    op = _unsupported_op()
    onnx.save(_unsupported_net(op), str(d / "unsupported.onnx"))
    (d / "unsupported_op.txt").write_text(op)
    return d


@pytest.fixture(scope="session")
def onnx_reference(model_dir):
    """reference(x) -> the tiny ONNX model's logits from onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator
    evaluator = ReferenceEvaluator(str(model_dir / "tiny.onnx"))
    return lambda x: evaluator.run(None, {"data": x})[0]


@pytest.fixture(scope="session")
def image():
    return np.random.default_rng(1).standard_normal(IMAGE).astype("float32")


@pytest.fixture(scope="session")
def compiled(cli, model_dir):
    """(path of tiny.so, the CompletedProcess of `kiln compile tiny.onnx -o tiny.so`)."""
    out = model_dir / "tiny.so"
    result = cli.ok(cli("compile", model_dir / "tiny.onnx", "-o", out))
    return out, result


# ---------------------------------------------------------------------------------- torch model
@pytest.fixture(scope="session")
def pt2_model(tmp_path_factory):
    """(path of tiny.pt2, the eager module, its example input): a saved torch.export program."""
    torch = pytest.importorskip("torch")

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4 * 8 * 8, CLASSES)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).flatten(1))

    torch.manual_seed(0)
    model = Tiny().eval()
    x = torch.randn(*IMAGE)
    path = tmp_path_factory.mktemp("cli_pt2") / "tiny.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(path))
    return path, model, x

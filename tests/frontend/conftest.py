"""One helper for frontend tests: import a model, compile it, run it, compare with the framework.

Tolerances (stated, not tuned): float32 outputs may differ from PyTorch by at most
1e-4 x max|reference| (the issue's bound for whole models); float64 by 1e-10 x max|reference|;
integer and bool outputs must be equal.
"""
import numpy as np
import pytest
import torch

TOL = {"float32": 1e-4, "float64": 1e-10}


def pytest_configure(config):
    # torch.export's own deprecation noise, once per export
    config.addinivalue_line("filterwarnings", "ignore:.*LeafSpec.*:FutureWarning")


def to_numpy_list(out):
    """A torch result (tensor, or nested tuple/list of them) as a flat list of numpy arrays."""
    if isinstance(out, torch.Tensor):
        return [out.detach().numpy()]
    flat = []
    for o in out:
        flat += to_numpy_list(o)
    return flat


def run_kiln(mod, params, inputs):
    """Compile mod with params and run it on inputs (positional, in main's order)."""
    import kiln
    import kiln.runtime
    lib = kiln.compile(mod, target="llvm", params=params)
    m = kiln.runtime.GraphExecutor(lib)
    names = [p.name_hint for p in mod["main"].params if p.name_hint not in params]
    m.run(**{n: np.ascontiguousarray(x) for n, x in zip(names, inputs)})
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def assert_close(got, want, tol=None, what="output"):
    """Max abs error within tol x max|want| (float), equality otherwise; shapes and dtypes
    must match exactly."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return 0.0
    tol = TOL[str(want.dtype)] if tol is None else tol
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite, err_msg=f"{what}: inf/nan pattern")
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=f"{what}: inf/nan values")
    if not finite.any():
        return 0.0
    scale = max(float(np.abs(want[finite]).max()), np.finfo(want.dtype).tiny)
    err = float(np.abs(got[finite].astype(np.float64) - want[finite]).max())
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol:g} x {scale:.3g}"
    return err / scale


def verify_model(model, inputs, tol=None, input_names=None):
    """Import `model` (eval mode) on `inputs`, compile, run, compare every output with torch.

    Returns (mod, params, relative errors).
    """
    from kiln.frontend import from_pytorch
    inputs = tuple(inputs)
    with torch.no_grad():
        want = to_numpy_list(model(*inputs))
    mod, params = from_pytorch(model, inputs, input_names=input_names)
    got = run_kiln(mod, params, [x.numpy() for x in inputs])
    assert len(got) == len(want), f"{len(got)} outputs, torch has {len(want)}"
    errs = [assert_close(g, w, tol, f"output {i}") for i, (g, w) in enumerate(zip(got, want))]
    return mod, params, errs


@pytest.fixture
def verify():
    """verify(model, inputs, tol=None, input_names=None) -> (mod, params, relative errors)."""
    return verify_model


@pytest.fixture(name="run_kiln")
def run_kiln_fixture():
    """run_kiln(mod, params, inputs) -> list of numpy outputs."""
    return run_kiln

"""AutoTVM for GPU targets: the GPU templates (dense / matmul / batch_matmul / conv2d_nchw
".gpu") at random configs against numpy, their candidates measured through LocalBuilder /
LocalRunner on the OpenCL device, task extraction for target="opencl", and a tuned log applied
by kiln.compile. OpenCL runs on PoCL here: these check correctness and the measuring path, not
GPU speed. CUDA candidates are compiled by NVRTC and checked by ptxas."""
import numpy as np
import pytest
import torch

import kiln
from kiln.autotvm import Task
from kiln.autotvm.measure import LocalBuilder, LocalRunner, create_measure_batch, measure_option
from kiln.te.schedule import ScheduleError

RTOL = 1e-4


@pytest.fixture(autouse=True)
def unoptimized_pocl(monkeypatch):
    # Tuned tiles with virtual threads trip a miscompile of PoCL 3.1's optimizer (see
    # kiln/runtime/gpu/opencl.py); its build workers and runner inherit the setting.
    monkeypatch.setenv("KILN_OPENCL_BUILD_OPTIONS", "-cl-opt-disable")


CONV_ARGS = [[1, 8, 9, 11], [12, 8, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], "float32"]
TASKS = {
    "dense.gpu": [[37, 50], [45, 50], 45, "float32"],
    "matmul.gpu": [[50, 37], [50, 29], True, False, "float32"],
    "batch_matmul.gpu": [[3, 20, 17], [1, 33, 17], False, True, "float32"],
    "conv2d_nchw.gpu": CONV_ARGS,
    "group_conv2d_nchw.gpu": [[1, 8, 10, 9], [12, 2, 3, 3], [2, 1], [1, 0, 1, 2], [1, 1],
                              "float32"],
    "depthwise_conv2d_nchw.gpu": [[1, 6, 11, 13], [12, 1, 3, 3], [1, 2], [1, 1, 1, 1], [2, 1],
                                  "float32"],
}


def _reference(name, arrays):
    a, b = (x.astype("float64") for x in arrays)
    if name == "dense.gpu":
        return a @ b.T
    if name == "matmul.gpu":
        return a.T @ b
    if name == "batch_matmul.gpu":
        return a @ b.transpose(0, 2, 1)
    _, _, strides, (top, left, bottom, right), dilation, _ = TASKS[name]
    padded = np.pad(a, ((0, 0), (0, 0), (top, bottom), (left, right)))
    return torch.nn.functional.conv2d(torch.from_numpy(padded), torch.from_numpy(b),
                                      stride=strides, dilation=dilation,
                                      groups=a.shape[1] // b.shape[1]).numpy()


@pytest.mark.parametrize("name", sorted(TASKS))
def test_random_configs_match_numpy(opencl_device, name):
    task = Task(name, TASKS[name], "opencl")
    space = task.config_space
    rng = np.random.default_rng(0)
    indices = [task.default_config().index] + [int(i) for i in rng.integers(0, len(space), 15)]
    inputs = [rng.standard_normal(s).astype("float32") for s in TASKS[name][:2]]
    ref = _reference(name, inputs)
    ran = refused = 0
    for index in indices:
        s, tensors = task.instantiate(space.get(index))
        try:
            with task.target:
                mod = kiln.build(s, tensors, target="opencl")
        except ScheduleError as err:
            # a block past the work-group's threads or local memory: the tuner skips it
            assert "allows" in str(err), err
            refused += 1
            continue
        args = [kiln.nd.array(x, device=opencl_device) for x in inputs]
        out = kiln.nd.empty(ref.shape, "float32", opencl_device)
        mod(*args, out)
        np.testing.assert_allclose(out.numpy(), ref, rtol=RTOL, atol=RTOL * np.abs(ref).max(),
                                   err_msg=f"{name} config {index}: {space.get(index)}")
        ran += 1
    assert ran >= 6, f"only {ran} of {len(indices)} configs built ({refused} refused)"


def test_the_default_config_is_the_heuristic_tile():
    from kiln import te, topi
    from kiln.target import Target
    from kiln.topi.gpu.dense import default_tile
    from kiln.autotvm.templates.gpu.dense import dense_values
    task = Task("dense.gpu", [[128, 768], [3072, 768], 3072, "float32"], "opencl")
    x, w = te.placeholder((128, 768), name="x"), te.placeholder((3072, 768), name="w")
    with Target("opencl"):
        assert dense_values(task.default_config()) == default_tile(topi.nn.dense(x, w).op)
    # cut to an output smaller than the heuristic's block
    small = Task("dense.gpu", [[1, 64], [10, 64], 10, "float32"], "opencl").default_config()
    assert small["tile_y"].size == [-1, 1, 1, 1] and small["tile_x"].size[-2] <= 8


def test_candidates_are_measured_on_the_opencl_device(opencl_device):
    task = Task("conv2d_nchw.gpu", CONV_ARGS, "opencl")
    space = task.config_space
    default = task.default_config()
    # 8 x 8 x 8 threads: past the opencl target's default of 256 work-items per group
    too_big = dict(default.to_json()["knobs"])
    too_big.update(tile_f=[-1, 1, 8, 1], tile_y=[-1, 1, 8, 1], tile_x=[-1, 1, 8, 1])
    configs = [default, space.get(space.index_of(too_big)), space.get(len(space) // 3)]
    option = measure_option(builder=LocalBuilder(timeout=60, n_parallel=1),
                            runner=LocalRunner(number=2, repeat=2, timeout=60,
                                               check_correctness=True))
    with create_measure_batch(task, option) as measure:
        results = measure(configs)
    ok, refused, other = results
    assert ok.status == "ok" and len(ok.costs) == 2 and min(ok.costs) > 0, ok
    assert refused.status == "compile_error" and "512 threads per block" in refused.message, refused
    assert other.status in ("ok", "compile_error"), other
    if other.status == "ok":
        assert "not checked" not in other.message


class _ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16 * 10 * 10, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def _conv_kernels(lib) -> list:
    kernels = lib.module.get_source().split("__kernel ")[1:]
    conv = [k for k in kernels if "conv2d" in k.split("(")[0]]
    assert conv, kernels
    return conv


def test_tune_an_opencl_model_and_compile_with_the_log(opencl_device, tmp_path):
    from kiln.autotvm import apply_history_best, extract_tasks, load_records, tune_model
    from kiln.frontend import from_pytorch
    from kiln.runtime import GraphExecutor
    torch.manual_seed(0)
    model = _ConvNet().eval()
    x = torch.randn(1, 8, 10, 10)
    mod, params = from_pytorch(model, (x,))
    tasks = extract_tasks(mod, params, target="opencl")
    assert sorted(t.name for t in tasks) == ["conv2d_nchw.gpu", "dense.gpu"]
    log = tmp_path / "tune.jsonl"
    tune_model(mod, params, target="opencl", trials_per_task=4, log_file=str(log),
               tuner="random", seed=0, select_top=1, progress=None)
    assert any(inp.in_model for inp, _ in load_records(str(log)))   # timed in the model too
    with apply_history_best(str(log)) as ctx:
        lib = kiln.compile(mod, target="opencl", params=params)
    assert not ctx.untuned
    # the tuned conv runs the direct schedule (its tiles in local memory); untuned, the generic
    assert all("__local float" in k for k in _conv_kernels(lib))
    untuned = kiln.compile(mod, target="opencl", params=params)
    assert not any("__local float" in k for k in _conv_kernels(untuned))
    m = GraphExecutor(lib)
    (name,) = [p.name_hint for p in mod["main"].params if p.name_hint not in params]
    m.run(**{name: x.numpy()})
    ref = model(x).detach().numpy()
    got = m.get_output(0).numpy()
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=RTOL * np.abs(ref).max())


def test_tuned_cuda_candidates_pass_ptxas(ptxas):
    task = Task("conv2d_nchw.gpu", [[1, 64, 56, 56], [64, 64, 3, 3], [1, 1], [1, 1, 1, 1],
                                    [1, 1], "float32"], "cuda")
    knobs = dict(task.default_config().to_json()["knobs"])
    knobs.update(tile_f=[-1, 2, 8, 2], tile_y=[-1, 1, 4, 2], tile_x=[-1, 1, 8, 2],
                 tile_rc=[-1, 16], auto_unroll_max_step=512)
    _assert_ptxas_clean(task, task.config_space.get(task.config_space.index_of(knobs)))


@pytest.mark.parametrize("name,args", [
    ("depthwise_conv2d_nchw.gpu", [[1, 96, 56, 56], [96, 1, 3, 3], [2, 2], [1, 1, 1, 1],
                                   [1, 1], "float32"]),
    ("dense.gpu", [[128, 768], [3072, 768], 3072, "float32"])])
def test_default_cuda_candidates_pass_ptxas(ptxas, name, args):
    task = Task(name, args, "cuda")
    _assert_ptxas_clean(task, task.default_config())


def _assert_ptxas_clean(task, config):
    """The candidate compiles through NVRTC, and ptxas (sm_80) reports no spills and at most
    48 KiB of shared memory for each kernel."""
    from kiln.codegen.cuda.nvrtc import ptxas_report
    s, tensors = task.instantiate(config)
    with task.target:
        mod = kiln.build(s, tensors, target="cuda")
    report = ptxas_report(mod.get_source("ptx"), "sm_80")
    assert report
    for res in report.values():
        assert res.spill_stores == 0 and res.shared_bytes <= 48 * 1024, res

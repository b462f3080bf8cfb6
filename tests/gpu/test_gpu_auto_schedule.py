"""The auto-scheduler's GPU sketch rules on OpenCL (PoCL where there is no GPU: correctness,
not speed): sampled programs equal PyTorch, a printed sketch, and a model tuned and compiled."""
import random

import numpy as np
import pytest
import torch

import kiln
from kiln.auto_schedule import ComputeDAG, Decisions, replay
from kiln.auto_schedule.sketch_gpu import annotate_gpu, generate_gpu_sketches
from kiln.testing import te_kernels
from kiln.testing.te_kernels import SIZES, reference

PER_KERNEL = 4


@pytest.mark.parametrize("name", sorted(te_kernels.KERNELS))
def test_sampled_gpu_programs_equal_pytorch_on_opencl(name, opencl_device):
    rng = random.Random(name)
    for trial in range(PER_KERNEL):
        sizes = {k: rng.randint(lo, hi) for k, (lo, hi) in SIZES[name].items()}
        inputs, outputs = te_kernels.KERNELS[name](**sizes)
        dag = ComputeDAG(outputs)
        (sketch,) = generate_gpu_sketches(dag)
        program = annotate_gpu(dag, sketch, Decisions(rng=rng.random()), 256)
        module = kiln.build(replay(outputs, program).schedule, inputs + outputs,
                            target="opencl")
        data = np.random.default_rng(trial)
        arrays = [data.standard_normal([int(d) for d in t.shape]).astype("float32")
                  for t in inputs]
        out = kiln.nd.empty([int(d) for d in outputs[0].shape], "float32", opencl_device)
        module(*[kiln.nd.array(a, device=opencl_device) for a in arrays], out)
        np.testing.assert_allclose(out.numpy(), reference(name, arrays).numpy(), rtol=1e-4,
                                   atol=1e-4, err_msg=f"{name} {sizes}:\n{program}")


def test_a_gpu_matmul_is_tiled_over_blocks_threads_and_shared_memory():
    inputs, outputs = te_kernels.matmul(64, 48, 32)
    dag = ComputeDAG(outputs)
    (sketch,) = generate_gpu_sketches(dag)
    assert str(sketch) == "C:tile"
    values = {"tile:C.local:0": (2, 8, 4), "tile:C.local:1": (1, 16, 3),
              "rtile:C.local:0": (8,), "unroll:C.local": 0, "shared:C.local": 1}
    decisions = Decisions(values, rng=0)
    got = str(annotate_gpu(dag, sketch, decisions, 256)).splitlines()
    assert decisions.values == values
    assert got[:11] == [
        "cache_write C local",
        "split C i [2, 8, 4]",
        "split C j [1, 16, 3]",
        "reorder C i.outer.outer.outer j.outer.outer.outer i.outer.outer.inner "
        "j.outer.outer.inner i.outer.inner j.outer.inner i.inner j.inner",
        "fuse C i.outer.outer.outer j.outer.outer.outer",
        "fuse C i.outer.outer.inner j.outer.outer.inner",
        "fuse C i.outer.inner j.outer.inner",
        "fuse C i.inner j.inner",
        "bind C i.outer.outer.outer.j.outer.outer.outer.fused blockIdx.x",
        "bind C i.outer.outer.inner.j.outer.outer.inner.fused vthread",
        "bind C i.outer.inner.j.outer.inner.fused threadIdx.x",
    ]
    assert "compute_at C.local C i.outer.inner.j.outer.inner.fused" in got
    # A and B staged in shared memory at the outer reduction loop, copied by the 128 threads
    assert sum(line.startswith("cache_read ") for line in got) == 2
    assert sum(line.endswith("threadIdx.x") for line in got) == 3


def test_a_model_auto_scheduled_for_opencl_is_right(opencl_device, tmp_path):
    from kiln.autotvm import apply_history_best, load_records, tune_model
    from kiln.frontend import from_pytorch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(),
                                torch.nn.Softmax(-1)).eval()
    x = torch.randn(16, 24)
    mod, params = from_pytorch(model, (x,))
    log = tmp_path / "gpu.jsonl"
    tune_model(mod, params, target="opencl", trials_per_task=2, log_file=str(log),
               method="auto", seed=0, progress=None)
    records = list(load_records(str(log)))
    assert records and all(r.status == "ok" for _, r in records), \
        [r.message for _, r in records]
    with apply_history_best(str(log)):
        lib = kiln.compile(mod, target="opencl", params=params)
    ex = kiln.runtime.GraphExecutor(lib, opencl_device)
    ex.set_input(ex.get_input_names()[0], x.numpy())
    ex.run()
    with torch.no_grad():
        np.testing.assert_allclose(ex.get_output(0).numpy(), model(x).numpy(), rtol=1e-5,
                                   atol=1e-6)

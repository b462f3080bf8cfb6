"""Every program the sketch rules sample is legal: it lowers, and it computes what the
computation means (numpy / PyTorch), for random sizes, sketches and decisions."""
import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln
from kiln.auto_schedule import ComputeDAG, Decisions, annotate, generate_sketches, replay
import as_kernels

LOWERED_PER_KERNEL = 112          # 9 kernels: a thousand programs lowered


def _reference(name, arrays):
    t = [torch.from_numpy(a) for a in arrays]
    if name == "matmul":
        return t[0] @ t[1]
    if name == "matmul_bias_relu":
        return torch.relu(t[0] @ t[1] + t[2])
    if name == "softmax":
        return torch.softmax(t[0], -1)
    if name == "layer_norm":
        return torch.nn.functional.layer_norm(t[0], t[0].shape[-1:], t[1], t[2], 1e-5)
    if name == "max_pool":
        return torch.nn.functional.max_pool2d(t[0], 3, 2, 1)
    if name == "conv":
        return torch.nn.functional.conv2d(t[0], t[1], padding=1)
    if name == "row_sum":
        return t[0].sum(-1)
    if name == "transformed_matmul":
        return (t[0][:, :-1] + t[0][:, 1:]) @ t[1]
    if name == "gelu_chain":
        return t[0] * 0.5 * (1.0 + torch.tanh(t[0] * 0.79788))
    raise KeyError(name)


SIZES = {"matmul": dict(n=(1, 40), m=(1, 40), k=(1, 40)),
         "matmul_bias_relu": dict(n=(1, 40), m=(1, 40), k=(1, 40)),
         "softmax": dict(rows=(1, 12), cols=(1, 80)),
         "layer_norm": dict(rows=(1, 12), cols=(2, 80)),
         "max_pool": dict(size=(3, 14), channels=(1, 6)),
         "conv": dict(size=(3, 10), cin=(1, 6), cout=(1, 9)),
         "row_sum": dict(rows=(1, 6), cols=(1, 400)),
         "gelu_chain": dict(n=(1, 20), m=(1, 70)),
         "transformed_matmul": dict(n=(1, 30), m=(1, 30), k=(1, 30))}


@pytest.mark.parametrize("name", sorted(as_kernels.KERNELS))
def test_every_sampled_program_lowers(name):
    rng = random.Random(name)
    for trial in range(LOWERED_PER_KERNEL):
        # sizes drawn here rather than by hypothesis: a thousand lowerings in one test
        sizes = {k: rng.randint(lo, hi) for k, (lo, hi) in SIZES[name].items()}
        inputs, outputs = as_kernels.KERNELS[name](**sizes)
        dag = ComputeDAG(outputs)
        sketches = generate_sketches(dag)
        sketch = sketches[trial % len(sketches)]
        program = annotate(dag, sketch, Decisions(rng=rng.random()))
        try:
            kiln.lower(replay(outputs, program).schedule, inputs + outputs)
        except Exception as e:
            raise AssertionError(f"{name} {sizes} sketch {sketch}:\n{program}") from e


@st.composite
def _cases(draw):
    name = draw(st.sampled_from(sorted(as_kernels.KERNELS)))
    sizes = {k: draw(st.integers(lo, hi)) for k, (lo, hi) in SIZES[name].items()}
    return name, sizes, draw(st.integers(0, 2 ** 30))


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_sampled_programs_compute_what_pytorch_computes(case):
    name, sizes, seed = case
    inputs, outputs = as_kernels.KERNELS[name](**sizes)
    dag = ComputeDAG(outputs)
    sketches = generate_sketches(dag)
    rng = random.Random(seed)
    program = annotate(dag, sketches[rng.randrange(len(sketches))], Decisions(rng=seed))
    module = kiln.build(replay(outputs, program).schedule, inputs + outputs, target="llvm")
    data = np.random.default_rng(seed)
    arrays = [data.standard_normal([int(d) for d in t.shape]).astype("float32") for t in inputs]
    out = np.zeros([int(d) for d in outputs[0].shape], "float32")
    module(*arrays, out)
    want = _reference(name, arrays).numpy()
    # float32 sums of up to 400 terms in another order than PyTorch's
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4,
                               err_msg=f"{name} {sizes}:\n{program}")

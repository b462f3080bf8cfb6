"""Every program the sketch rules sample is legal: it lowers, and it computes what the
computation means (numpy / PyTorch), for random sizes, sketches and decisions."""
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln
from kiln.auto_schedule import ComputeDAG, Decisions, annotate, generate_sketches, replay
from kiln.testing import te_kernels
from kiln.testing.te_kernels import SIZES, reference

LOWERED_PER_KERNEL = 112          # 9 kernels: a thousand programs lowered


@pytest.mark.parametrize("name", sorted(te_kernels.KERNELS))
def test_every_sampled_program_lowers(name):
    rng = random.Random(name)
    for trial in range(LOWERED_PER_KERNEL):
        # sizes drawn here rather than by hypothesis: a thousand lowerings in one test
        sizes = {k: rng.randint(lo, hi) for k, (lo, hi) in SIZES[name].items()}
        inputs, outputs = te_kernels.KERNELS[name](**sizes)
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
    name = draw(st.sampled_from(sorted(te_kernels.KERNELS)))
    sizes = {k: draw(st.integers(lo, hi)) for k, (lo, hi) in SIZES[name].items()}
    return name, sizes, draw(st.integers(0, 2 ** 30))


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_sampled_programs_compute_what_pytorch_computes(case):
    name, sizes, seed = case
    inputs, outputs = te_kernels.KERNELS[name](**sizes)
    dag = ComputeDAG(outputs)
    sketches = generate_sketches(dag)
    rng = random.Random(seed)
    program = annotate(dag, sketches[rng.randrange(len(sketches))], Decisions(rng=seed))
    module = kiln.build(replay(outputs, program).schedule, inputs + outputs, target="llvm")
    data = np.random.default_rng(seed)
    arrays = [data.standard_normal([int(d) for d in t.shape]).astype("float32") for t in inputs]
    out = np.zeros([int(d) for d in outputs[0].shape], "float32")
    module(*arrays, out)
    want = reference(name, arrays).numpy()
    # float32 sums of up to 400 terms in another order than PyTorch's
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4,
                               err_msg=f"{name} {sizes}:\n{program}")

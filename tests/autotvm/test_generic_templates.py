"""The generic templates of kiln.autotvm.testing ("generic.dense", "generic.conv2d": the
search spaces of bench/tuner_compare.py, TVM-tutorial style): their spaces are large, and every
config computes the same values as numpy / torch.

Tolerance: float32 sums of <= 144 products of uniform(-1, 1) values: rtol 1e-5, atol 1e-5.
"""
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
import kiln.autotvm.testing  # noqa: F401  (registers the templates)
from kiln.autotvm.task import Task
from kiln.target import Target

TOL = 1e-5


def _build_run(task, config, arrays):
    s, tensors = task.instantiate(config.to_json())
    with Target("llvm"):
        f = kiln.build(s, tensors, target="llvm")
    out = np.zeros([int(d) for d in tensors[-1].shape], "float32")
    f(*arrays, out)
    return out


def _configs(task, n, seed):
    rng = random.Random(seed)
    space = task.config_space
    return [task.default_config()] + [space.get(rng.randrange(space.size)) for _ in range(n)]


def test_the_figure12_spaces_are_large():
    target = Target("llvm")
    dense = Task("generic.dense", (128, 3072, 768), target).config_space
    conv = Task("generic.conv2d", (128, 128, 28, 3, 1), target).config_space
    assert dense.size > 10 ** 6 and conv.size > 5 * 10 ** 5
    assert set(dense.knobs) == {"tile_y", "tile_x", "tile_k", "order", "ann", "ann_out"}
    assert {k.kind for k in conv.knobs.values()} == {"split", "reorder", "annotate"}


@pytest.mark.parametrize("seed", [0, 1])
def test_generic_dense_configs_match_numpy(seed):
    # 24 x 40 x 36: ragged-free factors of every kind (2, 3, 5) and several loop orders.
    task = Task("generic.dense", (24, 40, 36), Target("llvm"))
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (24, 36)).astype("float32")
    b = rng.uniform(-1, 1, (36, 40)).astype("float32")
    for config in _configs(task, 6, seed):
        np.testing.assert_allclose(_build_run(task, config, [a, b]), a @ b, rtol=TOL, atol=TOL,
                                   err_msg=str(config))


@pytest.mark.parametrize("seed", [0, 1])
def test_generic_conv2d_configs_match_torch(seed):
    task = Task("generic.conv2d", (16, 12, 10, 3, 1), Target("llvm"))
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (1, 16, 10, 10)).astype("float32")
    w = rng.uniform(-1, 1, (12, 16, 3, 3)).astype("float32")
    ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    for config in _configs(task, 6, seed):
        np.testing.assert_allclose(_build_run(task, config, [x, w]), ref, rtol=TOL, atol=TOL,
                                   err_msg=str(config))


def test_generic_templates_reject_bad_sizes():
    with pytest.raises(ValueError, match="generic.dense: k must be a positive int"):
        Task("generic.dense", (4, 4, 0), Target("llvm")).config_space
    with pytest.raises(ValueError, match="generic.conv2d: size must be a positive int"):
        Task("generic.conv2d", (4, 4, 2.5, 3, 1), Target("llvm")).config_space

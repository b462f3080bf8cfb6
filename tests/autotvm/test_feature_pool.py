"""FeaturePool: itervar features computed in worker processes are the numbers computed in
place, configs that do not lower come back as None, and XGBTuner searches exactly as without
the pool."""
import numpy as np
import pytest

import fault_templates  # noqa: F401  (registers "test.fault")
import kiln.autotvm.testing  # noqa: F401  (registers test.matmul)
from kiln.autotvm import XGBTuner
from kiln.autotvm.record import MeasureResult
from kiln.autotvm.task import Task
from kiln.autotvm.tuner import itervar_features
from kiln.autotvm.tuner.feature_pool import MIN_CHUNK, FeaturePool

pytestmark = pytest.mark.xdist_group("feature_pool")


@pytest.fixture(scope="module")
def pool():
    with FeaturePool(2) as p:
        yield p


def test_features_from_the_pool_are_the_same_numbers(pool):
    task = Task("test.matmul", (32, 32, 32, "float32"))
    indices = list(range(0, len(task.config_space), 150))
    rows = pool.compute(task, indices)
    assert len(rows) == len(indices)
    for i, row in zip(indices, rows):
        want = itervar_features(task, task.config_space.get(i))
        assert row.dtype == np.float32 and np.array_equal(row, want), i


def test_a_config_that_does_not_lower_comes_back_as_none(pool):
    task = Task("test.fault", (64,))
    modes = fault_templates.MODES
    rows = pool.compute(task, [modes.index(m) for m in ("none", "raise", "bad_split", "none")])
    assert rows[0] is not None and np.array_equal(rows[0], rows[3])
    assert rows[1] is None and rows[2] is None


def test_small_batches_stay_in_place():
    assert not FeaturePool(2).worth_it(2 * MIN_CHUNK - 1)
    assert FeaturePool(2).worth_it(2 * MIN_CHUNK)
    assert not FeaturePool(1).worth_it(1000)
    with pytest.raises(ValueError, match="n_workers"):
        FeaturePool(0)


def test_xgb_tuner_searches_the_same_with_the_pool(pool):
    task = Task("test.matmul", (16, 32, 16, "float32"))

    def fake(configs):              # a cost that depends on the knobs, so the model learns
        return [MeasureResult((1e-6 * (1 + (c.index * 7919) % 97),), "ok") for c in configs]
    fake.batch_size = 8

    def search(feature_pool):
        tuner = XGBTuner(task, seed=5, plan_size=16, first_fit=8, sa_parallel_size=32,
                         sa_n_iter=8, feature_pool=feature_pool)
        tuner.tune(40, measure_batch=fake)
        return tuner

    alone, pooled = search(None), search(pool)
    assert alone.fits >= 2
    assert sorted(alone.visited) == sorted(pooled.visited)
    assert alone.best_config.index == pooled.best_config.index
    assert alone._invalid == pooled._invalid

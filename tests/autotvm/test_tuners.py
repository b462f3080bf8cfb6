"""Tuners on fake measurements: the cost of a config is a known function of its knobs, so
nothing is compiled or timed; the features are taken from real lowered programs."""
import math
from collections import Counter

import numpy as np
import pytest

import kiln.autotvm.testing  # noqa: F401  (registers test.matmul)
from kiln import te
from kiln.autotvm.record import ApplyHistoryBest, MeasureResult, load_records
from kiln.autotvm.task import Task, get_config, template
from kiln.autotvm.tuner import (ITERVAR_LENGTH, GATuner, GridSearchTuner, RandomTuner,
                                SimulatedAnnealing, Tuner, TunerError, itervar_features,
                                knob_features)


# ------------------------------------------------------------------------------ fixtures
@template("test.tuner_vadd")
def vadd(n):
    """A small template: C = A + B over n, split in two, with an annotation and a knob."""
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    cfg = get_config()
    cfg.define_split("tile", C.op.axis[0], num_outputs=2)
    outer, inner = cfg["tile"].apply(s, C, C.op.axis[0])
    cfg.define_annotate("ann", [inner], policy="try_unroll_vec")
    cfg["ann"].apply(s, C, [inner])
    cfg.define_knob("par", [0, 1])
    if cfg["par"].val:
        s[C].parallel(outer)
    return s, [A, B, C]


MATMUL = Task("test.matmul", (64, 64, 64, "float32"))   # 12348 configs
VADD = Task("test.tuner_vadd", (16,))                   # 5 splits x 3 annotations x 2 = 30


def matmul_cost(cfg) -> float:
    """A landscape with structure: a bowl in log2 tile sizes, plus vectorization, unrolling and
    loop-order terms; the optimum is unique (tiles 4/16/8, order 1, vec, unroll 8)."""
    ty, tx, tk = (math.log2(cfg[k].size[-1]) for k in ("tile_y", "tile_x", "tile_k"))
    cost = 1.0 + 0.3 * (ty - 2) ** 2 + 0.5 * (tx - 4) ** 2 + 0.2 * (tk - 3) ** 2
    cost += {"vec": 0.0, "unroll": 1.0, "none": 2.0}[cfg["ann"].anns[1]]
    cost += 0.0 if cfg["ann"].anns[0] == "unroll" else 0.5
    cost += {0: 1.0, 8: 0.0, 32: 0.5}[cfg["auto_unroll"].val]
    cost += 0.0 if cfg["order"].perm == [1, 0, 2] else 0.7
    return cost * 1e-3


def vadd_cost(cfg):
    """vadd: None (a runtime error) for the unsplit configs, else a cost."""
    inner = cfg["tile"].size[-1]
    if inner == 1:
        return None
    return (1.0 + abs(math.log2(inner) - 3) + (0 if cfg["ann"].anns[0] == "vec" else 1)
            + 0.5 * cfg["par"].val) * 1e-6


class FakeBatch:
    """A measure batch per the contract: configs -> results, costs from a function."""

    def __init__(self, cost_fn, n_parallel=4):
        self.cost_fn = cost_fn
        self.n_parallel = n_parallel
        self.calls: list[list[int]] = []

    def __call__(self, configs):
        self.calls.append([c.index for c in configs])
        out = []
        for c in configs:
            cost = self.cost_fn(c)
            out.append(MeasureResult((), "runtime_error", "fake failure") if cost is None
                       else MeasureResult((cost,), "ok", all_cost=0.01, timestamp=1.0))
        return out

    @property
    def measured(self) -> list[int]:
        return [i for call in self.calls for i in call]


def make_tuner(kind, task, seed=0):
    if kind == "random":
        return RandomTuner(task, seed=seed)
    if kind == "grid":
        return GridSearchTuner(task)
    if kind == "ga":
        return GATuner(task, pop_size=12, elite_num=2, seed=seed)
    pytest.importorskip("xgboost")
    from kiln.autotvm.tuner import XGBTuner
    return XGBTuner(task, feature_type="knob", plan_size=8, seed=seed, sa_parallel_size=16,
                    sa_n_iter=20, num_boost_round=20)


KINDS = ["random", "grid", "ga", "xgb"]


# ------------------------------------------------------------------------------ the loop
@pytest.mark.parametrize("kind", KINDS)
def test_tune_measures_default_first_never_twice_and_logs(kind, tmp_path):
    log = tmp_path / "tune.jsonl"
    fake = FakeBatch(matmul_cost)
    tuner = make_tuner(kind, MATMUL).tune(30, log_file=str(log), measure_batch=fake)
    measured = fake.measured
    assert measured[0] == MATMUL.default_config().index and fake.calls[0] == [measured[0]]
    assert len(measured) == 30 == tuner.trials and len(set(measured)) == 30
    assert all(len(call) <= fake.n_parallel for call in fake.calls)
    records = list(load_records(log))
    assert [inp.config["index"] for inp, _ in records] == measured
    assert [inp.default for inp, _ in records] == [True] + [False] * 29
    assert all(inp.task_key == MATMUL.key for inp, _ in records)
    best = min(measured, key=lambda i: matmul_cost(MATMUL.config_space.get(i)))
    assert tuner.best_config.index == best
    # best_flops = task.flop / best cost, the FLOP count being 2 * 64^3
    assert tuner.best_flops == pytest.approx(2 * 64 ** 3 / matmul_cost(tuner.best_config))


@pytest.mark.parametrize("kind", ["random", "xgb"])
def test_tune_from_scratch_skips_the_default(kind):
    fake = FakeBatch(matmul_cost)
    default = MATMUL.default_config().index
    make_tuner(kind, MATMUL, seed=3).tune(12, measure_batch=fake, measure_default=False)
    assert len(fake.measured) == 12 and fake.calls[0] != [default]


def test_xgb_fits_early_then_as_measurements_double():
    pytest.importorskip("xgboost")
    from kiln.autotvm.tuner import XGBTuner
    fits = []
    assert XGBTuner(MATMUL)._fit_at == 32           # default: half a plan of 64
    tuner = XGBTuner(MATMUL, plan_size=32, first_fit=8, seed=0, sa_parallel_size=8, sa_n_iter=3,
                     num_boost_round=5)
    tuner.tune(80, measure_batch=FakeBatch(matmul_cost, n_parallel=4),
               callbacks=(lambda t, c, r: fits.append((t.trials, t.fits)),))
    first = {}
    for trials, n in fits:
        first.setdefault(n, trials)
    # the default, then batches of 4: 1, 5, 9, ... measured. Fitted at the first batch that
    # reaches 8 (9), then when the count doubles (18 -> 21, 42 -> 45), then every plan_size.
    assert [first[n] for n in (1, 2, 3, 4)] == [9, 21, 45, 77]


@pytest.mark.parametrize("kind", KINDS)
def test_resume_from_log_never_remeasures(kind, tmp_path):
    log = str(tmp_path / "tune.jsonl")
    first = FakeBatch(matmul_cost)
    make_tuner(kind, MATMUL, seed=1).tune(17, log_file=log, measure_batch=first)
    second = FakeBatch(matmul_cost)
    tuner = make_tuner(kind, MATMUL, seed=2).tune(40, log_file=log, measure_batch=second)
    assert len(first.measured) == 17 and len(second.measured) == 23
    assert not set(first.measured) & set(second.measured)     # default included
    assert tuner.trials == 40
    assert len(list(load_records(log))) == 40
    assert [inp.default for inp, _ in load_records(log)].count(True) == 1
    # a run asking for no more than the log holds measures nothing
    third = FakeBatch(matmul_cost)
    make_tuner(kind, MATMUL).tune(40, log_file=log, measure_batch=third)
    assert third.calls == []


@pytest.mark.parametrize("kind", ["random", "grid", "ga"])
def test_small_space_is_exhausted_once_and_failures_are_skipped(kind):
    fake = FakeBatch(vadd_cost, n_parallel=3)
    tuner = make_tuner(kind, VADD).tune(100, measure_batch=fake)
    assert sorted(fake.measured) == list(range(len(VADD.config_space)))
    best = min((i for i in fake.measured if vadd_cost(VADD.config_space.get(i)) is not None),
               key=lambda i: vadd_cost(VADD.config_space.get(i)))
    assert tuner.best_config.index == best
    assert tuner.best_config["tile"].size[-1] == 8 and tuner.best_config["ann"].anns == ["vec"]


def test_grid_search_goes_in_index_order():
    fake = FakeBatch(matmul_cost, n_parallel=5)
    GridSearchTuner(MATMUL).tune(21, measure_batch=fake)
    default = MATMUL.default_config().index
    assert fake.measured == [default] + list(range(20))


def test_random_tuner_is_seeded():
    runs = []
    for _ in range(2):
        fake = FakeBatch(matmul_cost)
        RandomTuner(MATMUL, seed=7).tune(20, measure_batch=fake)
        runs.append(fake.measured)
    other = FakeBatch(matmul_cost)
    RandomTuner(MATMUL, seed=8).tune(20, measure_batch=other)
    assert runs[0] == runs[1] and runs[0] != other.measured


def test_early_stopping_and_callbacks():
    seen = []
    fake = FakeBatch(lambda cfg: 1e-3, n_parallel=1)        # nothing beats the default
    tuner = RandomTuner(MATMUL, seed=0).tune(
        100, early_stopping=5, measure_batch=fake,
        callbacks=[lambda t, c, r: seen.append((t.trials, [x.index for x in c], r))])
    assert tuner.trials == 6 and tuner.best_trial == 1      # default + 5 without improvement
    assert [s[0] for s in seen] == [1, 2, 3, 4, 5, 6]
    assert [i for s in seen for i in s[1]] == fake.measured
    assert all(len(s[1]) == len(s[2]) and all(r.status == "ok" for r in s[2]) for s in seen)


def test_bad_measure_batch_is_reported():
    with pytest.raises(TunerError, match="2 results for 1 configs"):
        RandomTuner(MATMUL).tune(5, measure_batch=lambda cfgs: [MeasureResult((1.0,), "ok")] * 2)
    with pytest.raises(ValueError, match="n_trial"):
        RandomTuner(MATMUL).tune(-1, measure_batch=FakeBatch(matmul_cost))
    with pytest.raises(TypeError, match="callback"):
        RandomTuner(MATMUL).tune(5, measure_batch=FakeBatch(matmul_cost), callbacks=[3])


def test_ga_keeps_the_best():
    tuner = GATuner(MATMUL, pop_size=10, elite_num=2, seed=3)
    generations = []

    def check(t, configs, results):
        if t.generation > len(generations):
            generations.append(t.generation)
            best = max(t.scores, key=t.scores.get)
            # elitism: the best config measured so far is carried into the new generation
            assert t.elites[0] == best and best in t.population

    tuner.tune(60, measure_batch=FakeBatch(matmul_cost, n_parallel=4), callbacks=[check])
    assert len(generations) >= 3
    assert tuner.population[:2] == tuner.elites


# ------------------------------------------------------------------------------ features
def test_itervar_features_fixed_length_and_distinct():
    space = MATMUL.config_space
    base = space.index_of({"tile_y": [-1, 4], "tile_x": [-1, 16], "tile_k": [-1, 8],
                           "order": [0, 1, 2], "ann": ["none", "vec"], "auto_unroll": 0})
    point = space.point(base)
    variants = [base]
    for knob in range(len(point)):                 # change one knob at a time
        p = list(point)
        p[knob] = (p[knob] + 1) % list(space.knobs.values())[knob].size
        variants.append(space.index_of_point(p))
    feats = [itervar_features(MATMUL, i) for i in variants]
    feats.append(itervar_features(VADD, 3))        # another task: same length
    assert all(f.shape == (ITERVAR_LENGTH,) and f.dtype == np.float32 for f in feats)
    assert all(np.isfinite(f).all() for f in feats)
    keys = {f.tobytes() for f in feats}
    assert len(keys) == len(feats)                 # every knob change shows in the features
    np.testing.assert_array_equal(itervar_features(MATMUL, base), feats[0])   # deterministic


def test_itervar_features_read_the_program():
    cfg = VADD.config_space.index_of({"tile": [-1, 4], "ann": ["vec"], "par": 1})
    f = itervar_features(VADD, cfg)
    # global: 3 accesses (A, B loads and C store) per element x 16 elements = 48
    assert f[0] == pytest.approx(math.log2(1 + 48))
    # nest 0, slot 0 is the innermost loop: extent 4, vectorized; slot 1 the outer: parallel
    # (per loop: 6 numbers, 5 kinds, then 6 per buffer for 4 buffers)
    inner, outer = f[5:5 + 35], f[5 + 35:5 + 70]
    assert inner[0] == pytest.approx(math.log2(5)) and inner[6 + 2] == 1.0   # vectorized
    assert outer[0] == pytest.approx(math.log2(5)) and outer[6 + 1] == 1.0   # parallel
    assert inner[5] == outer[5] == 0.0                                       # no prefetch
    # buffer A at the inner loop: 4 accesses, 16 bytes touched, stride 1, read only
    a = inner[11:17]
    np.testing.assert_allclose(a, [math.log2(5), math.log2(17), 1.0, 1.0, 1.0, 0.0], rtol=1e-6)


def test_knob_features():
    space = MATMUL.config_space
    f = knob_features(space.get(0))
    assert f.shape == knob_features(space.get(space.size - 1)).shape
    assert not np.array_equal(f, knob_features(space.get(1)))


# ------------------------------------------------------------------------------ explorer
def test_simulated_annealing_finds_the_top_and_keeps_its_walkers():
    space = MATMUL.config_space
    target = space.point(space.size // 3)

    def score(indices):
        return np.array([-sum(abs(a - b) for a, b in zip(space.point(i), target))
                         for i in indices], dtype=float)

    sa = SimulatedAnnealing(space, parallel_size=16, n_iter=60, early_stop=0, seed=0)
    top = sa.find_maximums(score, 5, exclude=set())
    assert top[0] == space.size // 3 and len(set(top)) == 5
    walkers = list(sa.points)
    again = sa.find_maximums(score, 5, exclude={space.size // 3})
    assert space.size // 3 not in again and len(again) == 5
    assert sa.points != walkers                      # continued from the kept positions


# ------------------------------------------------------------------------------ XGB
def trials_to_reach(tuner, threshold, budget, step=8):
    """Trials until a config costing at most threshold is measured (budget if never):
    tune() is called again and again on the same tuner, `step` more trials each time."""
    fake = FakeBatch(matmul_cost, n_parallel=step)
    while tuner.trials < budget:
        tuner.tune(min(budget, tuner.trials + step), measure_batch=fake)
        if tuner.best_cost <= threshold:
            costs = [matmul_cost(MATMUL.config_space.get(i)) for i in fake.measured]
            return next(k + 1 for k, c in enumerate(costs) if c <= threshold)
    assert len(set(fake.measured)) == len(fake.measured) == budget
    return budget


def test_xgb_beats_random_on_a_structured_landscape():
    pytest.importorskip("xgboost")
    from kiln.autotvm.tuner import XGBTuner
    space = MATMUL.config_space
    costs = np.array([matmul_cost(space.get(i)) for i in range(space.size)])
    threshold = np.sort(costs)[int(0.002 * space.size)]    # the best 0.2% (~25 configs)
    budget, seeds = 200, (0, 1, 2)
    # itervar features (from the lowered programs), the default rank loss
    xgb = [trials_to_reach(XGBTuner(MATMUL, plan_size=16, seed=s, sa_parallel_size=16,
                                    sa_n_iter=20, num_boost_round=30), threshold, budget)
           for s in seeds]
    rnd = [trials_to_reach(RandomTuner(MATMUL, seed=s), threshold, budget) for s in seeds]
    # Measured: XGB ~31 trials (mean of 6 seeds), random ~169 (20 seeds, capped at 200; it
    # needs ~12348/26 = 475 on average uncapped). Asked: XGB within 40% of random's count.
    assert np.mean(xgb) <= 0.4 * np.mean(rnd), (xgb, rnd)


def test_xgb_transfer_learning_from_another_task(tmp_path):
    pytest.importorskip("xgboost")
    from kiln.autotvm.tuner import XGBTuner
    small = Task("test.matmul", (32, 32, 32, "float32"))
    log = str(tmp_path / "other.jsonl")
    RandomTuner(small, seed=0).tune(24, log_file=log, measure_batch=FakeBatch(matmul_cost))
    tuner = XGBTuner(MATMUL, plan_size=8, seed=0, sa_parallel_size=8, sa_n_iter=5,
                     num_boost_round=10)
    assert tuner.load_history(load_records(log)) == 24
    assert tuner.model is not None                 # fitted before any measurement
    fake = FakeBatch(matmul_cost)
    tuner.tune(9, measure_batch=fake)
    assert len(tuner.plan) == 8 and tuner.fits >= 1
    assert len(set(fake.measured)) == 9
    # records of the tuner's own task are not history (they resume through the log)
    assert XGBTuner(small, plan_size=8).load_history(load_records(log)) == 0


def test_diverse_pick_trades_rank_for_new_knob_values():
    from kiln.autotvm.space import ConfigSpace
    from kiln.autotvm.tuner.xgb_tuner import diverse_pick
    space = ConfigSpace()
    for name in "abc":
        space.define_knob(name, [1, 2, 3, 4])
    # ranked best first: three near-copies of the best (one knob changed each), then configs
    # that share no knob value with it
    best = space.index_of_point((0, 0, 0))
    copies = [space.index_of_point(p) for p in ((1, 0, 0), (0, 1, 0), (0, 0, 1))]
    fresh = [space.index_of_point(p) for p in ((2, 2, 2), (3, 3, 3))]
    ranked = [best] + copies + fresh
    # second pick: rank score 2/6 + 3 new values of 3, against 5/6 + 1/3 for the first copy
    assert diverse_pick(space, ranked, 2) == [best, fresh[0]]
    assert diverse_pick(space, ranked, 1) == [best]           # the top always comes first
    assert diverse_pick(space, ranked, 9) == ranked           # asked for all: all, in order
    # every pick distinct, always from the candidates
    rng = np.random.default_rng(0)
    for _ in range(20):
        cand = [int(i) for i in rng.choice(space.size, 12, replace=False)]
        got = diverse_pick(space, cand, 5)
        assert len(set(got)) == 5 and set(got) <= set(cand) and got[0] == cand[0]


def test_xgb_plans_a_diverse_batch():
    pytest.importorskip("xgboost")
    from kiln.autotvm.tuner import XGBTuner
    tuner = XGBTuner(MATMUL, feature_type="knob", plan_size=8, seed=0, sa_parallel_size=16,
                     sa_n_iter=10, num_boost_round=10)
    tuner.tune(20, measure_batch=FakeBatch(matmul_cost))
    assert tuner.fits >= 1 and len(tuner.plan) == 8 and len(set(tuner.plan)) == 8
    with pytest.raises(ValueError, match="diversity"):
        XGBTuner(MATMUL, diversity=0.5)


def test_xgb_rejects_bad_options():
    pytest.importorskip("xgboost")
    from kiln.autotvm.tuner import XGBTuner
    with pytest.raises(ValueError, match="feature_type"):
        XGBTuner(MATMUL, feature_type="curve")
    with pytest.raises(ValueError, match="loss_type"):
        XGBTuner(MATMUL, loss_type="hinge")


def test_tuner_base_needs_next_batch():
    with pytest.raises(NotImplementedError, match="next_batch"):
        Tuner(MATMUL).tune(3, measure_batch=FakeBatch(matmul_cost))


def test_real_measurement_through_measure_option(tmp_path):
    """The default path: tune() builds and times candidates in worker processes."""
    from kiln.autotvm.measure import LocalRunner, measure_option
    task = Task("test.matmul", (16, 16, 16, "float32"))
    log = str(tmp_path / "real.jsonl")
    option = measure_option(runner=LocalRunner(number=1, repeat=1, check_correctness=True))
    tuner = RandomTuner(task, seed=0).tune(4, measure_option=option, log_file=log)
    records = list(load_records(log))
    assert tuner.trials == 4 == len(records)
    assert [res.status for _, res in records] == ["ok"] * 4      # checked against the default
    assert tuner.best_flops > 0 and tuner.best_config is not None


def test_remeasuring_the_top_replaces_a_lucky_draw(tmp_path):
    # Every config's first measurement is its true cost, except config 7's, which is lucky.
    seen: dict[int, int] = {}

    def noisy(cfg):
        seen[cfg.index] = seen.get(cfg.index, 0) + 1
        true = matmul_cost(cfg)
        return true * 0.1 if cfg.index == 7 and seen[cfg.index] == 1 else true

    log = str(tmp_path / "t.jsonl")
    grid = GridSearchTuner(MATMUL)
    fake = FakeBatch(noisy)
    grid.tune(12, log_file=log, measure_batch=fake, remeasure_top=3, remeasure_rounds=2)
    searched = fake.calls[0] + [i for call in fake.calls[1:] for i in call
                                if i not in fake.calls[0]][:11]   # the default, then 0..10
    assert grid.trials == 12 and 7 in searched
    true_best = min(searched, key=lambda i: matmul_cost(MATMUL.config_space.get(i)))
    assert grid.best_config.index == true_best != 7
    assert grid.best_cost == matmul_cost(grid.best_config)
    # Config 7 (top by its lucky draw) was measured again; at the end the 3 best by median and
    # the default have 3 measurements each.
    counts = Counter(inp.config["index"] for inp, _ in load_records(log))
    median_top3 = sorted(searched, key=lambda i: matmul_cost(MATMUL.config_space.get(i)))[:3]
    assert counts[7] == 3 and counts[MATMUL.default_config().index] == 3
    assert all(counts[i] == 3 for i in median_top3)
    with ApplyHistoryBest(log) as ctx:
        assert ctx.query(MATMUL.key)["index"] == true_best
    # Resumed from the log: neither the search nor the re-measurement runs again.
    resumed = FakeBatch(noisy)
    again_tuner = GridSearchTuner(MATMUL).tune(12, log_file=log, measure_batch=resumed,
                                              remeasure_top=3, remeasure_rounds=2)
    assert resumed.calls == [] and again_tuner.best_config.index == true_best


def noisy_first(index):
    cost = matmul_cost(MATMUL.config_space.get(index))
    return cost * 0.1 if index == 7 else cost

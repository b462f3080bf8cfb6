"""XGBTuner: an XGBoost cost model ranks configs; simulated annealing finds the top-ranked.

The loop of the TVM paper §5.3: measure a few random configs; then fit the model on every
measurement (features -> FLOP/s, a pairwise-rank objective by default, since only the order of
configs matters), let the annealing explorer find the configs the model likes best among those
not measured yet, plan a diverse `plan_size` of them (`diverse_pick`) and measure them (with an
`epsilon` share of random picks, so a wrong model still sees new ground). The model is first
fitted after `first_fit` measurements (default: half a plan) and refitted each time they
double, until refits are `plan_size` measurements apart; each refit makes a new plan, and the
explorer's walkers carry over. Why half a plan: a trial costs a compile (~1 s), so fitting
sooner than TVM's full plan of 64 saves minutes per task; but a model of 8-16 measurements,
maximized over a space of 10^5-10^6 configs, sends the explorer to regions it knows nothing
about (measured on the generic conv2d of bench/tuner_compare.py: first fit at 8 or 16
measurements ended at 236-387 GFLOPS after 160 trials and trailed random search until
trial ~100; at 32 it led from trial ~50 on).

Transfer learning: `load_history(records)` adds the measurements of other tasks to the training
set, each task its own ranking group (so configs are only compared within a task); the itervar
features have one length for all programs, which is what makes this possible.

Example:
    >>> tuner = XGBTuner(task)                                         # doctest: +SKIP
    >>> tuner.load_history(load_records("other_tasks.jsonl"))          # doctest: +SKIP
    >>> tuner.tune(n_trial=500, log_file="tune.jsonl")                 # doctest: +SKIP
"""
from __future__ import annotations

import json
import logging
import random

import numpy as np

from .features import FeatureError, feature_length, itervar_features, knob_features
from .random_tuner import draw_unvisited
from .sa import SimulatedAnnealing
from .tuner import Tuner

__all__ = ["XGBTuner", "diverse_pick"]

logger = logging.getLogger("kiln.autotvm")

_OBJECTIVES = {"rank": "rank:pairwise", "reg": "reg:squarederror"}


def _import_xgboost():
    try:
        import xgboost
    except ImportError:
        raise ImportError("XGBTuner needs xgboost: pip install 'xgboost-cpu==3.*'") from None
    return xgboost


def diverse_pick(space, ranked: list, n: int) -> list:
    """n of the configs `ranked` (best first), greedily: each pick maximizes its rank score
    (1 for the best, falling linearly) plus the share of its knobs whose value no pick so far
    has. A plan of the model's top n alone tends to be n variations of one config, so one
    wrong belief of the model costs the whole plan; this is the paper's diverse batch (a
    submodular objective: covering a knob value again gains nothing).

    Example:
        >>> from kiln.autotvm.space import ConfigSpace
        >>> space = ConfigSpace(); space.define_knob("a", [1, 2]); space.define_knob("b", [1, 2])
        >>> diverse_pick(space, [0, 2, 3, 1], 2)     # 0 = (a1, b1); 3 = (a2, b2) shares nothing
        [0, 3]
    """
    if n >= len(ranked):
        return list(ranked)
    points = [space.point(i) for i in ranked]
    width = max(1, len(points[0]))
    score = [1.0 - k / len(ranked) for k in range(len(ranked))]
    covered: list[set] = [set() for _ in range(width)]
    left = list(range(len(ranked)))
    out = []
    while len(out) < n:
        def gain(k):
            new = sum(d not in seen for d, seen in zip(points[k], covered))
            return score[k] + new / width
        best = max(left, key=gain)
        left.remove(best)
        out.append(ranked[best])
        for d, seen in zip(points[best], covered):
            seen.add(d)
    return out


class XGBTuner(Tuner):
    """Model-based tuner: XGBoost cost model + parallel simulated annealing.

    feature_type: "itervar" (from the lowered loop program) or "knob" (the knob values).
    loss_type: "rank" (pairwise ranking) or "reg" (regression on normalized FLOP/s).
    plan_size: configs per plan, and the most measurements between refits.
    first_fit: measurements before the first fit (refits follow as they double;
    default plan_size // 2).
    num_threads: xgboost threads (1: the machine's cores are shared with the measurements).
    sa_parallel_size / sa_n_iter: annealing walkers and steps per plan; epsilon: share of
    random picks in a plan; num_boost_round: trees per fit; diversity: the annealer finds
    diversity * plan_size top configs, of which a diverse plan_size are planned (1: the top).
    feature_pool: a FeaturePool computing itervar features in other processes (the same
    numbers, sooner: they are most of the tuner's own time).

    Example:
        >>> XGBTuner(task, seed=0).tune(100, measure_batch=fake)       # doctest: +SKIP
    """

    def __init__(self, task, feature_type="itervar", loss_type="rank", plan_size=64,
                 num_threads=1, seed=None, *, first_fit=None, sa_parallel_size=128, sa_n_iter=60,
                 epsilon=0.05, num_boost_round=80, diversity=2, feature_pool=None):
        super().__init__(task)
        if feature_type not in ("itervar", "knob"):
            raise ValueError(f"XGBTuner: feature_type is 'itervar' or 'knob', got {feature_type!r}")
        if loss_type not in _OBJECTIVES:
            raise ValueError(f"XGBTuner: loss_type is 'rank' or 'reg', got {loss_type!r}")
        if not isinstance(plan_size, int) or plan_size < 1:
            raise ValueError(f"XGBTuner: plan_size must be a positive int, got {plan_size!r}")
        if first_fit is None:
            first_fit = max(2, plan_size // 2)
        if not isinstance(first_fit, int) or first_fit < 2:
            raise ValueError(f"XGBTuner: first_fit must be an int >= 2, got {first_fit!r}")
        if isinstance(diversity, bool) or not isinstance(diversity, (int, float)) \
                or diversity < 1:
            raise ValueError(f"XGBTuner: diversity must be a number >= 1, got {diversity!r}")
        if not 0 <= epsilon <= 1:
            raise ValueError(f"XGBTuner: epsilon must be in [0, 1], got {epsilon!r}")
        self.xgb = _import_xgboost()
        self.feature_type = feature_type
        self.loss_type = loss_type
        self.plan_size = plan_size
        self.num_threads = num_threads
        self.seed = seed
        self.epsilon = epsilon
        self.num_boost_round = num_boost_round
        self.diversity = diversity
        self.feature_pool = feature_pool
        self._fit_at = min(first_fit, plan_size)   # measurements at which to fit next
        self.rng = random.Random(seed)
        self.explorer = SimulatedAnnealing(self.space, parallel_size=sa_parallel_size,
                                           n_iter=sa_n_iter, seed=self.rng.randrange(2 ** 31))
        self.model = None
        self.fits = 0
        self.plan: list[int] = []
        self._plan_pos = 0
        self._needs_plan = False
        self._xs: list[int] = []                # measured indices of this task, in order
        self._ys: list[float] = []              # their FLOP/s (0 if failed)
        self._history: list[tuple[np.ndarray, np.ndarray]] = []   # (X, y) per other task
        self._cache: dict[int, np.ndarray] = {}
        self._invalid: set[int] = set()
        self._feature_width: int | None = None

    # ---------------------------------------------------------------- features
    def _features_of(self, task, config) -> np.ndarray:
        if self.feature_type == "itervar":
            return itervar_features(task, config)
        return knob_features(config)

    def features(self, indices) -> np.ndarray:
        """Feature matrix (rows: configs of this task by index), cached per index.

        Example:
            >>> XGBTuner(task).features([0, 5]).shape                  # doctest: +SKIP
            (2, 425)
        """
        indices = list(indices)
        if self.feature_pool is not None and self.feature_type == "itervar":
            missing = [i for i in dict.fromkeys(indices) if i not in self._cache]
            if self.feature_pool.worth_it(len(missing)):
                for i, row in zip(missing, self.feature_pool.compute(self.task, missing)):
                    if row is None:
                        self._invalid.add(i)
                        row = np.zeros(self._width(), np.float32)
                    self._cache[i] = row
        rows = []
        for i in indices:
            row = self._cache.get(i)
            if row is None:
                try:
                    row = self._features_of(self.task, self.space.get(i))
                except FeatureError:
                    self._invalid.add(i)
                    row = None
                if row is None:
                    row = np.zeros(self._width(), np.float32)
                self._cache[i] = row
            rows.append(row)
        return np.vstack(rows) if rows else np.zeros((0, self._width()), np.float32)

    def _width(self) -> int:
        if self._feature_width is None:
            self._feature_width = feature_length(self.task, self.feature_type)
        return self._feature_width

    # ---------------------------------------------------------------- model
    def _fit(self) -> None:
        groups, xs, ys = [], [], []
        own_y = np.asarray(self._ys, np.float64)
        if len(own_y) and own_y.max() > 0:
            xs.append(self.features(self._xs))
            ys.append(own_y / own_y.max())
            groups.append(len(own_y))
        for X, y in self._history:
            xs.append(X)
            ys.append(y)
            groups.append(len(y))
        if not groups or sum(groups) < 2:
            return
        dtrain = self.xgb.DMatrix(np.vstack(xs), label=np.concatenate(ys))
        if self.loss_type == "rank":
            dtrain.set_group(groups)
        params = {"objective": _OBJECTIVES[self.loss_type], "max_depth": 6, "eta": 0.3,
                  "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0, "lambda": 1.0,
                  "alpha": 0.0, "nthread": self.num_threads, "verbosity": 0,
                  "seed": self.seed if self.seed is not None else 0}
        self.model = self.xgb.train(params, dtrain, num_boost_round=self.num_boost_round)
        self.fits += 1
        self._needs_plan = True

    def predict(self, indices) -> np.ndarray:
        """Model scores of configs (higher: expected faster); configs that fail to lower
        score below everything else.

        Example:
            >>> tuner.predict([0, 1, 2])                               # doctest: +SKIP
        """
        indices = list(indices)
        X = self.features(indices)
        scores = self.model.predict(self.xgb.DMatrix(X)).astype(np.float64)
        if self._invalid:
            bad = np.array([i in self._invalid for i in indices])
            if bad.any():
                scores[bad] = (scores.min() if len(scores) else 0.0) - 1e6
        return scores

    def _make_plan(self) -> None:
        top = self.explorer.find_maximums(self.predict, int(self.plan_size * self.diversity),
                                          self.visited)
        self.plan = diverse_pick(self.space, top, self.plan_size)
        self._plan_pos = 0
        self._needs_plan = False

    # ---------------------------------------------------------------- tuner interface
    def next_batch(self, n):
        """Up to n configs: the plan's next top-ranked ones, random before the first fit
        (and with probability epsilon).

        Example:
            >>> [c.index for c in tuner.next_batch(4)]                 # doctest: +SKIP
        """
        if self.model is not None and self._needs_plan:
            self._make_plan()
        out: list[int] = []
        taken: set[int] = set()
        while len(out) < n:
            pick = None
            if self.model is not None and self.rng.random() >= self.epsilon:
                while self._plan_pos < len(self.plan) and pick is None:
                    i = self.plan[self._plan_pos]
                    self._plan_pos += 1
                    if i not in self.visited and i not in taken:
                        pick = i
            if pick is None:
                extra = draw_unvisited(self.space, self.visited, self.rng, 1, exclude=taken)
                if not extra:
                    break
                pick = extra[0]
            taken.add(pick)
            out.append(pick)
        return [self.space.get(i) for i in out]

    def update(self, configs, results):
        """Add measurements to the training set; refit every plan_size of them.

        Example:
            >>> tuner.update([cfg], [MeasureResult((1e-3,), "ok")])    # doctest: +SKIP
        """
        for c, r in zip(configs, results):
            self._xs.append(c.index)
            self._ys.append(self.flops_of(r))
        n = len(self._xs)
        if n >= self._fit_at or (self.model is None and self._history and n >= 2):
            self._fit()
            self._fit_at = n + min(n, self.plan_size)

    # ---------------------------------------------------------------- transfer learning
    def load_history(self, records) -> int:
        """Add the measurements of other tasks (an iterable of (MeasureInput, MeasureResult),
        e.g. load_records(log)) to the training set; returns how many records were used.

        Records of this task are not used here (resume from the log in `tune` instead), nor
        measurements taken inside a model (a different quantity); tasks whose template is not
        registered are skipped, and with "knob" features so is every task whose knobs differ
        from this one's. The model is fitted at once, so the first plan already uses it.

        Example:
            >>> XGBTuner(task).load_history(load_records("resnet.jsonl"))  # doctest: +SKIP
            412
        """
        from ..task import Task
        by_task: dict[str, list] = {}
        for inp, res in records:
            if inp.task_key != self.task.key and not inp.in_model:
                by_task.setdefault(inp.task_key, []).append((inp, res))
        used = 0
        for key, pairs in by_task.items():
            try:
                name, args, target = json.loads(key)
                task = Task(name, args, target)
            except (ValueError, KeyError, TypeError) as e:
                logger.warning("XGBTuner.load_history: skipping task %s (%s)", key, e)
                continue
            if self.feature_type == "knob" and list(task.config_space.knobs) != list(self.space.knobs):
                continue
            rows, ys = [], []
            space = task.config_space
            for inp, res in pairs:
                try:
                    config = space.from_json(inp.config)
                    rows.append(self._features_of(task, config))
                except (ValueError, FeatureError):
                    continue
                ys.append(1.0 / res.mean if res.status == "ok" and res.mean > 0 else 0.0)
            y = np.asarray(ys, np.float64)
            if len(y) < 2 or y.max() <= 0:
                continue
            self._history.append((np.vstack(rows), y / y.max()))
            used += len(y)
        if used:
            self._fit()
        return used

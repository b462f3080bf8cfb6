"""Evolutionary search over a task's sketches, guided by a learned cost model (Ansor §5).

Each batch: a population of programs, half sampled at random from the sketches and half
mutated from the fastest measured ones, evolves for a few generations under the cost model
(XGBoost over the loop features of each lowered program, kiln.autotvm.tuner.features, trained
on this task's measurements, throughput relative to the best); the batch is the best-predicted
programs not measured yet, plus a few random ones (epsilon-greedy) so the model sees what it
does not rate. Before the model has data the batch is random samples.

Mutations change one decision of a program: a tile size (a prime factor moved from one level
of a split to another, as Ansor's), the parallel, vector, unroll or placement choice (drawn
again), or, rarely, the whole program from another sketch. Programs stay legal: every
decision is re-checked by the annotation that turns it into steps.

The search is a kiln.autotvm Tuner, so `tune(n_trial, measure_option, log_file=...)` measures
through the same builder and runner, writes the same records, resumes from a log and
re-measures its best few.

Example:
    >>> task = extract_search_tasks(mod, params)[0]                 # doctest: +SKIP
    >>> SketchSearch(task, seed=0).tune(64, log_file="auto.jsonl")  # doctest: +SKIP
"""
from __future__ import annotations

import logging
import random

import numpy as np

from ..autotvm.tuner.features import ITERVAR_LENGTH, program_features
from ..autotvm.tuner.tuner import Tuner
from .sketch import Decisions, MAX_VECTOR

__all__ = ["SketchSearch", "CostModel", "mutate"]

logger = logging.getLogger("kiln.auto_schedule")


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def mutate_tile(lengths: tuple, extent: int, rng: random.Random, innermost: int = MAX_VECTOR):
    """Move one prime factor between two levels of a split (the outermost level, the rest of
    `extent`, included); None when no move keeps the innermost within `innermost`.

    Example:
        >>> mutate_tile((2, 4, 8), 128, random.Random(0)) != (2, 4, 8)
        True
    """
    parts = [extent // int(np.prod(lengths))] + list(lengths)
    sources = [k for k, n in enumerate(parts) if n > 1]
    for _ in range(8):
        if not sources:
            return None
        src = rng.choice(sources)
        p = rng.choice(_prime_factors(parts[src]))
        dst = rng.choice([k for k in range(len(parts)) if k != src])
        new = list(parts)
        new[src] //= p
        new[dst] *= p
        if new[-1] <= innermost:
            return tuple(new[1:])
    return None


def mutate(decisions: dict, extents: dict, rng: random.Random) -> dict:
    """A copy of `decisions` with one of them changed (tile sizes moved, another choice
    dropped so that annotation draws it again). `extents`: split name -> extent.

    Example:
        >>> mutate({"tile:2:0": (2, 4, 8)}, {"tile:2:0": 128}, random.Random(0))["tile:2:0"]
        (4, 4, 4)
    """
    out = dict(decisions)
    keys = sorted(out)
    if not keys:
        return out
    key = rng.choice(keys)
    if key in extents:
        moved = mutate_tile(tuple(out[key]), extents[key], rng,
                            MAX_VECTOR if key.startswith("tile:") else extents[key])
        if moved is not None:
            out[key] = moved
            return out
    del out[key]
    return out


class CostModel:
    """XGBoost regression from program features to throughput relative to the task's best.

    Example:
        >>> m = CostModel(); m.fit(np.random.rand(8, 4), np.random.rand(8))  # doctest: +SKIP
        >>> m.predict(np.random.rand(3, 4)).shape                            # doctest: +SKIP
        (3,)
    """

    def __init__(self, seed: int = 0, rounds: int = 60):
        from ..autotvm.tuner.xgb_tuner import _import_xgboost
        self.xgb = _import_xgboost()
        self.seed, self.rounds = seed, rounds
        self.booster = None

    def fit(self, X: np.ndarray, y: np.ndarray) -> None:
        if len(y) < 4 or float(np.max(y)) <= 0:
            return
        params = {"objective": "rank:pairwise", "max_depth": 6, "eta": 0.2,
                  "min_child_weight": 1, "lambda": 1.0, "nthread": 1, "verbosity": 0,
                  "seed": self.seed}
        dtrain = self.xgb.DMatrix(X, label=y / np.max(y))
        self.booster = self.xgb.train(params, dtrain, num_boost_round=self.rounds)

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.booster.predict(self.xgb.DMatrix(X)).astype(np.float64)


class SketchSearch(Tuner):
    """Evolutionary search of a SearchTask's programs (see the module docstring).

    Example:
        >>> SketchSearch(task, seed=0, population=32).tune(32)   # doctest: +SKIP
    """

    default_batch_size = 16

    def __init__(self, task, seed=None, population: int = 48, generations: int = 2,
                 eps_greedy: float = 0.15, model: CostModel | None = None):
        super().__init__(task)
        if not task.sketches:
            raise ValueError(f"task {task.key} has no sketch")
        self.rng = random.Random(seed)
        self.population, self.generations, self.eps = population, generations, eps_greedy
        self.model = model if model is not None else CostModel(seed or 0)
        self._features: dict[int, np.ndarray] = {}
        self._measured: list = []       # (config, throughput) of every non-default measurement
        self._sketch_of = {str(s): s for s in task.sketches}
        self._extents = self._split_extents()

    def _split_extents(self) -> dict:
        """Decision name -> extent of the split it sizes, for tile mutation."""
        from .compute_dag import ComputeDAG
        out = {}
        probe = Decisions(rng=0)
        for sketch in self.task.sketches:
            try:
                self.task.sample(sketch, probe)
            except Exception as e:     # (as in _sample: a rule bug skips the sketch)
                logger.warning("%s: sketch %s failed to annotate: %s", self.task.key, sketch, e)
        for key in probe.values:
            kind, _, rest = key.partition(":")
            if kind not in ("tile", "rtile"):
                continue
            stage, _, axis = rest.rpartition(":")
            op = self._op_named(stage)
            if op is None:
                continue
            ext = ComputeDAG.extents(op) if kind == "tile" else ComputeDAG.reduce_extents(op)
            out[key] = ext[int(axis)]
        return out

    def _op_named(self, stage: str):
        ops = self.task.dag.ops
        if stage.isdigit() and int(stage) < len(ops):
            return ops[int(stage)]
        base = stage.rsplit(".", 1)[0]      # "C.local": the cache stage computes C's body
        return next((op for op in ops if op.name == base), None)

    # ---------------------------------------------------------------- sampling
    def _sample(self, sketch=None, values=None):
        sketch = sketch or self.rng.choice(self.task.sketches)
        d = Decisions(values, random.Random(self.rng.random()))
        try:
            return self.task.sample(sketch, d)
        except Exception as e:     # a rule bug must not stop tuning: the program is skipped
            logger.warning("%s: sketch %s failed to annotate: %s", self.task.key, sketch, e)
            return None

    def _mutant(self, config):
        sketch = self._sketch_of.get(config.sketch)
        if sketch is None or self.rng.random() < 0.05:
            return self._sample()
        return self._sample(sketch, mutate(config.decisions, self._extents, self.rng))

    def _feature(self, config) -> np.ndarray:
        f = self._features.get(config.index)
        if f is None:
            from ..autotvm.tuner.features import _as_scheduled
            from ..driver.lower import lower
            try:
                s, args = self.task.instantiate(config)
                with self.task.target:
                    f = program_features(lower(s, args, pipeline=_as_scheduled()))
            except Exception:     # scored lowest below; measuring it would say why
                f = np.full(ITERVAR_LENGTH, np.nan, np.float32)
            self._features[config.index] = f
        return f

    def _scores(self, configs) -> np.ndarray:
        X = np.stack([self._feature(c) for c in configs])
        bad = np.isnan(X).any(axis=1)
        scores = self.model.predict(np.nan_to_num(X))
        scores[bad] = -np.inf
        return scores

    # ---------------------------------------------------------------- Tuner interface
    def has_next(self) -> bool:
        return True

    def next_batch(self, n: int) -> list:
        fresh: dict = {}

        def add(config):
            if config is not None and config.index not in self.visited:
                fresh.setdefault(config.index, config)

        if not self.model.trained:
            for _ in range(n * 4):
                if len(fresh) >= n:
                    break
                add(self._sample())
            return list(fresh.values())[:n]
        # every program scored during the evolution competes for the batch
        scored: dict = {}

        def score(pool):
            new = [c for c in pool if c.index not in scored]
            if new:
                for c, v in zip(new, self._scores(new)):
                    scored[c.index] = (v, c)
            return [scored[c.index][0] for c in pool]

        top = [c for c, _ in sorted(self._measured, key=lambda m: -m[1])[:8]]
        population = []
        for _ in range(self.population):
            c = self._mutant(self.rng.choice(top)) if top and self.rng.random() < 0.5 \
                else self._sample()
            if c is not None:
                population.append(c)
        for _ in range(self.generations):
            values = np.array(score(population))
            ranked = [population[k] for k in np.argsort(-values)]
            elite = ranked[:max(1, len(ranked) // 8)]
            # parents by tournament of two: better-scored programs breed more often
            children = []
            for _ in range(self.population - len(elite)):
                a, b = self.rng.randrange(len(ranked)), self.rng.randrange(len(ranked))
                c = self._mutant(ranked[min(a, b)])
                if c is not None:
                    children.append(c)
            population = elite + children
        score(population)
        n_random = max(1, int(round(n * self.eps)))
        for v, c in sorted(scored.values(), key=lambda vc: -vc[0]):
            if len(fresh) >= n - n_random or not np.isfinite(v):
                break
            add(c)
        for _ in range(4 * n):
            if len(fresh) >= n:
                break
            add(self._sample())
        return list(fresh.values())[:n]

    def update(self, configs, results) -> None:
        for c, r in zip(configs, results):
            if getattr(c, "is_default", False):
                continue
            self._measured.append((c, self.flops_of(r)))
        if len(self._measured) >= 4:
            X = np.nan_to_num(np.stack([self._feature(c) for c, _ in self._measured]))
            y = np.array([t for _, t in self._measured])
            self.model.fit(X, y)

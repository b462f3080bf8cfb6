"""Parallel simulated annealing over a config space, guided by a cost model's scores.

`parallel_size` walkers each take `n_iter` steps per call: a step moves one knob to another
candidate (`space.walk`); a better score is always accepted, a worse one with probability
exp(delta / T), T falling linearly from `temp[0]` to `temp[1]` (scores are divided by their
spread first, so the temperature means the same for any model). The walkers' positions persist
between calls, so after the model is refitted the search goes on from where it was instead of
starting cold. The best `num` distinct configs seen (not in `exclude`) come back, best first.

Example:
    >>> sa = SimulatedAnnealing(space, parallel_size=64, n_iter=50, seed=0)  # doctest: +SKIP
    >>> top = sa.find_maximums(model_scores, 4, exclude=set())  # doctest: +SKIP
"""
from __future__ import annotations

import heapq
import math
import random

import numpy as np

from .random_tuner import draw_unvisited

__all__ = ["SimulatedAnnealing"]


class SimulatedAnnealing:
    """Annealing explorer; `points` are the walkers' current config indices.

    Example:
        >>> SimulatedAnnealing(space, seed=0).find_maximums(score_fn, 8, visited)  # doctest: +SKIP
    """

    def __init__(self, space, parallel_size=128, n_iter=100, temp=(1.0, 0.0), early_stop=30,
                 seed=None):
        if parallel_size < 1 or n_iter < 1:
            raise ValueError(f"SimulatedAnnealing: parallel_size and n_iter must be >= 1, got "
                             f"{parallel_size} and {n_iter}")
        self.space = space
        self.parallel_size = min(parallel_size, space.size)
        self.n_iter = n_iter
        self.temp = temp
        self.early_stop = early_stop
        self.rng = random.Random(seed)
        self.points: list[int] | None = None

    def find_maximums(self, score_fn, num: int, exclude: set) -> list[int]:
        """Up to `num` distinct indices not in `exclude`, highest score first.

        score_fn maps a list of indices to an array of scores (higher is better).

        Example:
            >>> sa.find_maximums(model_scores, 64, tuner.visited)     # doctest: +SKIP
        """
        if self.points is None:
            self.points = draw_unvisited(self.space, set(), self.rng, self.parallel_size)
        points = list(self.points)
        scores = np.asarray(score_fn(points), dtype=np.float64)
        spread = float(np.std(scores)) or 1.0
        heap: list[tuple[float, int]] = []      # min-heap of the best num (score, index)
        in_heap: set[int] = set()

        def offer(idx, score):
            if idx in exclude or idx in in_heap:
                return False
            if len(heap) < num:
                heapq.heappush(heap, (score, idx))
            elif score > heap[0][0]:
                in_heap.discard(heapq.heapreplace(heap, (score, idx))[1])
            else:
                return False
            in_heap.add(idx)
            return True

        for p, s in zip(points, scores):
            offer(p, float(s))
        t0, t1 = self.temp
        quiet = 0
        for step in range(self.n_iter):
            t = t0 + (t1 - t0) * step / max(1, self.n_iter - 1)
            proposals = [self.space.walk(p, self.rng) for p in points]
            new_scores = np.asarray(score_fn(proposals), dtype=np.float64)
            changed = False
            for k, (idx, s) in enumerate(zip(proposals, new_scores)):
                changed |= offer(idx, float(s))
                delta = (s - scores[k]) / spread
                if delta >= 0 or (t > 1e-9 and self.rng.random() < math.exp(delta / t)):
                    points[k], scores[k] = idx, s
            quiet = 0 if changed else quiet + 1
            if self.early_stop and quiet >= self.early_stop:
                break
        self.points = points
        return [idx for _, idx in sorted(heap, key=lambda e: -e[0])]

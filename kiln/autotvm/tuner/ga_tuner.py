"""GATuner: a genetic algorithm over the knob points of a config space.

A genome is a config's point (one candidate index per knob, `space.point`). Each generation
keeps the `elite_num` best measured configs (elitism), then breeds children: two parents drawn
with probability proportional to their FLOP/s, uniform crossover knob by knob, and each knob
mutated to a random candidate with probability `mutation_prob`. Children are distinct and
unmeasured; the next generation is measured once the current one is.
"""
from __future__ import annotations

import random

from .random_tuner import draw_unvisited
from .tuner import Tuner

__all__ = ["GATuner"]

# Tries to breed a new (unmeasured, distinct) child before falling back to a random config.
_BREED_TRIES = 20


class GATuner(Tuner):
    """Genetic-algorithm tuner.

    `population` holds the indices of the current generation (elites first); `scores` the
    FLOP/s of every measured index; `elites` the indices kept from the previous generation.

    Example:
        >>> GATuner(task, pop_size=32, seed=0).tune(128)               # doctest: +SKIP
    """

    def __init__(self, task, pop_size=100, elite_num=3, mutation_prob=0.1, seed=None):
        super().__init__(task)
        if not isinstance(pop_size, int) or pop_size < 2:
            raise ValueError(f"GATuner: pop_size must be an int >= 2, got {pop_size!r}")
        if not isinstance(elite_num, int) or not 0 <= elite_num < pop_size:
            raise ValueError(f"GATuner: elite_num must be an int in [0, pop_size), got {elite_num!r}")
        if not 0 <= mutation_prob <= 1:
            raise ValueError(f"GATuner: mutation_prob must be in [0, 1], got {mutation_prob!r}")
        self.pop_size = min(pop_size, self.space.size)
        self.elite_num = min(elite_num, self.pop_size - 1)
        self.mutation_prob = mutation_prob
        self.rng = random.Random(seed)
        self.sizes = [k.size for k in self.space.knobs.values()]
        self.scores: dict[int, float] = {}
        self.elites: list[int] = []
        self.population = draw_unvisited(self.space, set(), self.rng, self.pop_size)
        self._queue = list(self.population)
        self.generation = 0

    def next_batch(self, n):
        """Up to n unmeasured members of the current generation, breeding the next when done.

        Example:
            >>> GATuner(task, seed=0).next_batch(4)                    # doctest: +SKIP
        """
        out = []
        while len(out) < n:
            self._queue = [i for i in self._queue if i not in self.visited]
            if not self._queue:
                # Breed only once the generation is measured; pending configs are in flight.
                if out or any(i not in self.scores for i in self.population):
                    break
                self._next_generation()
                if not self._queue:
                    break
            out.append(self._queue.pop(0))
        return [self.space.get(i) for i in out]

    def update(self, configs, results):
        """Score measured configs (FLOP/s; 0 if failed).

        Example:
            >>> tuner.update([cfg], [MeasureResult((1e-3,), "ok")])    # doctest: +SKIP
        """
        for c, r in zip(configs, results):
            self.scores[c.index] = self.flops_of(r)
        # Configs a resumed log measured join the pool the parents are drawn from.
        for c in configs:
            if c.index not in self.population:
                self.population.append(c.index)

    def _next_generation(self) -> None:
        ranked = sorted(self.scores, key=lambda i: -self.scores[i])
        pool = [i for i in self.population if i in self.scores] or ranked[:self.pop_size]
        self.elites = ranked[:self.elite_num]
        weights = [self.scores[i] + 1e-12 for i in pool]
        children: list[int] = []
        taken = set(self.elites)
        for _ in range(self.pop_size - len(self.elites)):
            child = None
            for _ in range(_BREED_TRIES):
                a, b = self.rng.choices(pool, weights=weights, k=2)
                candidate = self._breed(a, b)
                if candidate not in self.visited and candidate not in taken:
                    child = candidate
                    break
            if child is None:
                extra = draw_unvisited(self.space, self.visited, self.rng, 1, exclude=taken)
                if not extra:
                    break
                child = extra[0]
            taken.add(child)
            children.append(child)
        self.population = self.elites + children
        self._queue = list(children)
        self.generation += 1

    def _breed(self, a: int, b: int) -> int:
        pa, pb = self.space.point(a), self.space.point(b)
        genes = [x if self.rng.random() < 0.5 else y for x, y in zip(pa, pb)]
        for k, size in enumerate(self.sizes):
            if size > 1 and self.rng.random() < self.mutation_prob:
                genes[k] = self.rng.randrange(size)
        return self.space.index_of_point(genes)

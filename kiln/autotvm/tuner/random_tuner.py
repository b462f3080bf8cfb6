"""RandomTuner: configs drawn uniformly at random, without replacement, from a seed."""
from __future__ import annotations

import random

from .tuner import Tuner

__all__ = ["RandomTuner", "draw_unvisited"]

# Below this many unvisited configs, list them instead of drawing until a new one comes up.
_ENUMERATE_BELOW = 4096


def draw_unvisited(space, visited: set, rng: random.Random, n: int, exclude=()) -> list[int]:
    """Up to n distinct random indices of `space` in neither `visited` nor `exclude`.

    Example:
        >>> draw_unvisited(space, {0, 1}, random.Random(0), 3)        # doctest: +SKIP
        [812, 47, 3001]
    """
    exclude = set(exclude)
    left = space.size - len(visited) - len(exclude - visited)
    n = min(n, max(0, left))
    if n <= 0:
        return []
    if left <= _ENUMERATE_BELOW or n * 4 > left:
        # Nearly exhausted: rejection sampling would spin; list the rest (small by now).
        pool = [i for i in range(space.size) if i not in visited and i not in exclude]
        return rng.sample(pool, n)
    out: list[int] = []
    seen = set(exclude)
    while len(out) < n:
        i = rng.randrange(space.size)
        if i not in visited and i not in seen:
            seen.add(i)
            out.append(i)
    return out


class RandomTuner(Tuner):
    """Measure random configs, never the same one twice; `seed` makes the order repeatable.

    Example:
        >>> RandomTuner(task, seed=0).tune(32, log_file="t.jsonl")    # doctest: +SKIP
    """

    def __init__(self, task, seed=None):
        super().__init__(task)
        self.rng = random.Random(seed)

    def next_batch(self, n):
        """n random unvisited configs.

        Example:
            >>> RandomTuner(task, seed=1).next_batch(2)                # doctest: +SKIP
        """
        return [self.space.get(i) for i in draw_unvisited(self.space, self.visited, self.rng, n)]

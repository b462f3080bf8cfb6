"""GridSearchTuner: every config in index order."""
from __future__ import annotations

from .tuner import Tuner

__all__ = ["GridSearchTuner"]


class GridSearchTuner(Tuner):
    """Measure configs 0, 1, 2, ... (skipping any already measured).

    Example:
        >>> GridSearchTuner(task).tune(len(task.config_space))         # doctest: +SKIP
    """

    def __init__(self, task):
        super().__init__(task)
        self._next = 0

    def next_batch(self, n):
        """The next n unvisited configs in index order.

        Example:
            >>> [c.index for c in GridSearchTuner(task).next_batch(3)]  # doctest: +SKIP
            [0, 1, 2]
        """
        out = []
        while len(out) < n and self._next < self.space.size:
            if self._next not in self.visited:
                out.append(self.space.get(self._next))
            self._next += 1
        return out

    def has_next(self):
        """Whether the grid has configs left. Example: `GridSearchTuner(task).has_next()`."""
        return self._next < self.space.size and super().has_next()

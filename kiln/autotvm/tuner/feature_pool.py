"""Itervar features computed in worker processes, for XGBTuner's planning.

A plan of XGBTuner scores a few thousand configs its annealing walks to, and each needs its
itervar features: the template instantiated and lowered, and the loops walked (~4.5 ms a
config for test.matmul on a 2-core EPYC, 94% of the tuner's time). That is Python, so the
tuners of several tasks tuned at once (tune_tasks) shared one core, and on a cluster the
tuning client fell behind its devices (bench/results/tune_scaling.txt). A FeaturePool spreads
each batch of configs over `n_workers` processes (workers.py: fresh interpreters, JSON
messages). The features are the same numbers as computed in place: float32 values survive
JSON exactly.

    pool = FeaturePool(2)
    tuner = XGBTuner(task, feature_pool=pool)
    ...
    pool.close()
"""
from __future__ import annotations

import threading

import numpy as np

from ..workers import WorkerPool
from .features import FeatureError, itervar_features

__all__ = ["FeaturePool", "features_job"]

# Fewer configs than this per process cost more in messages than they save.
MIN_CHUNK = 8
JOB_TIMEOUT = 120.0
_JOB = "kiln.autotvm.tuner.feature_pool:features_job"
_PRELOAD = ("kiln.autotvm.tuner.feature_pool", "kiln.driver", "kiln.te")


def features_job(payload: dict) -> list:
    """A worker's job: the itervar features of payload["indices"] of payload["task"]
    (Task.to_json), each a list of floats, or None where the config does not lower.

    Example:
        >>> features_job({"task": task.to_json(), "indices": [0, 5]})[0][:2]   # doctest: +SKIP
        [0.0, 3.0]
    """
    from ..task import Task
    task = Task.from_json(payload["task"])
    out = []
    for i in payload["indices"]:
        try:
            out.append(itervar_features(task, task.config_space.get(i)).tolist())
        except FeatureError:
            out.append(None)
    return out


class FeaturePool:
    """Computes itervar features in `n_workers` processes (default: the CPUs this process may
    use). Shared by the tuners of tasks tuned at once: one batch at a time uses every worker.
    A chunk whose worker fails is computed in place.

    Example:
        >>> with FeaturePool(2) as pool:                                    # doctest: +SKIP
        ...     rows = pool.compute(task, [0, 1, 2])
    """

    def __init__(self, n_workers: int | None = None):
        if n_workers is None:
            from ...runtime.threadpool import usable_cpus
            n_workers = usable_cpus()
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"FeaturePool: n_workers must be a positive int, got {n_workers!r}")
        self.n_workers = n_workers
        self._pool: WorkerPool | None = None
        self._lock = threading.Lock()

    def worth_it(self, n: int) -> bool:
        """Whether `n` configs are enough to send out."""
        return self.n_workers > 1 and n >= 2 * MIN_CHUNK

    def compute(self, task, indices: list[int]) -> list[np.ndarray | None]:
        """The itervar features of `indices` of `task`, in order; None for a config that does
        not lower.

        Example:
            >>> pool.compute(task, [0, 5])[1].shape                           # doctest: +SKIP
            (425,)
        """
        if not indices:
            return []
        n_chunks = max(1, min(self.n_workers, len(indices) // MIN_CHUNK))
        chunks = [indices[k::n_chunks] for k in range(n_chunks)]
        task_json = task.to_json()
        with self._lock:
            if self._pool is None:
                self._pool = WorkerPool(self.n_workers, preload=_PRELOAD)
            outcomes = self._pool.map(_JOB, [{"task": task_json, "indices": c} for c in chunks],
                                      JOB_TIMEOUT)
        rows: dict[int, np.ndarray | None] = {}
        for chunk, outcome in zip(chunks, outcomes):
            if outcome.kind == "ok":
                values = outcome.value
            else:                        # computed here, as XGBTuner would without a pool
                values = features_job({"task": task_json, "indices": chunk})
            for i, v in zip(chunk, values):
                rows[i] = None if v is None else np.asarray(v, dtype=np.float32)
        return [rows[i] for i in indices]

    def close(self) -> None:
        """Stop the worker processes (they start again on the next compute)."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def __enter__(self) -> "FeaturePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

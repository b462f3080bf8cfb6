"""Simulated devices: a cluster's scaling measured without a fleet.

A SimulatedBuilder's build occupies a worker thread for `build_seconds` (as compiling would);
a SimulatedRunner's measurement occupies a worker's simulated device (the dask resource
SIMULATED_RESOURCE) for `hold_seconds` plus the calls it times, and reports the config's cost
from a fixed table (`cost`: a function of the task and config; default table_cost). Everything
else is real: the tuner, the dask scheduler and its workers, the log. So trials per second as
the number of devices grows shows what the tuning client and dask add, not what the devices do.

    cluster = LocalCluster(n_workers=8, threads_per_worker=1,
                           resources={SIMULATED_RESOURCE: 1})
    option = measure_option(builder=SimulatedBuilder(cluster), runner=SimulatedRunner(cluster))
"""
from __future__ import annotations

import hashlib

from ..task import Task
from .device import RESOURCE_PREFIX
from .measure import ClusterBuilder, ClusterRunner, _job

__all__ = ["SIMULATED_RESOURCE", "SimulatedBuilder", "SimulatedRunner", "table_cost"]

SIMULATED_RESOURCE = RESOURCE_PREFIX + "simulated"
# A simulated device's speed for table_cost: the order of a 2-core AVX2 machine's float32
# peak, so that simulated costs look like kiln's measured ones.
TABLE_FLOPS = 50e9


def table_cost(task: Task, config: dict) -> float:
    """Seconds per call of `config` of `task`: the task's FLOPs at TABLE_FLOPS, times a factor
    in [1, 8) fixed by a hash of (task, config index), so every run sees the same costs.

    Example:
        >>> import kiln.autotvm.testing
        >>> t = Task("test.matmul", (64, 64, 64, "float32"))
        >>> table_cost(t, {"index": 3, "knobs": {}}) == table_cost(t, {"index": 3, "knobs": {}})
        True
    """
    digest = hashlib.sha256(f"{task.key}#{config['index']}".encode()).digest()
    factor = 1.0 + 7.0 * int.from_bytes(digest[:4], "little") / 2 ** 32
    return float(task.flop) / TABLE_FLOPS * factor


class SimulatedBuilder(ClusterBuilder):
    """Builds nothing: each candidate holds a worker thread for `build_seconds`.

    Example:
        >>> builder = SimulatedBuilder(cluster, build_seconds=0.5)      # doctest: +SKIP
    """

    def __init__(self, cluster, security=None, build_seconds: float = 1.0, **options):
        super().__init__(cluster, security, **options)
        if not isinstance(build_seconds, (int, float)) or isinstance(build_seconds, bool) \
                or not build_seconds >= 0:
            raise ValueError(f"SimulatedBuilder: build_seconds must be >= 0, got "
                             f"{build_seconds!r}")
        self.build_seconds = float(build_seconds)

    def _submit(self, task_json: dict, config: dict):
        return lambda: self.client.submit(_job("simulated_build"), self.build_seconds,
                                          pure=False)


class SimulatedRunner(ClusterRunner):
    """Measures nothing: each candidate holds a simulated device (a worker declaring
    SIMULATED_RESOURCE) for `hold_seconds` plus number x repeat calls of its table cost, and
    reports that cost.

    Example:
        >>> runner = SimulatedRunner(cluster, hold_seconds=0.05)        # doctest: +SKIP
    """

    def __init__(self, cluster, security=None, cost=table_cost, hold_seconds: float = 0.05,
                 **options):
        super().__init__(cluster, security, **options)
        if not callable(cost):
            raise TypeError(f"SimulatedRunner: cost must be a function (task, config) -> "
                            f"seconds, got {cost!r}")
        self.cost, self.hold_seconds = cost, float(hold_seconds)

    def resource(self, task: Task) -> str:
        return SIMULATED_RESOURCE

    def _submit(self, task: Task, task_json: dict, build, resource: str):
        cost = self.cost(task, build.config)
        hold = self.hold_seconds + cost * self.number * self.repeat
        return lambda: self.client.submit(_job("simulated_measure"), cost, hold, self.repeat,
                                          pure=False, resources={resource: 1}, priority=1)

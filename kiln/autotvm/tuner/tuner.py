"""The tuning loop shared by every tuner: propose, measure, record, learn.

A tuner subclass only decides what to measure next (`next_batch`) and learns from what was
measured (`update`); `Tuner.tune` does the rest: it measures the task's default config first,
never measures a config twice in the search, appends each batch to the log, resumes from an
existing log, keeps the best config, stops early and calls the callbacks. At the end it can
measure the few best configs and the default again (`remeasure_top`): on a shared 2-core machine
one measurement of a config spreads by several percent, so the top of a long search is partly
the luckiest draws; the best config is then the one with the lowest median over its records.

Example:
    >>> from kiln.autotvm.tuner import RandomTuner
    >>> tuner = RandomTuner(task, seed=0)                              # doctest: +SKIP
    >>> tuner.tune(n_trial=64, log_file="tune.jsonl")                  # doctest: +SKIP
    >>> tuner.best_config, tuner.best_flops                            # doctest: +SKIP
"""
from __future__ import annotations

import logging
import math
import os
import statistics

from ..record import MeasureInput, MeasureResult, RecordWriter, load_records, log_lock
from ..space import ConfigEntity

__all__ = ["Tuner", "TunerError"]

logger = logging.getLogger("kiln.autotvm")


class TunerError(RuntimeError):
    """The tuning loop was given something it cannot use (a measure batch breaking its contract)."""


class Tuner:
    """Base of all tuners. Subclasses implement `next_batch(n)` and may override `update`
    and `has_next`.

    State visible to callbacks and subclasses: `task`, `space`, `visited` (indices measured,
    including those read from a resumed log), `trials` (measurements counted toward n_trial),
    `best_config`, `best_cost` (seconds; the median of the config's ok measurements),
    `best_flops` (task.flop / best_cost), `best_trial`.

    Example:
        >>> class Mine(Tuner):                                          # doctest: +SKIP
        ...     def next_batch(self, n): return [self.space.get(0)]
    """

    #: candidates per batch when the measure batch does not say (no `batch_size` or
    #: `n_parallel`).
    default_batch_size = 8

    def __init__(self, task):
        self.task = task
        self.space = task.config_space
        self.visited: set[int] = set()
        self.trials = 0
        self.best_config: ConfigEntity | None = None
        self.best_cost = math.inf
        self.best_flops = 0.0
        self.best_trial = 0
        self._flop = None
        self._costs: dict[int, list[float]] = {}        # config index -> its ok mean costs
        self._remeasured = False     # a resumed log holds re-measurements of this task
        self._configs: dict[int, ConfigEntity] = {}
        self._logs_read: set[str] = set()

    # ---------------------------------------------------------------- subclass interface
    def next_batch(self, n: int) -> list[ConfigEntity]:
        """Up to n configs to measure next (not in `visited`, distinct).

        Example:
            >>> tuner.next_batch(4)                                    # doctest: +SKIP
        """
        raise NotImplementedError(f"{type(self).__name__} must implement next_batch(n)")

    def update(self, configs: list[ConfigEntity], results: list[MeasureResult]) -> None:
        """Learn from measured configs (same order as results). Default: nothing.

        Example:
            >>> tuner.update([cfg], [MeasureResult((1e-3,), "ok")])    # doctest: +SKIP
        """

    def has_next(self) -> bool:
        """Whether unmeasured configs remain.

        Example:
            >>> tuner.has_next()                                       # doctest: +SKIP
            True
        """
        return len(self.visited) < self.space.size

    # ---------------------------------------------------------------- helpers
    def flops_of(self, result: MeasureResult) -> float:
        """FLOP/s of a result (0 for a failed one).

        Example:
            >>> tuner.flops_of(MeasureResult((1e-3,), "ok"))           # doctest: +SKIP
            65536000.0
        """
        if result.status != "ok" or result.mean <= 0:
            return 0.0
        if self._flop is None:
            try:
                self._flop = float(self.task.flop)
            except ValueError:  # a compute whose FLOPs cannot be counted: rank by 1/cost
                self._flop = 1.0
        return self._flop / result.mean

    def _note(self, config: ConfigEntity, result: MeasureResult, repeat: bool = False) -> None:
        """Count a measurement: a trial unless `repeat` (a config measured again)."""
        if not repeat:
            self.visited.add(config.index)
            self.trials += 1
        if result.status != "ok":
            return
        self._configs[config.index] = config
        self._costs.setdefault(config.index, []).append(result.mean)
        if repeat:
            self._pick_best()            # medians moved: look again
        elif result.mean < self.best_cost:
            self._pick_best()
            self.best_trial = self.trials

    def _pick_best(self) -> None:
        index = min(self._costs, key=lambda i: statistics.median(self._costs[i]))
        self.best_config = self._configs[index]
        self.best_cost = statistics.median(self._costs[index])
        self.best_flops = self.flops_of(MeasureResult((self.best_cost,), "ok"))

    def _resume(self, log_file) -> int:
        """Count and learn from this task's records in an existing log; returns how many."""
        configs, results = [], []
        with log_lock(log_file):        # other tasks' tuners may be appending to it
            records = list(load_records(log_file))
        for inp, res in records:
            if inp.task_key != self.task.key or inp.in_model:
                continue
            try:
                config = self.space.from_json(inp.config)
            except ValueError as e:
                logger.warning("tuning log %s: a record of %s does not fit the task's space (%s); "
                               "ignored", log_file, self.task.key, e)
                continue
            if config.index in self.visited:
                self._note(config, res, repeat=True)    # a re-measurement
                self._remeasured = True
                continue
            self._note(config, res)
            configs.append(config)
            results.append(res)
        if configs:
            self.update(configs, results)
        return len(configs)

    # ---------------------------------------------------------------- the loop
    def tune(self, n_trial: int, measure_option=None, early_stopping=None, callbacks=(),
             log_file=None, measure_batch=None, measure_default: bool = True,
             remeasure_top: int = 0, remeasure_rounds: int = 2) -> "Tuner":
        """Measure up to n_trial configs in all (resumed records count); returns self.

        measure_batch: a callable list[ConfigEntity] -> list[MeasureResult] (tests); else
        `create_measure_batch(task, measure_option or measure_option())` is used and closed.
        early_stopping: stop after that many trials without a better config.
        callbacks: each called as cb(tuner, configs, results) after every batch.
        log_file: JSON-lines log appended per batch; when it exists, its records of this task
        count as trials and are never measured again.
        measure_default: measure the default config first (so a tuned config is known to beat
        it); False compares search strategies from scratch (bench/tuner_compare.py).
        remeasure_top: at the end, measure the best `remeasure_top` configs and the default
        until each has 1 + remeasure_rounds measurements (logged too), then keep the config
        with the lowest median. A log that already holds re-measurements of the task (a
        config logged twice) is not re-measured again, so resuming measures nothing new.

        Example:
            >>> XGBTuner(task).tune(200, early_stopping=50, log_file="t.jsonl")  # doctest: +SKIP
        """
        if isinstance(n_trial, bool) or not isinstance(n_trial, int) or n_trial < 0:
            raise ValueError(f"n_trial must be a non-negative int, got {n_trial!r}")
        for name, value in (("remeasure_top", remeasure_top), ("remeasure_rounds", remeasure_rounds)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if early_stopping is not None and (isinstance(early_stopping, bool)
                                           or not isinstance(early_stopping, int) or early_stopping < 1):
            raise ValueError(f"early_stopping must be None or a positive int, got {early_stopping!r}")
        callbacks = tuple(callbacks)
        for cb in callbacks:
            if not callable(cb):
                raise TypeError(f"a callback must be callable as cb(tuner, configs, results), got {cb!r}")
        # A log is read once per tuner: tuned again in more rounds (a task scheduler's), the
        # tuner already holds what it wrote there.
        if log_file is not None and os.path.abspath(log_file) not in self._logs_read:
            self._logs_read.add(os.path.abspath(log_file))
            resumed = self._resume(log_file) if os.path.exists(log_file) else 0
            if resumed:
                logger.info("%s: resumed %d trials from %s", self.task.key, resumed, log_file)

        owned = measure_batch is None
        if owned:
            from ..measure import create_measure_batch
            from ..measure import measure_option as default_option
            measure_batch = create_measure_batch(self.task, measure_option or default_option())
        elif not callable(measure_batch):
            raise TypeError(f"measure_batch must be callable (list of configs -> list of "
                            f"results), got {measure_batch!r}")
        batch_size = max(1, int(getattr(measure_batch, "batch_size", 0)
                                or getattr(measure_batch, "n_parallel", 0)
                                or self.default_batch_size))
        writer = RecordWriter(log_file) if log_file is not None else None
        try:
            default = self.task.default_config() if measure_default else None
            if measure_default and default.index not in self.visited and self.trials < n_trial:
                self._measure(measure_batch, [default], writer, callbacks, default=True)
            while self.trials < n_trial and self.has_next():
                if early_stopping is not None and self.trials - self.best_trial >= early_stopping:
                    logger.info("%s: early stop after %d trials without improvement",
                                self.task.key, early_stopping)
                    break
                configs, picked = [], set()
                for cfg in self.next_batch(min(batch_size, n_trial - self.trials)):
                    if cfg.index not in self.visited and cfg.index not in picked:
                        picked.add(cfg.index)
                        configs.append(cfg)
                if not configs:
                    break
                self._measure(measure_batch, configs, writer, callbacks)
            if remeasure_top and remeasure_rounds and not self._remeasured:
                self._remeasure(measure_batch, writer, remeasure_top, remeasure_rounds, default)
        finally:
            if writer is not None:
                writer.close()
            if owned and hasattr(measure_batch, "close"):
                measure_batch.close()
        return self

    def _measure(self, measure_batch, configs, writer, callbacks, default=False) -> None:
        results = self._run(measure_batch, configs, writer, {configs[0].index} if default else ())
        for c, r in zip(configs, results):
            self._note(c, r)
        self.update(configs, results)
        for cb in callbacks:
            cb(self, configs, results)

    def _run(self, measure_batch, configs, writer, defaults) -> list[MeasureResult]:
        """Measure configs and log them; `defaults`: indices to mark as the default config."""
        results = list(measure_batch(configs))
        if len(results) != len(configs):
            raise TunerError(f"the measure batch returned {len(results)} results for "
                             f"{len(configs)} configs")
        for r in results:
            if not isinstance(r, MeasureResult):
                raise TunerError(f"the measure batch returned {r!r}, not a MeasureResult")
        if writer is not None:
            target = str(self.task.target)
            writer.write_batch((MeasureInput(self.task.key, c.to_json(), target,
                                             default=c.index in defaults), r)
                               for c, r in zip(configs, results))
        return results

    def _remeasure(self, measure_batch, writer, top: int, rounds: int, default) -> None:
        defaults = {default.index} if default is not None else set()
        # The top can change as medians move (a lucky draw drops out, the next config comes
        # in): go on until the current top all have 1 + rounds measurements, within a bound.
        for _ in range(rounds * 3):
            ranked = sorted(self._costs, key=lambda i: statistics.median(self._costs[i]))[:top]
            ranked += [i for i in defaults if i in self._costs and i not in ranked]
            # Interleaved in one batch, so a slow spell of the machine hits them all alike.
            configs = [self._configs[i] for i in ranked if len(self._costs[i]) < 1 + rounds]
            if not configs:
                break
            results = self._run(measure_batch, configs, writer, defaults)
            for c, r in zip(configs, results):
                self._note(c, r, repeat=True)

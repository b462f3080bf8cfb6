"""Tune a whole model in one call: extract its tasks, tune them in order of expected gain
(FLOPs x occurrences) under a trial count per task and an optional time budget, log every
measurement, and resume from an existing log without measuring anything twice.

Example:
    >>> tasks = tune_model(mod, params, "llvm", trials_per_task=200, time_budget="30m",
    ...                    log_file="tune.jsonl")                       # doctest: +SKIP
    >>> with apply_history_best("tune.jsonl"):                        # doctest: +SKIP
    ...     lib = kiln.compile(mod, params=params)
"""
from __future__ import annotations

import sys
import time

from .extract import extract_tasks

TUNERS = ("xgb", "ga", "random", "grid")


class _OutOfTime(Exception):
    pass


def parse_duration(value) -> float | None:
    """Seconds from a number or a string such as "90s", "30m", "1.5h" (None: no budget).

    Example:
        >>> parse_duration("30m"), parse_duration(45), parse_duration(None)
        (1800.0, 45.0, None)
    """
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().lower()
        scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(text[-1])
        try:
            seconds = float(text[:-1] if scale else text) * (scale or 1.0)
        except ValueError:
            raise ValueError(f"time budget {value!r} is not a number of seconds or a duration "
                             f"like '90s', '30m', '1.5h'") from None
    else:
        raise ValueError(f"time budget must be seconds or a string like '30m', got {value!r}")
    if seconds <= 0:
        raise ValueError(f"time budget must be positive, got {value!r}")
    return seconds


def _make_tuner(kind: str, task, seed):
    from .tuner import GATuner, GridSearchTuner, RandomTuner, XGBTuner
    if kind == "xgb":
        return XGBTuner(task, seed=seed)
    if kind == "ga":
        return GATuner(task, seed=seed)
    if kind == "random":
        return RandomTuner(task, seed=seed)
    return GridSearchTuner(task)


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"


class _Progress:
    """One status line per batch: task, trials, best GFLOPS, elapsed / remaining."""

    def __init__(self, stream, n_tasks: int, budget: float | None, start: float):
        self.stream, self.n_tasks, self.budget, self.start = stream, n_tasks, budget, start
        self.tty = bool(getattr(stream, "isatty", lambda: False)())

    def show(self, k: int, tuner, n_trial: int, done: bool = False) -> None:
        if self.stream is None:
            return
        elapsed = time.monotonic() - self.start
        left = f" / {_clock(max(0.0, self.budget - elapsed))} left" if self.budget else ""
        best = f"{tuner.best_flops / 1e9:.1f}" if tuner.best_flops else "-"
        line = (f"[task {k}/{self.n_tasks}] {tuner.task.name} trials {tuner.trials}/{n_trial} "
                f"best {best} GFLOPS  elapsed {_clock(elapsed)}{left}")
        if self.tty:
            self.stream.write("\r" + line.ljust(100) + ("\n" if done else ""))
        elif done:
            self.stream.write(line + "\n")
        self.stream.flush()


def tune_model(mod, params=None, target="llvm", trials_per_task: int = 128, time_budget=None,
               log_file: str = "tune.jsonl", tuner: str = "xgb", measure_option=None,
               early_stopping: int | None = None, seed=None, progress=sys.stderr) -> list:
    """Tune every task of `mod` (see extract_tasks), most expected gain first; returns the
    tasks with the tuner's best GFLOPS in `task.best_flops`. The default of 128 trials per task
    fits a ResNet-18 (12 tasks, ~1.5 s per trial on 2 cores: a trial is a compile) in about
    40 minutes; the spaces have hundreds to a few thousand configs. Measurements are appended to
    `log_file` batch by batch; running again with the same log resumes (trials already
    logged count and are not measured again). `time_budget` (seconds or "30m") stops tuning
    after the batch in flight when it runs out; `progress` is a stream for the status line
    (None: quiet).

    Example:
        >>> tune_model(mod, params, trials_per_task=64, log_file="t.jsonl")  # doctest: +SKIP
    """
    if tuner not in TUNERS:
        raise ValueError(f"unknown tuner {tuner!r}; choose one of {', '.join(TUNERS)}")
    if isinstance(trials_per_task, bool) or not isinstance(trials_per_task, int) \
            or trials_per_task < 1:
        raise ValueError(f"trials_per_task must be a positive int, got {trials_per_task!r}")
    budget = parse_duration(time_budget)
    start = time.monotonic()
    tasks = extract_tasks(mod, params, target)
    bar = _Progress(progress, len(tasks), budget, start)

    def watch(k):
        def callback(t, configs, results):
            bar.show(k, t, trials_per_task)
            if budget is not None and time.monotonic() - start >= budget:
                raise _OutOfTime
        return callback

    for k, task in enumerate(tasks, 1):
        t = _make_tuner(tuner, task, seed)
        try:
            t.tune(trials_per_task, measure_option=measure_option, early_stopping=early_stopping,
                   callbacks=(watch(k),), log_file=log_file)
        except _OutOfTime:
            pass
        finally:
            task.best_flops = t.best_flops
            bar.show(k, t, trials_per_task, done=True)
        if budget is not None and time.monotonic() - start >= budget:
            if progress is not None and k < len(tasks):
                progress.write(f"time budget spent: {len(tasks) - k} of {len(tasks)} tasks "
                               f"not tuned (they keep their default configs)\n")
            break
    return tasks

"""Tune a whole model in one call: extract its tasks, tune them in order of expected gain
(FLOPs x occurrences) under a trial count per task and an optional time budget, log every
measurement, resume from an existing log without measuring anything twice, and finally pick
each task's config among its best few by timing them inside the compiled model.

Example:
    >>> tasks = tune_model(mod, params, "llvm", trials_per_task=200, time_budget="30m",
    ...                    log_file="tune.jsonl")                       # doctest: +SKIP
    >>> with apply_history_best("tune.jsonl"):                        # doctest: +SKIP
    ...     lib = kiln.compile(mod, params=params)
"""
from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..runtime.cpu_cache import core_cache_bytes
from ..runtime.threadpool import num_threads
from ..runtime.timing import can_flush_cache
from . import measure as _measure
from .extract import extract_tasks
from .model_select import select_in_model
from .tuner.feature_pool import FeaturePool

TUNERS = ("xgb", "ga", "random", "grid")
# The best few configs of each task (and the default) are measured twice more at its end and
# the lowest median wins (Tuner.tune's remeasure_top): ~10 runs a task, against lucky draws.
REMEASURE_TOP = 4
# The longest time budget: a month of tuning is already beyond any schedule space kiln has; a
# larger value is a typo (or an infinity).
MAX_BUDGET_S = 30 * 86400


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
    if not seconds > 0:                 # nan too
        raise ValueError(f"time budget must be positive, got {value!r}")
    if seconds > MAX_BUDGET_S:            # inf too
        raise ValueError(f"time budget must be at most {MAX_BUDGET_S // 86400:.0f} days, got "
                         f"{value!r}")
    return seconds


def _make_tuner(kind: str, task, seed, feature_pool=None):
    from .tuner import GATuner, GridSearchTuner, RandomTuner, XGBTuner
    if kind == "xgb":
        return XGBTuner(task, seed=seed, feature_pool=feature_pool)
    if kind == "ga":
        return GATuner(task, seed=seed)
    if kind == "random":
        return RandomTuner(task, seed=seed)
    return GridSearchTuner(task)


class _Progress:
    """The progress bar over all tasks' trials: task, trials done, best GFLOPS of the task,
    elapsed and remaining time (from this run's rate; with a budget, the budget left too).
    tqdm formats it; redrawn in place after every batch on a terminal, one line per finished
    task otherwise (a log file gets no carriage-return noise)."""

    _FORMAT = "{desc} |{bar:24}| {n_fmt}/{total_fmt} trials [{elapsed}<{remaining}]{postfix}"

    def __init__(self, stream, n_tasks: int, trials_per_task: int, budget: float | None,
                 start: float):
        self.stream, self.n_tasks, self.trials_per_task = stream, n_tasks, trials_per_task
        self.budget, self.start = budget, start
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        # task number -> (trials done, trials planned): a task whose space is smaller than
        # trials_per_task plans fewer; tasks not started yet count trials_per_task.
        self.tasks: dict[int, tuple[int, int]] = {}
        self.lock = threading.Lock()    # tasks tuned at once report from their own threads

    def show(self, k: int, tuner, done: bool = False) -> None:
        if self.stream is None:
            return
        with self.lock:
            n_trial = min(self.trials_per_task, len(tuner.task.config_space))
            self.tasks[k] = (min(tuner.trials, n_trial), n_trial)
            if done or self.tty:
                self._show(k, tuner, done)

    def _show(self, k: int, tuner, done: bool) -> None:
        from tqdm import tqdm
        elapsed = time.monotonic() - self.start
        n = sum(trials for trials, _ in self.tasks.values())
        total = sum(planned for _, planned in self.tasks.values()) + \
            (self.n_tasks - len(self.tasks)) * self.trials_per_task
        best = f"{tuner.best_flops / 1e9:.1f}" if tuner.best_flops else "-"
        postfix = f"best {best} GFLOPS"
        if self.budget is not None:
            postfix += f", budget left {tqdm.format_interval(max(0, self.budget - elapsed))}"
        line = tqdm.format_meter(n, total, elapsed, prefix=f"[task {k}/{self.n_tasks}] "
                                 f"{tuner.task.name}", ascii=not self.tty, unit="trial",
                                 bar_format=self._FORMAT, postfix=postfix)
        self.stream.write(("\r" + line.ljust(110) if self.tty else line)
                          + ("\n" if done else ""))
        self.stream.flush()


def model_outgrows_cache(params, cache_bytes: int | None = None) -> bool:
    """Whether a model's weights (`params`: name -> array) exceed the caches it can count on
    (`cache_bytes`; default: the caches private to each core (core_cache_bytes) times the
    threads kiln runs on; a shared L3 is shared with everything else on the machine). If they
    do, each layer finds its weights evicted by the others' and reads them from memory; if not,
    they stay cached from one run to the next. Unknown sizes (no params, no cache information)
    count as outgrowing: TVM's advice for tuning whole models is to flush.

    Example:
        >>> model_outgrows_cache({"w": np.zeros((1024, 1024), "float32")}, 32 << 20)
        False
    """
    if cache_bytes is None:
        per_core = core_cache_bytes()
        cache_bytes = None if per_core is None else per_core * num_threads()
    if not params or cache_bytes is None:
        return True
    return sum(np.asarray(v).nbytes for v in params.values()) > cache_bytes


def _check_options(tuner: str, trials_per_task: int, time_budget) -> float | None:
    """The time budget in seconds, once the tuner and trial count are known to be valid."""
    if tuner not in TUNERS:
        raise ValueError(f"unknown tuner {tuner!r}; choose one of {', '.join(TUNERS)}")
    if isinstance(trials_per_task, bool) or not isinstance(trials_per_task, int) \
            or trials_per_task < 1:
        raise ValueError(f"trials_per_task must be a positive int, got {trials_per_task!r}")
    return parse_duration(time_budget)


def flush_for(params) -> bool:
    """Whether candidates of a model with these weights are timed with their weights evicted
    from the caches (see tune_model; False where kiln cannot flush them).

    Example:
        >>> flush_for({"w": np.zeros(4, "float32")})
        False
    """
    return can_flush_cache() and model_outgrows_cache(params)


def tune_model(mod, params=None, target="llvm", trials_per_task: int = 128, time_budget=None,
               log_file: str = "tune.jsonl", tuner: str | None = None, measure_option=None,
               early_stopping: int | None = None, seed=None, select_top: int | None = None,
               progress=sys.stderr, method: str = "template") -> list:
    """Tune every task of `mod` (see extract_tasks), most expected gain first; returns the
    tasks with the tuner's best GFLOPS in `task.best_flops`. The default of 128 trials per task
    fits a ResNet-18 (12 tasks, ~1.5 s per trial on 2 cores: a trial is a compile) in about
    40 minutes; the spaces have hundreds to a few thousand configs. Measurements are appended to
    `log_file` batch by batch; running again with the same log resumes (trials already
    logged count and are not measured again). `time_budget` (seconds or "30m") stops tuning
    after the batch in flight when it runs out; `progress` is a stream for the progress bar
    (None: quiet). The default `measure_option` times candidates in the regime the model will
    run them in (see model_outgrows_cache): when the model's weights outgrow the cores' own
    caches, each candidate's weights are evicted before every timed call (LocalRunner's
    enable_cpu_cache_flush), since in the model the other layers' weights push them out.
    With a runner that measures on other machines (kiln.autotvm.cluster.ClusterRunner), its
    `parallel_tasks` tasks are tuned at once (see tune_tasks).
    Last, unless `select_top` is 0, each task's default and `select_top` best configs are
    timed inside the compiled model and the log records which ran fastest there
    (kiln.autotvm.model_select: a compile of the model per rank and a few seconds of runs;
    nothing when the log already holds those measurements). That runs here, so it is skipped
    (with a line on `progress`) when the runner measures elsewhere.

    `tuner` (default "xgb"), `early_stopping` and `select_top` (default 3) belong to this
    template method. `method="auto"` tunes every kernel of the model, with or without a
    template, with the template-free auto-scheduler (kiln.auto_schedule): trials_per_task *
    (number of kernels) trials in all, allocated across kernels by expected gain (its
    TaskScheduler), searched by its own evolutionary search; given any of those three, it
    is an error that names them, not a setting silently ignored.

    Example:
        >>> tune_model(mod, params, trials_per_task=64, log_file="t.jsonl")  # doctest: +SKIP
    """
    if method not in ("template", "auto"):
        raise ValueError(f"method must be 'template' or 'auto', got {method!r}")
    if method == "auto":
        given = [name for name, value in (("tuner", tuner), ("early_stopping", early_stopping),
                                          ("select_top", select_top)) if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: options of method='template'; "
                             f"method='auto' searches with the auto-scheduler's own "
                             f"evolutionary search and task scheduler")
    tuner = "xgb" if tuner is None else tuner
    select_top = 3 if select_top is None else select_top
    _check_options(tuner, trials_per_task, time_budget)     # before the model is compiled
    if isinstance(select_top, bool) or not isinstance(select_top, int) or select_top < 0:
        raise ValueError(f"select_top must be an int >= 0, got {select_top!r}")
    if measure_option is None:
        # Generated programs are compared with the kernel's default schedule's outputs: the
        # rules make them right by construction, as a template's configs are, and this
        # checks it (a program that differs is logged wrong_answer and never picked).
        measure_option = _measure.measure_option(
            runner=_measure.LocalRunner(enable_cpu_cache_flush=flush_for(params),
                                        check_correctness=method == "auto"))
    if method == "auto":
        from ..auto_schedule.task import extract_search_tasks
        from ..auto_schedule.task_scheduler import TaskScheduler
        tasks = extract_search_tasks(mod, params, target)
        if tasks:
            scheduler = TaskScheduler(tasks, seed=seed)
            scheduler.tune(trials_per_task * len(tasks), measure_option=measure_option,
                           log_file=log_file, time_budget=time_budget, progress=progress)
            for task, t in zip(tasks, scheduler.tuners):
                task.best_flops = t.best_flops
        return tasks
    tasks = extract_tasks(mod, params, target)
    tune_tasks(tasks, trials_per_task, time_budget, log_file, tuner, measure_option,
               early_stopping, seed, progress)
    if select_top and getattr(measure_option.runner, "remote", False):
        if progress is not None:
            progress.write("in-model selection skipped: the runner measures on other "
                           "machines, and it times the whole model here\n")
    elif select_top:
        select_in_model(mod, params, target, log_file, top=select_top, progress=progress)
    return tasks


def _merged(tasks) -> list:
    """Tasks with one Task per key, in first-seen order (the same kernel in two models is
    tuned once, its counts and kernels added up): two tuners of one key at once would
    measure its configs twice."""
    merged: dict = {}
    for task in tasks:
        first = merged.setdefault(task.key, task)
        if first is not task:
            first.count += task.count
            first.kernels.extend(k for k in task.kernels if k not in first.kernels)
    return list(merged.values())


def tune_tasks(tasks, trials_per_task: int = 128, time_budget=None,
               log_file: str = "tune.jsonl", tuner: str = "xgb", measure_option=None,
               early_stopping: int | None = None, seed=None, progress=sys.stderr,
               parallel_tasks: int | None = None) -> list:
    """Tune `tasks` (Tasks, e.g. extract_tasks of one model or several, most gain first; a
    key given twice is tuned once) as tune_model does, without its in-model selection. Up to
    `parallel_tasks` tasks are tuned at once, each started in the given order as an earlier
    one finishes (default: the runner's `parallel_tasks`, else 1): a cluster's build slots
    and devices stay busy while one task's tuner waits for its batch or picks the next.
    Their batches go to one log.

    Example:
        >>> tasks = extract_tasks(mod_a, pa) + extract_tasks(mod_b, pb)   # doctest: +SKIP
        >>> tune_tasks(tasks, 64, log_file="t.jsonl", measure_option=opt)  # doctest: +SKIP
    """
    budget = _check_options(tuner, trials_per_task, time_budget)
    if measure_option is None:
        measure_option = _measure.measure_option()
    if parallel_tasks is None:
        parallel_tasks = getattr(measure_option.runner, "parallel_tasks", 1)
    if isinstance(parallel_tasks, bool) or not isinstance(parallel_tasks, int) \
            or parallel_tasks < 1:
        raise ValueError(f"parallel_tasks must be a positive int, got {parallel_tasks!r}")
    tasks = _merged(tasks)
    start = time.monotonic()
    bar = _Progress(progress, len(tasks), trials_per_task, budget, start)
    stop = threading.Event()            # the budget is spent, or a task failed
    started = []

    def out_of_time() -> bool:
        return budget is not None and time.monotonic() - start >= budget

    def tune_one(k, task):
        if stop.is_set():
            return
        started.append(task)
        t = None

        def callback(tuner_, configs, results):
            bar.show(k, tuner_)
            if stop.is_set() or out_of_time():
                raise _OutOfTime

        try:
            t = _make_tuner(tuner, task, seed, feature_pool=features)
            t.tune(trials_per_task, early_stopping=early_stopping,
                   measure_batch=_measure.create_measure_batch(task, measure_option),
                   callbacks=(callback,), log_file=log_file, remeasure_top=REMEASURE_TOP)
        except _OutOfTime:
            pass
        except BaseException:
            stop.set()
            raise
        finally:
            if t is not None:
                task.best_flops = t.best_flops
                bar.show(k, t, done=True)
        if out_of_time():
            stop.set()

    # One set of build and run workers serves every task: starting them (an interpreter
    # importing kiln and LLVM each) took seconds per task, as long as a dozen candidates.
    # So does one pool computing the cost model's features (started at the first plan).
    features = FeaturePool() if tuner == "xgb" else None
    try:
        if parallel_tasks == 1:
            for k, task in enumerate(tasks, 1):
                tune_one(k, task)
        else:
            with ThreadPoolExecutor(parallel_tasks, thread_name_prefix="kiln-tune") as pool:
                jobs = [pool.submit(tune_one, k, task) for k, task in enumerate(tasks, 1)]
                try:
                    for job in jobs:
                        job.result()
                except BaseException:   # (Ctrl-C too) the others stop after their batch
                    stop.set()
                    raise
    finally:
        measure_option.builder.close()
        measure_option.runner.close()
        if features is not None:
            features.close()
    if progress is not None and stop.is_set() and len(started) < len(tasks):
        left = len(tasks) - len(started)
        progress.write(f"time budget spent: {left} of {len(tasks)} tasks not tuned (they keep "
                       f"their default configs)\n")
    return tasks

"""Tuning a whole model's kernels: trials go where they are expected to gain most end to end.

The model's latency is f = sum_i w_i * g_i, with g_i the best time of kernel i found so far and
w_i how often the model calls it. After one warm-up round per task, each round of trials goes
to the task with the steepest expected descent of f (Ansor, OSDI'20, §6):

    dF/dt_i ~ w_i * (alpha * backward_i + (1 - alpha) * forward_i)
    backward_i = (g_i(t_i) - g_i(t_i - window rounds)) / (window rounds' trials)
    forward_i  = min(-g_i / t_i, beta * flop_i / best_throughput - g_i)

where `best_throughput` is the highest FLOP/s a similar task reached (one of the same
family: the same fused operators, as the kernel name says; a kernel is not expected to beat
its like by more than beta; a softmax's FLOP/s say nothing about a dense layer's). Tasks with the same slope are served
in order of weighted time. A task whose rounds bring nothing stops being chosen soon; a heavy
task that keeps improving gets most of the budget.

Example:
    >>> tasks = extract_search_tasks(mod, params)                       # doctest: +SKIP
    >>> TaskScheduler(tasks).tune(512, log_file="auto.jsonl")          # doctest: +SKIP
"""
from __future__ import annotations

import math
import re
import sys
import time

__all__ = ["TaskScheduler"]


def _family(task) -> str:
    """Tasks of one family compute the same fused operators (fused_nn_dense_add_3 and _7)."""
    return re.sub(r"_\d+$", "", getattr(task, "kernel_name", "") or task.key)


class TaskScheduler:
    """Allocates rounds of trials across tasks by expected end-to-end gain (see the module).

    `make_tuner(task)` builds each task's tuner (default: a SketchSearch); `weights` the
    calls per model run (default: each task's `count`).

    Example:
        >>> sched = TaskScheduler(tasks, seed=0)                       # doctest: +SKIP
        >>> sched.tune(256, trials_per_round=16, log_file="a.jsonl")   # doctest: +SKIP
        >>> sched.rounds                                               # doctest: +SKIP
        [0, 1, 2, 0, 0, 1, ...]
    """

    def __init__(self, tasks, weights=None, alpha: float = 0.2, beta: float = 2.0,
                 window: int = 3, seed=None, make_tuner=None):
        self.tasks = list(tasks)
        if not self.tasks:
            raise ValueError("a task scheduler needs at least one task")
        self.weights = [float(w) for w in (weights if weights is not None
                                           else [getattr(t, "count", 1) for t in self.tasks])]
        if len(self.weights) != len(self.tasks) or any(w <= 0 for w in self.weights):
            raise ValueError(f"weights must be one positive number per task, got {weights!r}")
        if not 0 <= alpha <= 1 or beta <= 0 or window < 1:
            raise ValueError(f"need 0 <= alpha <= 1, beta > 0, window >= 1; got {alpha}, "
                             f"{beta}, {window}")
        self.alpha, self.beta, self.window = alpha, beta, window
        if make_tuner is None:
            from .search import SketchSearch

            def make_tuner(task):
                return SketchSearch(task, seed=seed)
        self.tuners = [make_tuner(t) for t in self.tasks]
        self.history: list[list[float]] = [[] for _ in self.tasks]   # best cost after each round
        self.trials_at: list[list[int]] = [[] for _ in self.tasks]
        self.rounds: list[int] = []        # the task chosen for each round, in order
        # tasks that get no more rounds: a round measured nothing new (the space is spent,
        # or no program could be sampled), or nothing ever measured ok after the warm-up
        self.done: set[int] = set()

    # ---------------------------------------------------------------- allocation
    def _flop(self, k) -> float:
        try:
            return float(self.tasks[k].flop)
        except (ValueError, TypeError):
            return 0.0

    def gradient(self, k: int) -> float:
        """The expected change of the model's time per trial given to task k (negative: a
        gain); -inf for a task that has not had its warm-up round."""
        costs, trials = self.history[k], self.trials_at[k]
        if not costs:
            return -math.inf
        g, t = costs[-1], max(trials[-1], 1)
        if not math.isfinite(g):
            return 0.0                # nothing measured ok: nothing to expect
        costs = [c if math.isfinite(c) else g for c in costs]
        back = self.window if len(costs) > self.window else len(costs) - 1
        backward = (g - costs[-1 - back]) / max(t - trials[-1 - back], 1) if back else 0.0
        forward = -g / t
        family = _family(self.tasks[k])
        best_throughput = max((self._flop(j) / c[-1] for j, c in enumerate(self.history)
                               if c and math.isfinite(c[-1]) and c[-1] > 0
                               and _family(self.tasks[j]) == family), default=0.0)
        if best_throughput > 0 and self._flop(k) > 0:
            forward = min(forward, self.beta * self._flop(k) / best_throughput - g)
        return self.weights[k] * (self.alpha * backward + (1 - self.alpha) * forward)

    def choose(self) -> int | None:
        """The task to give the next round: one without its warm-up round first (in order),
        else the steepest expected descent; None when every task is done."""
        open_tasks = [k for k in range(len(self.tasks)) if k not in self.done]
        if not open_tasks:
            return None
        fresh = [k for k in open_tasks if not self.history[k]]
        if fresh:
            return fresh[0]
        return min(open_tasks, key=lambda k: (self.gradient(k),
                                               -self.weights[k] * self.history[k][-1]))

    # ---------------------------------------------------------------- the loop
    def tune(self, total_trials: int, trials_per_round: int = 16, measure_option=None,
             log_file=None, time_budget=None, progress=sys.stderr,
             measure_batches=None) -> "TaskScheduler":
        """Measure about `total_trials` programs in all (rounds of `trials_per_round`, each
        task's default schedule counted in its first), within `time_budget` (seconds or
        "30m"); logged to `log_file` as every tuner logs. `measure_batches`: task key ->
        callable (tests); else one measure batch per task on `measure_option`.

        Example:
            >>> sched.tune(256, log_file="auto.jsonl", time_budget="20m")  # doctest: +SKIP
        """
        from ..autotvm import measure as _measure
        from ..autotvm.tune_model import REMEASURE_TOP, parse_duration
        budget = parse_duration(time_budget)
        if isinstance(total_trials, bool) or not isinstance(total_trials, int) or \
                total_trials < 0:
            raise ValueError(f"total_trials must be a non-negative int, got {total_trials!r}")
        owned = measure_batches is None
        if owned:
            measure_option = measure_option or _measure.measure_option()
            measure_batches = {t.key: _measure.create_measure_batch(t, measure_option)
                               for t in self.tasks}
        # rounds small enough that every task gets its warm-up round within the budget
        trials_per_round = max(1, min(trials_per_round, total_trials // len(self.tasks)))
        start = time.monotonic()

        def out_of_time():
            return budget is not None and time.monotonic() - start >= budget

        spent = 0
        try:
            # Each tuner reads what the log holds of its task first (measuring nothing): a
            # resumed run's tasks start from their logged best, and their logged trials count.
            for k, tuner in enumerate(self.tuners):
                if log_file is not None:
                    tuner.tune(0, measure_batch=measure_batches[self.tasks[k].key],
                               log_file=log_file)
                if tuner.trials:
                    self.history[k].append(tuner.best_cost)
                    self.trials_at[k].append(tuner.trials)
                    spent += tuner.trials
            while spent < total_trials and not out_of_time():
                k = self.choose()
                if k is None:
                    break
                tuner = self.tuners[k]
                before = tuner.trials
                tuner.tune(tuner.trials + min(trials_per_round, total_trials - spent),
                           measure_batch=measure_batches[self.tasks[k].key],
                           log_file=log_file)
                done = tuner.trials - before
                self.history[k].append(tuner.best_cost)
                self.trials_at[k].append(tuner.trials)
                self.rounds.append(k)
                if done == 0 or not math.isfinite(tuner.best_cost):
                    self.done.add(k)
                spent += max(done, 1)
                if progress is not None:
                    best = f"{tuner.best_cost * 1e6:.1f} us" if math.isfinite(tuner.best_cost) \
                        else "-"
                    progress.write(f"[round {len(self.rounds)}] task {k} "
                                   f"{getattr(self.tasks[k], 'kernel_name', self.tasks[k].key)}"
                                   f": {tuner.trials} trials, best {best}; estimated model "
                                   f"time {self.estimated_time() * 1e3:.3f} ms\n")
            for k, tuner in enumerate(self.tuners):
                if tuner.trials and not out_of_time():
                    tuner.tune(tuner.trials, measure_batch=measure_batches[self.tasks[k].key],
                               log_file=log_file, remeasure_top=REMEASURE_TOP)
        finally:
            if owned:       # (the tasks' batches share the option's builder and runner)
                measure_option.builder.close()
                measure_option.runner.close()
        return self

    def estimated_time(self) -> float:
        """sum of weight * best time over the tasks measured so far (seconds)."""
        return sum(w * h[-1] for w, h in zip(self.weights, self.history)
                   if h and math.isfinite(h[-1]))

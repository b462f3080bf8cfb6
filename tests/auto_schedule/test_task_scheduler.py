"""The task scheduler gives rounds where the model's time is expected to fall most."""
import math

import pytest

from kiln.auto_schedule.task_scheduler import TaskScheduler


class _Task:
    def __init__(self, key, flop, count=1):
        self.key, self.flop, self.count = key, flop, count


class _Tuner:
    """A tuner whose best time after t trials follows `curve(t)`."""

    def __init__(self, curve):
        self.curve, self.trials, self.best_cost, self.calls = curve, 0, math.inf, []

    def tune(self, n_trial, measure_batch=None, log_file=None, remeasure_top=0):
        self.calls.append(n_trial)
        self.trials = max(self.trials, n_trial)
        self.best_cost = self.curve(self.trials)


def _scheduler(curves, weights=None, flops=None):
    tasks = [_Task(f"t{k}", (flops or [1e6] * len(curves))[k]) for k in range(len(curves))]
    tuners = iter([_Tuner(c) for c in curves])
    return TaskScheduler(tasks, weights=weights, make_tuner=lambda t: next(tuners))


def _run(sched, trials, per_round=16):
    sched.tune(trials, trials_per_round=per_round, progress=None,
               measure_batches={t.key: None for t in sched.tasks})
    return [sched.rounds.count(k) for k in range(len(sched.tasks))]


def test_every_task_gets_a_warm_up_round_first():
    sched = _scheduler([lambda t: 1e-3] * 3)
    _run(sched, 48)
    assert sched.rounds == [0, 1, 2]


def test_a_heavy_improving_task_gets_most_rounds_and_a_flat_one_few():
    # the slow kernel keeps getting faster; the fast one stays where it is
    improving = lambda t: 1e-3 * (1 + 4 / (1 + t / 16))        # noqa: E731
    flat = lambda t: 2e-4                                       # noqa: E731
    sched = _scheduler([flat, improving])
    rounds = _run(sched, 16 * 12)
    assert rounds[1] >= 3 * rounds[0], rounds
    assert sched.estimated_time() == pytest.approx(flat(0) + improving(sched.tuners[1].trials))


def test_weights_count_how_often_the_model_runs_a_kernel():
    same = lambda t: 1e-3 * (1 + 4 / (1 + t / 16))             # noqa: E731
    sched = _scheduler([same, same], weights=[1, 10])
    rounds = _run(sched, 16 * 10)
    assert rounds[1] > rounds[0], rounds


def test_total_trials_are_respected_and_the_best_are_remeasured_at_the_end():
    sched = _scheduler([lambda t: 1e-3, lambda t: 2e-3])
    _run(sched, 40)
    assert sum(t.trials for t in sched.tuners) == 40
    for tuner in sched.tuners:      # a final call that adds no trial: the re-measurement
        assert tuner.calls[-1] == tuner.trials


@pytest.mark.parametrize("kw, message", [
    ({"weights": [1, 0]}, "weights must be one positive number per task"),
    ({"alpha": 2}, "need 0 <= alpha <= 1"),
])
def test_bad_options_are_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        TaskScheduler([_Task("a", 1), _Task("b", 1)], make_tuner=lambda t: _Tuner(None), **kw)
    with pytest.raises(ValueError, match="at least one task"):
        TaskScheduler([], make_tuner=lambda t: None)


def test_a_kernel_is_not_measured_against_another_kind_of_kernel():
    # a softmax's FLOP/s say nothing about what a dense layer can reach: the slow, flat dense
    # layer still gets rounds although the softmax "could" be 40x faster by FLOP/s
    dense = _Task("dense", 1.67e7)
    dense.kernel_name = "fused_nn_dense_3"
    softmax = _Task("softmax", 3.3e5)
    softmax.kernel_name = "fused_nn_softmax_6"
    tuners = iter([_Tuner(lambda t: 4.1e-4), _Tuner(lambda t: 4.1e-5)])
    sched = TaskScheduler([dense, softmax], make_tuner=lambda t: next(tuners))
    rounds = _run(sched, 16 * 8)
    assert rounds[0] > rounds[1], rounds


class _Spent(_Tuner):
    """A tuner whose space is spent after its first round: later rounds measure nothing."""

    def tune(self, n_trial, measure_batch=None, log_file=None, remeasure_top=0):
        self.calls.append(n_trial)
        self.trials = min(max(self.trials, n_trial), 16)
        self.best_cost = self.curve(self.trials)


def test_a_task_that_measures_nothing_new_or_nothing_ok_is_dropped():
    spent = _Spent(lambda t: 1e-2)                  # slow, but nothing more to try
    failing = _Tuner(lambda t: math.inf)             # never an ok measurement
    improving = _Tuner(lambda t: 1e-3 * (1 + 4 / (1 + t / 16)))
    tuners = iter([spent, failing, improving])
    sched = TaskScheduler([_Task(f"t{k}", 1e6) for k in range(3)],
                          make_tuner=lambda t: next(tuners))
    rounds = _run(sched, 16 * 10)
    assert rounds[1] == 1 and rounds[0] <= 2, rounds        # warm-up, then dropped
    assert rounds[2] >= 7, rounds
    assert sched.done >= {0, 1}


def test_every_task_is_done_before_the_budget_stops_the_loop():
    sched = TaskScheduler([_Task("a", 1e6)], make_tuner=lambda t: _Spent(lambda t: 1e-3))
    _run(sched, 16 * 100)
    assert sched.rounds == [0, 0] and sched.done == {0}

"""tune_model end to end on a tiny net with real (isolated) measurement: every task tuned,
the log reused without re-measuring, a time budget honoured, the tuned model correct."""
import io
import sys
from collections import Counter

import numpy as np
import pytest
import torch

import kiln
from kiln.autotvm import (RecordWriter, apply_history_best, extract_tasks, load_records,
                          select_in_model)
from kiln.autotvm.record import MeasureInput, MeasureResult, cost_of
from kiln.autotvm.tune_model import model_outgrows_cache, parse_duration, tune_model
from kiln.frontend import from_pytorch
from template_checks import TinyConvNet


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = TinyConvNet().eval()
    x = torch.randn(1, 3, 12, 12)
    mod, params = from_pytorch(model, (x,))
    return model, x, mod, params


def _check_output(lib, model, x):
    ex = kiln.runtime.GraphExecutor(lib)
    ex.set_input(ex.get_input_names()[0], x.numpy())
    ex.run()
    with torch.inference_mode():
        ref = model(x).numpy()
    np.testing.assert_allclose(ex.get_output(0).numpy(), ref, rtol=1e-4, atol=1e-4)


def _lines(path):
    return sum(1 for _ in load_records(str(path)))


def test_tune_resume_and_apply(tiny, tmp_path):
    model, x, mod, params = tiny
    log = tmp_path / "tune.jsonl"
    out = io.StringIO()
    tasks = tune_model(mod, params, trials_per_task=3, log_file=str(log), tuner="random",
                       seed=0, progress=out)
    assert sorted(t.name for t in tasks) == ["conv2d_nchwc.x86", "dense_pack.x86"]
    assert all(t.best_flops > 0 for t in tasks)
    n = _lines(log)
    records = list(load_records(str(log)))
    # 3 trials a task, then each of its (at most 4 best) configs is measured twice more.
    per_config = Counter((inp.task_key, inp.config["index"]) for inp, _ in records
                         if not inp.in_model)
    assert len(tasks) <= len(per_config) <= 3 * len(tasks)
    assert set(per_config.values()) == {3}
    # Then, inside the model, each task's default and its (at most 3) other configs, once each.
    in_model = Counter((inp.task_key, inp.default) for inp, _ in records if inp.in_model)
    assert {key for key, _ in in_model} == {t.key for t in tasks}
    assert all(in_model[t.key, True] == 1 and 1 <= in_model[t.key, False] <= 2 for t in tasks)
    assert n == 3 * len(per_config) + sum(in_model.values())
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[0].startswith("[task 1/2]") and "GFLOPS" in lines[0]
    # The bar covers both tasks' trials and ends full, with the time left estimated.
    assert f"|{'#' * 24}| 6/6 trials [" in lines[1] and "<00:00]" in lines[1], lines
    assert lines[2] == "selecting in the model: 2 tasks, 3 variants of the model", lines
    assert lines[3].startswith("in the model: ") and "of 2 tuned tasks run" in lines[3]
    # Resumed: nothing is measured again.
    tune_model(mod, params, trials_per_task=3, log_file=str(log), tuner="random", progress=None)
    assert _lines(log) == n
    with apply_history_best(str(log)) as ctx:
        lib = kiln.compile(mod, params=params)
    assert not ctx.untuned
    _check_output(lib, model, x)


def test_time_budget_stops_after_the_batch_in_flight(tiny, tmp_path):
    _, _, mod, params = tiny
    log = tmp_path / "tune.jsonl"
    out = io.StringIO()
    tune_model(mod, params, trials_per_task=50, time_budget=1e-3, log_file=str(log),
               tuner="random", progress=out)
    # The first task's default config only; inside the model nothing is left to choose.
    assert _lines(log) == 1
    assert "time budget spent: 1 of 2 tasks not tuned" in out.getvalue()


@pytest.mark.parametrize("cache_bytes", [1 << 10, 1 << 30])
def test_default_measurement_follows_the_models_cache_regime(tiny, monkeypatch, cache_bytes):
    """By default a model whose weights outgrow the cores' own caches is tuned with each
    candidate's weights evicted before every call (as the model runs it); one that fits, warm."""
    # The module: kiln.autotvm's attribute of that name is the function.
    module = sys.modules["kiln.autotvm.tune_model"]
    from kiln.runtime.timing import can_flush_cache
    seen = []

    class Recording:
        best_flops = 0.0

        def tune(self, n_trial, measure_batch=None, **kwargs):
            seen.append(measure_batch.option)

    monkeypatch.setattr(module, "_make_tuner", lambda kind, task, seed, **kw: Recording())
    # per core, times the threads: 1 KB or 1 GB in all
    monkeypatch.setattr(module, "num_threads", lambda: 2)
    monkeypatch.setattr(module, "core_cache_bytes", lambda: cache_bytes // 2)
    _, _, mod, params = tiny                      # ~25 KB of weights
    tune_model(mod, params, trials_per_task=1, select_top=0, progress=None)
    assert len(seen) == 2 and seen[0] is seen[1]
    assert seen[0].runner.enable_cpu_cache_flush == (cache_bytes < 1 << 20 and can_flush_cache())


def test_workers_start_once_for_all_tasks(tiny, tmp_path, monkeypatch):
    """The build and run workers serve every task of the model and stop at its end."""
    from kiln.autotvm import measure
    started = []

    class Counted(measure.WorkerPool):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(measure, "WorkerPool", Counted)
    _, _, mod, params = tiny
    tasks = tune_model(mod, params, trials_per_task=2, log_file=str(tmp_path / "t.jsonl"),
                       tuner="random", select_top=0, progress=None)
    assert len(tasks) == 2 and _lines(tmp_path / "t.jsonl") >= 4
    assert len(started) == 2, started          # one builder pool, one runner pool
    assert all(not pool._workers for pool in started)     # stopped at the end


def test_model_outgrows_cache(monkeypatch):
    params = {"a": np.zeros(1000, "float32"), "b": kiln.nd.array(np.zeros(24, "float64"))}
    assert not model_outgrows_cache(params, 4192) and model_outgrows_cache(params, 4191)
    # Unknown sizes: flush, as TVM advises for whole models.
    assert model_outgrows_cache(None, 1 << 30) and model_outgrows_cache({}, 1 << 30)
    module = sys.modules["kiln.autotvm.tune_model"]
    monkeypatch.setattr(module, "core_cache_bytes", lambda: None)
    assert model_outgrows_cache(params)
    # The default budget is the per-core cache times kiln's threads (4192 bytes of params).
    monkeypatch.setattr(module, "num_threads", lambda: 2)
    monkeypatch.setattr(module, "core_cache_bytes", lambda: 2096)
    assert not model_outgrows_cache(params)
    monkeypatch.setattr(module, "core_cache_bytes", lambda: 2095)
    assert model_outgrows_cache(params)


def test_arguments_are_checked():
    assert parse_duration("30m") == 1800 and parse_duration("1.5h") == 5400
    assert parse_duration("90s") == 90 and parse_duration(2) == 2.0
    for bad in ("soon", "-3m", 0, True):
        with pytest.raises(ValueError, match="time budget"):
            parse_duration(bad)
    with pytest.raises(ValueError, match="unknown tuner"):
        tune_model(None, tuner="annealing")
    with pytest.raises(ValueError, match="trials_per_task"):
        tune_model(None, trials_per_task=0)
    with pytest.raises(ValueError, match="select_top"):
        tune_model(None, select_top=-1)
    for name in ("top", "rounds"):
        with pytest.raises(ValueError, match=f"{name} must be a positive int"):
            select_in_model(None, **{name: 0})


def test_tasks_name_the_kernels_they_cover(tiny):
    """extract_tasks attributes the compiled model's kernels to tasks by the names kiln.compile
    gives them: every kernel call of a task's kernels is one of its occurrences."""
    _, _, mod, params = tiny
    tasks = extract_tasks(mod, params, "llvm")
    calls = Counter(k["func"] for k in kiln.compile(mod, params=params).graph["kernels"])
    for t in tasks:
        assert t.kernels and sum(calls[name] for name in t.kernels) == t.count
    covered = [name for t in tasks for name in t.kernels]
    assert len(covered) == len(set(covered))
    assert all(name.startswith("fused_layout_transform") for name in set(calls) - set(covered))


def test_select_in_model(tiny, tmp_path):
    """Each task's default and best logged configs are timed inside the model, once per log;
    the choice is what apply_history_best then compiles, and never slower there than the
    default."""
    model, x, mod, params = tiny
    tasks = extract_tasks(mod, params, "llvm")
    log = tmp_path / "tune.jsonl"
    pairs = []
    for t in tasks:   # alone, configs 1..4 measured; the smaller the index the faster
        space = t.config_space
        for i, index in enumerate(range(1, 5)):
            pairs.append((MeasureInput(t.key, space.get(index).to_json(), "llvm"),
                          MeasureResult(((i + 1) * 1e-3,), "ok")))
    with RecordWriter(log) as w:
        w.write_batch(pairs)
    out = io.StringIO()
    choices = select_in_model(mod, params, "llvm", str(log), top=2, rounds=3,
                              run_seconds=0.01, progress=out)
    records = list(load_records(str(log)))
    measured = [(inp, res) for inp, res in records if inp.in_model]
    defaults = {t.key: t.default_config().to_json()["index"] for t in tasks}
    for t in tasks:
        got = sorted((inp.default, inp.config["index"]) for inp, _ in measured
                     if inp.task_key == t.key)
        best_two = [i for i in range(1, 5) if i != defaults[t.key]][:2]
        assert got == sorted([(True, defaults[t.key])] + [(False, i) for i in best_two])
    assert all(len(res.costs) == 3 and res.status == "ok" for _, res in measured)
    assert "selecting in the model: 2 tasks, 3 variants" in out.getvalue()
    assert {c.task_key for c in choices} == {t.key for t in tasks}
    with apply_history_best(str(log)) as ctx:
        lib = kiln.compile(mod, params=params)
    for c in choices:
        assert c.chosen_seconds <= c.default_seconds and ctx.best[c.task_key] == c.config
        times = [cost_of(inp, res) for inp, res in measured
                 if inp.task_key == c.task_key and inp.config["index"] == c.config["index"]]
        assert times == [c.chosen_seconds]
    _check_output(lib, model, x)
    # Again on the same log: nothing is compiled or measured, the answer is the same.
    size = log.stat().st_size
    again = select_in_model(mod, params, "llvm", str(log), top=2, progress=None)
    assert again == choices and log.stat().st_size == size
    # A task's candidate the model has not seen (a new best alone) is measured next time.
    t = tasks[0]
    new = next(i for i in range(5, 50) if i != defaults[t.key])
    with RecordWriter(log) as w:
        w.write_batch([(MeasureInput(t.key, t.config_space.get(new).to_json(), "llvm"),
                        MeasureResult((1e-4,), "ok"))])
    select_in_model(mod, params, "llvm", str(log), top=2, rounds=2, run_seconds=0.01,
                    progress=None)
    assert any(inp.in_model and inp.config["index"] == new for inp, _ in load_records(str(log)))

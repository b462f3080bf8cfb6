"""The auto-scheduler end to end: a model's kernels tuned with real (isolated) measurement,
the log applied at compile time, the programs really used (and keyed in the kernel cache),
outputs equal to PyTorch."""
import numpy as np
import pytest
import torch

import kiln
from kiln.autotvm import apply_history_best, load_records, tune_model
from kiln.autotvm.record import MeasureInput, MeasureResult, RecordWriter
from kiln.auto_schedule import Decisions
from kiln.auto_schedule.task import extract_search_tasks
from kiln.frontend import from_pytorch


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(24, 40)
        self.norm = torch.nn.LayerNorm(40)

    def forward(self, x):
        return torch.softmax(self.norm(torch.relu(self.fc(x))), -1)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    model = _Net().eval()
    x = torch.randn(16, 24)
    mod, params = from_pytorch(model, (x,))
    with torch.inference_mode():
        ref = model(x).numpy()
    return mod, params, x.numpy(), ref


def _run(lib, x):
    ex = kiln.runtime.GraphExecutor(lib)
    ex.set_input(ex.get_input_names()[0], x)
    ex.run()
    return ex.get_output(0).numpy()


def test_every_kernel_of_a_model_is_a_task(net):
    mod, params, _, _ = net
    names = [t.kernel_name for t in extract_search_tasks(mod, params)]
    assert len(names) == 3 and any("dense" in n for n in names) and \
        any("layer_norm" in n for n in names) and any("softmax" in n for n in names)


def test_tune_model_auto_logs_every_kernel_and_the_result_is_right(net, tmp_path):
    mod, params, x, ref = net
    log = tmp_path / "auto.jsonl"
    tasks = tune_model(mod, params, trials_per_task=4, log_file=str(log), method="auto",
                       seed=0, progress=None)
    records = list(load_records(str(log)))
    for task in tasks:
        mine = [(i, r) for i, r in records if i.task_key == task.key]
        assert any(i.default for i, _ in mine), task.kernel_name
        assert sum(not i.default for i, _ in mine) >= 1, task.kernel_name
        assert all(r.status == "ok" for _, r in mine), [r.message for _, r in mine]
    with apply_history_best(str(log)):
        lib = kiln.compile(mod, params=params)
    np.testing.assert_allclose(_run(lib, x), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("option", [{"tuner": "ga"}, {"early_stopping": 10},
                                    {"select_top": 0}, {"tuner": "xgb", "select_top": 3}])
def test_template_options_with_the_auto_method_are_errors(net, tmp_path, option):
    """tuner, early_stopping and select_top are the template method's: given with
    method="auto" they are an error naming them, before any work (nothing logged)."""
    mod, params, _, _ = net
    log = tmp_path / "auto.jsonl"
    with pytest.raises(ValueError, match=f"{', '.join(option)}: options of method='template'"):
        tune_model(mod, params, trials_per_task=4, log_file=str(log), method="auto",
                   progress=None, **option)
    assert not log.exists()


def _forge(path, task, config, default_cost=1e-3, cost=1e-6):
    with RecordWriter(str(path)) as w:
        w.write_batch([
            (MeasureInput(task.key, {"index": 0, "knobs": {}}, "llvm", default=True),
             MeasureResult((default_cost,), "ok")),
            (MeasureInput(task.key, config, "llvm"), MeasureResult((cost,), "ok"))])


def test_the_logged_program_is_the_one_compiled_and_the_cache_keys_it(net, tmp_path):
    mod, params, x, ref = net
    (task,) = [t for t in extract_search_tasks(mod, params) if "softmax" in t.kernel_name]
    config = task.sample(task.sketches[0], Decisions({"at:1": 0, "at:2": 0, "at:3": 0},
                                                     rng=0))
    log = tmp_path / "forged.jsonl"
    _forge(log, task, config.to_json())
    plain = kiln.compile(mod, params=params)            # (fills the kernel cache)
    with apply_history_best(str(log)):
        tuned = kiln.compile(mod, params=params)
    text = {str(k.name): str(k) for k in tuned.prim_funcs}
    softmax = next(t for n, t in text.items() if "softmax" in n)
    plain_softmax = next(str(k) for k in plain.prim_funcs if "softmax" in str(k.name))
    assert softmax != plain_softmax
    # what the program says: max, exp and sum at the root, then the output: four loop nests
    assert sum(line.startswith("  for ") for line in softmax.splitlines()) == 4, softmax
    np.testing.assert_allclose(_run(tuned, x), ref, rtol=1e-5, atol=1e-6)


def test_a_program_that_does_not_replay_falls_back_with_a_warning(net, tmp_path):
    mod, params, x, ref = net
    (task,) = [t for t in extract_search_tasks(mod, params) if "softmax" in t.kernel_name]
    bad = {"index": 1, "knobs": {"program": [["split", 99, 0, [4]]]}}
    from kiln.auto_schedule import Program
    bad["index"] = Program(bad["knobs"]["program"]).digest
    log = tmp_path / "bad.jsonl"
    _forge(log, task, bad)
    with pytest.warns(UserWarning, match="does not apply.*no stage 99"):
        with apply_history_best(str(log)):
            lib = kiln.compile(mod, params=params)
    np.testing.assert_allclose(_run(lib, x), ref, rtol=1e-5, atol=1e-6)


def test_a_kernel_asks_the_same_questions_whatever_the_answers(net, tmp_path):
    # kiln's kernel cache replays a kernel's recorded questions: a kernel first built from an
    # auto-scheduled program must still ask its template, or a later compile under a
    # template log would not be offered that template's config.
    from kiln.autotvm import ApplyFixedConfigs
    from kiln.autotvm.task import is_auto_task_key
    mod, params, x, ref = net
    (task,) = [t for t in extract_search_tasks(mod, params) if "dense" in t.kernel_name]
    log = tmp_path / "dense.jsonl"
    _forge(log, task, task.sample(task.sketches[0], Decisions(rng=1)).to_json())
    with apply_history_best(str(log)):
        kiln.compile(mod, params=params)
    with ApplyFixedConfigs({}) as ctx:
        lib = kiln.compile(mod, params=params)
    assert [k for k in ctx.fallbacks if "dense" in k and not is_auto_task_key(k)], \
        ctx.fallbacks
    np.testing.assert_allclose(_run(lib, x), ref, rtol=1e-5, atol=1e-6)

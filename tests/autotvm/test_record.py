"""Tuning records: line format, append/resume, damaged logs, best-config dispatch."""
import json
import logging
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kiln.autotvm.record import (
    RECORD_VERSION, STATUSES, ApplyHistoryBest, MeasureInput, MeasureResult, RecordFormatError,
    RecordVersionError, RecordWarning, RecordWriter, apply_history_best, best_by_task, cost_of,
    decode, encode, load_records, measured_configs,
)
from kiln.autotvm.task import DispatchContext

KEY_A = json.dumps(["test.matmul", [512, 512, 512, "float32"], "llvm"], separators=(",", ":"))
KEY_B = json.dumps(["test.conv", [1, 64, 56, 56], "llvm"], separators=(",", ":"))


def rec(key, index, costs, status="ok", default=False, message="", in_model=False):
    knobs = {"tile_i": [-1, 8, index % 5 + 1], "order": [1, 0, 2], "ann": ["unroll", "none"],
             "auto_unroll": 16}
    return (MeasureInput(key, {"index": index, "knobs": knobs}, "llvm", default=default,
                         in_model=in_model),
            MeasureResult(tuple(costs), status, message, all_cost=0.5, timestamp=1763820000.0 + index))


def load_quiet(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean log must load without any warning
        return list(load_records(path))


# ---------------------------------------------------------------------------- line format
def test_encode_decode_round_trip():
    for pair in (rec(KEY_A, 17, [1e-3, 2e-3], default=True),
                 rec(KEY_B, 3, [], status="compile_error", message="LLVM: bad IR «x»")):
        line = encode(*pair)
        assert "\n" not in line
        assert json.loads(line)["v"] == RECORD_VERSION
        assert decode(line) == pair
    assert json.loads(encode(*rec(KEY_A, 1, [1e-3], default=True)))["default"] is True
    assert "default" not in json.loads(encode(*rec(KEY_A, 1, [1e-3])))
    pair = rec(KEY_A, 2, [1e-3, 9.0], in_model=True)
    assert json.loads(encode(*pair))["in_model"] is True and decode(encode(*pair)) == pair
    assert "in_model" not in json.loads(encode(*rec(KEY_A, 1, [1e-3])))


json_leaf = st.one_of(st.integers(-2**40, 2**40), st.text(max_size=8),
                      st.floats(allow_nan=False, allow_infinity=False))
knob_values = st.one_of(json_leaf, st.lists(st.integers(-1, 64), max_size=4),
                        st.lists(st.sampled_from(["unroll", "vec", "none"]), max_size=3))


@settings(max_examples=60, deadline=None)
@given(index=st.integers(0, 10**18), knobs=st.dictionaries(st.text(min_size=1, max_size=6), knob_values, max_size=4),
       costs=st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=5),
       status=st.sampled_from(STATUSES), default=st.booleans())
def test_round_trip_property(index, knobs, costs, status, default):
    pair = (MeasureInput(KEY_A, {"index": index, "knobs": knobs}, "llvm -mcpu=znver5", default),
            MeasureResult(tuple(costs), status, "m", 1.5, 2.0))
    back = decode(encode(*pair))
    assert back == pair
    if status == "ok":  # mean against numpy, relative tolerance 1e-12
        assert back[1].mean == pytest.approx(np.mean(costs), rel=1e-12, abs=1e-300)
    else:
        assert math.isinf(back[1].mean)


@pytest.mark.parametrize("line, words", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"v":1,"target":"llvm","config":{"index":0,"knobs":{}},'
     '"result":{"costs":[1],"status":"ok","message":"","all_cost":0,"timestamp":0}}', "'task'"),
    ('{"v":1,"task":"k","target":"llvm","config":{"index":0,"knobs":{}},'
     '"result":{"costs":[1],"status":"fast","message":"","all_cost":0,"timestamp":0}}', "'fast'"),
    ('{"v":1,"task":"k","target":"llvm","config":{"index":-4,"knobs":{}},'
     '"result":{"costs":[1],"status":"ok","message":"","all_cost":0,"timestamp":0}}', "'index'"),
    ('{"v":1,"task":"k","target":"llvm","config":{"index":0,"knobs":{}},'
     '"result":{"costs":[],"status":"ok","message":"","all_cost":0,"timestamp":0}}', "at least one cost"),
])
def test_decode_names_what_is_wrong(line, words):
    with pytest.raises(RecordFormatError, match=words.replace("[", r"\[")):
        decode(line)


def test_decode_version_mismatch_and_constructor_errors():
    line = json.loads(encode(*rec(KEY_A, 0, [1e-3])))
    line["v"] = 7
    with pytest.raises(RecordVersionError, match="version 7, expected 1"):
        decode(json.dumps(line))
    with pytest.raises(RecordFormatError, match="unknown measurement status 'slow'"):
        MeasureResult((1.0,), "slow")
    with pytest.raises(RecordFormatError, match="finite"):
        MeasureResult((math.inf,), "ok")
    with pytest.raises(RecordFormatError, match="task key"):
        MeasureInput("", {"index": 0, "knobs": {}}, "llvm")


# ------------------------------------------------------------------------- writer / loader
def test_append_and_resume(tmp_path):
    path = tmp_path / "tune.jsonl"
    first = [rec(KEY_A, i, [1e-3 * (i + 1)]) for i in range(3)]
    second = [rec(KEY_A, i, [2e-3]) for i in range(3, 5)] + [rec(KEY_B, 0, [], "timeout")]
    with RecordWriter(path) as w:
        assert w.write_batch(first) == 3
        assert w.write_batch([]) == 0
    before = path.read_bytes()
    with RecordWriter(path) as w:  # a resumed run: same file, appends
        w.write_batch(second)
    after = path.read_bytes()
    assert after.startswith(before) and len(after) > len(before)
    assert load_quiet(path) == first + second
    assert len(after.decode().splitlines()) == 6


def test_bad_record_fails_batch_before_writing(tmp_path):
    path = tmp_path / "tune.jsonl"
    with RecordWriter(path) as w:
        w.write_batch([rec(KEY_A, 0, [1e-3])])
        size = path.stat().st_size
        bad = (MeasureInput(KEY_A, {"index": 1, "knobs": {"x": {1, 2}}}, "llvm"), MeasureResult((1e-3,), "ok"))
        with pytest.raises(RecordFormatError, match="not JSON"):
            w.write_batch([rec(KEY_A, 2, [1e-3]), bad])
    assert path.stat().st_size == size


def test_killed_writer_partial_last_line(tmp_path):
    path = tmp_path / "tune.jsonl"
    good = [rec(KEY_A, i, [1e-3]) for i in range(2)]
    with RecordWriter(path) as w:
        w.write_batch(good)
    partial = encode(*rec(KEY_A, 2, [1e-3]))[:40]  # the writer died mid-line: no newline
    with open(path, "a") as f:
        f.write(partial)
    with pytest.warns(RecordWarning, match=r"tune\.jsonl:3: skipped corrupt") as caught:
        assert list(load_records(path)) == good
    assert len(caught) == 1
    # Resuming after the crash: the new record must not be glued onto the partial line.
    resumed = rec(KEY_A, 3, [5e-4])
    with RecordWriter(path) as w:
        w.write_batch([resumed])
    with pytest.warns(RecordWarning, match=":3: "):
        assert list(load_records(path)) == good + [resumed]


def test_corrupt_line_in_the_middle(tmp_path):
    path = tmp_path / "tune.jsonl"
    lines = [encode(*rec(KEY_A, 0, [1e-3])), '{"v":1,"task":', "", encode(*rec(KEY_A, 1, [2e-3])),
             '{"v":1}']
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(RecordWarning) as caught:
        loaded = list(load_records(path))
    assert [inp.config["index"] for inp, _ in loaded] == [0, 1]
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert f"{path}:2:" in messages[0] and "not valid JSON" in messages[0]
    assert f"{path}:5:" in messages[1] and "missing field 'result'" in messages[1]


def test_version_mismatch_one_warning_with_count(tmp_path):
    path = tmp_path / "tune.jsonl"
    good = rec(KEY_A, 0, [1e-3])
    old = json.loads(encode(*rec(KEY_A, 1, [1e-3])))
    old["v"] = 0
    path.write_text("\n".join([json.dumps(old), encode(*good), json.dumps(old), json.dumps(old)]) + "\n")
    with pytest.warns(RecordWarning) as caught:
        assert list(load_records(path)) == [good]
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "3 tuning record(s)" in text and "version 0" in text and f"version {RECORD_VERSION}" in text


def test_missing_and_empty_file(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_records(missing)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert load_quiet(empty) == []


# --------------------------------------------------------------------------------- queries
def test_best_by_task_ignores_errors_and_keeps_earlier_on_tie():
    records = [
        rec(KEY_A, 0, [], "compile_error"),
        rec(KEY_A, 1, [3e-3, 5e-3]),   # mean 4e-3
        rec(KEY_A, 2, [2e-3, 4e-3]),   # mean 3e-3
        rec(KEY_A, 3, [1e-3, 3e-3]),   # mean 2e-3: the best
        rec(KEY_A, 4, [2e-3, 2e-3]),   # tie with index 3, later: loses
        rec(KEY_A, 5, [], "wrong_answer"),
        rec(KEY_B, 0, [], "runtime_error"),
    ]
    best = best_by_task(records)
    assert set(best) == {KEY_A}
    config, mean = best[KEY_A]
    assert config["index"] == 3
    assert mean == pytest.approx(np.mean([1e-3, 3e-3]), rel=1e-12)
    tie = best_by_task([rec(KEY_B, 7, [4e-3]), rec(KEY_B, 8, [4e-3])])
    assert tie[KEY_B][0]["index"] == 7


def test_measured_configs(tmp_path):
    path = tmp_path / "tune.jsonl"
    with RecordWriter(path) as w:
        w.write_batch([rec(KEY_A, 4, [1e-3]), rec(KEY_A, 9, [], "timeout"), rec(KEY_B, 1, [1e-3]),
                       rec(KEY_A, 4, [2e-3])])
    assert measured_configs(load_records(path), KEY_A) == {4, 9}
    assert measured_configs(load_records(path), KEY_B) == {1}
    assert measured_configs(load_records(path), "other") == set()


def test_apply_history_best_query_and_one_untuned_line(tmp_path, caplog):
    path = tmp_path / "tune.jsonl"
    with RecordWriter(path) as w:
        w.write_batch([rec(KEY_A, 1, [2e-3]), rec(KEY_A, 2, [1e-3]), rec(KEY_B, 0, [], "timeout")])
    ctx = apply_history_best(str(path))
    assert isinstance(ctx, ApplyHistoryBest) and isinstance(ctx, DispatchContext)
    assert DispatchContext.current() is None
    with caplog.at_level(logging.INFO, logger="kiln.autotvm"):
        with ctx:
            assert DispatchContext.current() is ctx
            got = ctx.query(KEY_A)
            assert got["index"] == 2 and got["knobs"]["tile_i"] == [-1, 8, 3]
            got["index"] = 99  # the caller's copy: later queries unchanged
            assert ctx.query(KEY_A)["index"] == 2
            for key in (KEY_B, "x1", "x2", "x1", KEY_B):  # only failed records for KEY_B
                assert dispatch(key) is None
    assert DispatchContext.current() is None
    assert ctx.untuned == {KEY_B, "x1", "x2"}
    lines = [r for r in caplog.records if r.name == "kiln.autotvm"]
    assert len(lines) == 1
    assert "3 of 4 tasks untuned" in lines[0].getMessage()
    assert lines[0].levelno == logging.WARNING


def dispatch(key):
    """What a template does: ask the current context, report a fallback to it."""
    ctx = DispatchContext.current()
    answer = ctx.query(key)
    if answer is None:
        ctx.on_fallback(key)
    return answer


def test_enclosing_context_answer_is_not_untuned(caplog):
    outer = ApplyHistoryBest([rec(KEY_A, 1, [2e-3])])
    inner = ApplyHistoryBest([rec(KEY_B, 2, [2e-3])])
    with caplog.at_level(logging.INFO, logger="kiln.autotvm"):
        with outer, inner:
            assert dispatch(KEY_A)["index"] == 1 and dispatch(KEY_B)["index"] == 2
            assert dispatch("x") is None
    assert inner.untuned == {"x"} and outer.untuned == set()
    lines = [r.getMessage() for r in caplog.records if r.name == "kiln.autotvm"]
    assert len(lines) == 1 and "1 of 3 tasks untuned" in lines[0]


def test_template_dispatch_end_to_end(tmp_path, rng, caplog):
    """kiln builds the logged best config of test.matmul; an unlogged shape falls back."""
    import kiln
    import kiln.autotvm.testing as testing
    from kiln.autotvm.task import Task
    from kiln.target import Target

    task = Task("test.matmul", (16, 16, 16, "float32"), "llvm")
    space = task.config_space
    default = task.default_config()
    path = tmp_path / "tune.jsonl"
    with RecordWriter(path) as w:
        w.write_batch([
            (MeasureInput(task.key, default.to_json(), "llvm", default=True), MeasureResult((4e-6,), "ok")),
            (MeasureInput(task.key, space.get(5).to_json(), "llvm"), MeasureResult((3e-6,), "ok")),
            (MeasureInput(task.key, space.get(6).to_json(), "llvm"), MeasureResult((), "runtime_error")),
        ])
    expected_text = str(kiln.lower(*task.instantiate(5)))
    with caplog.at_level(logging.INFO, logger="kiln.autotvm"):
        with Target("llvm"), apply_history_best(path) as ctx:
            s, tensors = testing.matmul(16, 16, 16, "float32")
            testing.matmul(8, 8, 8, "float32")   # no record: default config
            testing.matmul(4, 4, 4, "float32")   # no record: default config
    assert str(kiln.lower(s, tensors)) == expected_text
    assert len(ctx.untuned) == 2
    lines = [r.getMessage() for r in caplog.records if r.name == "kiln.autotvm"]
    assert len(lines) == 1 and "2 of 3 tasks untuned" in lines[0]
    f = kiln.build(s, tensors, target="llvm")
    a = rng.standard_normal((16, 16)).astype("float32")
    b = rng.standard_normal((16, 16)).astype("float32")
    c = np.zeros((16, 16), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)  # float32 sums of 16 products


def test_all_tuned_logs_nothing(caplog):
    ctx = ApplyHistoryBest([rec(KEY_A, 1, [2e-3])])
    with caplog.at_level(logging.INFO, logger="kiln.autotvm"), ctx:
        assert dispatch(KEY_A)["index"] == 1
    assert not [r for r in caplog.records if r.name == "kiln.autotvm"]


def test_a_config_measured_again_counts_with_its_median():
    # Config 5's first draw was lucky; measured again it is slower than config 6.
    records = [rec(KEY_A, 5, [0.5e-3]), rec(KEY_A, 6, [2e-3]), rec(KEY_A, 5, [3e-3]),
               rec(KEY_A, 5, [3.2e-3]), rec(KEY_A, 0, [2.5e-3], default=True),
               rec(KEY_A, 0, [0.4e-3], default=True), rec(KEY_A, 0, [2.6e-3], default=True)]
    config, cost = best_by_task(records)[KEY_A]
    assert config["index"] == 6 and cost == 2e-3
    assert ApplyHistoryBest(records).best[KEY_A]["index"] == 6    # the default's median: 2.5e-3


def test_never_slower_than_default():
    # Tuned config 5 ties the default's median and came first: the default wins.
    records = [rec(KEY_A, 5, [1e-3]), rec(KEY_A, 0, [1e-3], default=True),
               rec(KEY_A, 0, [1e-3], default=True), rec(KEY_A, 6, [2e-3])]
    assert best_by_task(records)[KEY_A][0]["index"] == 5
    assert ApplyHistoryBest(records).best[KEY_A]["index"] == 0
    # The default measured fastest of all.
    records = [rec(KEY_B, 0, [1e-3], default=True), rec(KEY_B, 3, [1.5e-3])]
    with ApplyHistoryBest(records) as ctx:
        assert ctx.query(KEY_B)["index"] == 0
    # A tuned config strictly faster than the default is used; a failed default changes nothing.
    records = [rec(KEY_A, 0, [2e-3], default=True), rec(KEY_A, 8, [1e-3]),
               rec(KEY_B, 0, [], "timeout", default=True), rec(KEY_B, 2, [9e-3])]
    best = ApplyHistoryBest(records).best
    assert best[KEY_A]["index"] == 8 and best[KEY_B]["index"] == 2


def test_apply_history_best_from_damaged_log(tmp_path):
    path = tmp_path / "tune.jsonl"
    path.write_text(encode(*rec(KEY_A, 4, [1e-3])) + "\n{broken\n")
    with pytest.warns(RecordWarning, match=":2:"):
        ctx = ApplyHistoryBest(path)
    assert ctx.best[KEY_A]["index"] == 4


def test_logged_config_that_no_longer_fits_falls_back_to_default(caplog):
    # A log from an older template version: its knobs do not fit today's space. The kernel
    # still builds (default config), with a warning naming the task.
    import kiln
    from kiln.autotvm import testing
    from kiln.autotvm.task import Task
    from kiln.target import Target

    task = Task("test.matmul", (16, 16, 16, "float32"), "llvm")
    stale = {"index": 0, "knobs": {"no_such_knob": 3}}
    expected = str(kiln.lower(*task.instantiate(task.default_config())))
    with Target("llvm"), ApplyHistoryBest([(MeasureInput(task.key, stale, "llvm"),
                                            MeasureResult((1e-6,), "ok"))]) as ctx:
        with pytest.warns(UserWarning, match="does not fit its space"):
            s, tensors = testing.matmul(16, 16, 16, "float32")
    assert str(kiln.lower(s, tensors)) == expected
    assert ctx.untuned == {task.key}


def test_in_model_measurements_decide_where_present():
    """A task measured inside a model is answered from those measurements alone (each one's
    cost the median of its rounds); the default still wins a tie there. Tasks without them
    keep the choice made from the kernel measured alone, and best_by_task keeps the two apart."""
    records = [
        rec(KEY_A, 0, [3e-3], default=True), rec(KEY_A, 5, [1e-3]), rec(KEY_A, 6, [2e-3]),
        # Inside the model: 5 (best alone) is slower than the default, 6 is faster; 6's third
        # round was preempted, which its median ignores.
        rec(KEY_A, 0, [2e-4, 2.1e-4, 2e-4], default=True, in_model=True),
        rec(KEY_A, 5, [2.5e-4, 2.4e-4, 2.6e-4], in_model=True),
        rec(KEY_A, 6, [1.5e-4, 1.6e-4, 0.3], in_model=True),
        rec(KEY_B, 0, [3e-3], default=True), rec(KEY_B, 2, [1e-3]),
    ]
    assert ApplyHistoryBest(records).best == {KEY_A: records[2][0].config,
                                              KEY_B: records[7][0].config}
    assert best_by_task(records)[KEY_A][0]["index"] == 5
    config, cost = best_by_task(records, in_model=True)[KEY_A]
    assert config["index"] == 6 and cost == 1.6e-4
    assert cost_of(*records[5]) == 1.6e-4 and cost_of(*records[1]) == 1e-3
    tie = [rec(KEY_A, 5, [1e-3]), rec(KEY_A, 5, [2e-4], in_model=True),
           rec(KEY_A, 0, [2e-4], default=True, in_model=True)]
    assert ApplyHistoryBest(tie).best[KEY_A]["index"] == 0

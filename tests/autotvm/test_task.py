"""Templates, tasks and dispatch, with test.matmul built and checked against numpy."""
import json
import threading

import numpy as np
import pytest

import kiln
import kiln.autotvm.testing as testing
from kiln.autotvm.space import ConfigEntity, ConfigSpace, FallbackConfig
from kiln.autotvm.task import (ApplyFixedConfigs, DispatchContext, Task, compute_flop,
                               create_task, get_config, task_key, template)
from kiln.target import Target

SHAPE = (24, 40, 16, "float32")   # n, m, k: small, with several divisors each
TOL = dict(rtol=1e-5, atol=1e-5)  # float32 sums of 16 products


@pytest.fixture(scope="module")
def task():
    return Task("test.matmul", SHAPE)


def check_matmul(sched, tensors, rng):
    n, m, k, _ = SHAPE
    f = kiln.build(sched, tensors, target="llvm")
    a = rng.random((n, k), dtype=np.float32)
    b = rng.random((k, m), dtype=np.float32)
    c = np.zeros((n, m), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, **TOL)


def test_key_and_space(task):
    assert task.key == '["test.matmul",[24,40,16,"float32"],"llvm"]'
    assert json.loads(task.key) == ["test.matmul", [24, 40, 16, "float32"], "llvm"]
    space = task.config_space
    assert space is task.config_space            # collected once
    assert list(space.knobs) == ["tile_y", "tile_x", "tile_k", "order", "ann", "auto_unroll"]
    # divisors: 24 -> 8, 40 -> 8, 16 -> 5; 2 orders; 2 * 3 annotations; 3 unroll steps
    assert len(space) == 8 * 8 * 5 * 2 * 6 * 3


def test_flop(task):
    n, m, k, _ = SHAPE
    assert task.flop == 2 * n * m * k
    from kiln import te
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + A[j, i], name="C")
    assert compute_flop([A, C]) == 64 * 2 + 64


def test_instantiate_random_configs_build_and_match_numpy(task, rng):
    space = task.config_space
    picks = space.sample(np.random.default_rng(3), 4) + [task.default_config().index]
    for index in picks:
        cfg = space.get(index)
        sched, tensors = task.instantiate(cfg)
        check_matmul(sched, tensors, rng)
    # a JSON dict (from a record) and a bare index work too
    sched, tensors = task.instantiate(json.loads(json.dumps(space.get(picks[0]).to_json())))
    check_matmul(sched, tensors, rng)


def test_default_config_is_the_fallback(task):
    cfg = task.default_config()
    assert isinstance(cfg, ConfigEntity) and cfg.space is task.config_space
    assert cfg["tile_y"].size == [-1, 4]
    assert cfg["tile_k"].size == [-1, 4]
    lanes = Target("llvm").vector_width_bits // 32
    assert cfg["tile_x"].size[1] == max(f for f in (1, 2, 4, 5, 8, 10, 20, 40) if f <= lanes)
    assert cfg["ann"].anns == ["none", "vec"] and cfg["auto_unroll"].val == 0


def test_instantiate_enters_the_task_target():
    seen = []

    @template("test.sees_target")
    def sees_target(n):
        from kiln import te
        from kiln.target import current_target
        seen.append(str(current_target()))
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
        get_config().define_knob("k", [1, 2])
        return te.create_schedule(B.op), [A, B]

    t = Task("test.sees_target", [4], "llvm -mcpu=haswell")
    t.instantiate(1)
    assert seen[-1] == "llvm -mcpu=haswell"
    assert t.key == '["test.sees_target",[4],"llvm -mcpu=haswell"]'


def test_task_json_round_trip(task):
    data = json.loads(json.dumps(task.to_json()))
    assert data["module"] == "kiln.autotvm.testing"
    again = Task.from_json(data)
    assert again == task and again.key == task.key
    assert again.config_space.get(77).to_json() == task.config_space.get(77).to_json()
    assert create_task("test.matmul", list(SHAPE)).key == task.key


def test_errors():
    with pytest.raises(ValueError, match="unknown template 'nope.nothing'"):
        Task("nope.nothing", [1])
    with pytest.raises(TypeError, match="argument 1 .* not a JSON value"):
        Task("test.matmul", [4, object(), 4, "float32"])
    assert Task("test.matmul", [np.int64(4), 4, 4, "float32"]).key == task_key("test.matmul", [4, 4, 4, "float32"])
    with pytest.raises(ValueError, match="n must be a positive int"):
        Task("test.matmul", [0, 4, 4, "float32"]).config_space
    with pytest.raises(RuntimeError, match="outside a template"):
        get_config()
    with pytest.raises(ValueError, match="cannot import"):
        Task.from_json({"name": "x.y", "args": [], "target": "llvm", "module": "no_such_mod_kiln"})
    with pytest.raises(ValueError, match="already registered"):
        template("test.matmul")(lambda n: None)


def test_plain_call_uses_fallback_then_dispatch(rng):
    task = Task("test.matmul", SHAPE)
    cfg = task.config_space.get(1234)

    captured = []

    @template("test.capture")
    def capture(n):
        c = get_config()
        c.define_knob("v", [1, 2, 3])
        if c.is_fallback:
            c.fallback_with("v", 2)
        captured.append(c["v"].val)
        from kiln import te
        A = te.placeholder((n,), name="A")
        return te.create_schedule(A.op), [A]

    key = task_key("test.capture", [3])
    capture(3)
    assert captured[-1] == 2                          # no context: fallback
    with ApplyFixedConfigs({key: {"index": 2, "knobs": {"v": 3}}}) as outer:
        capture(3)
        assert captured[-1] == 3
        with ApplyFixedConfigs({}) as inner:           # no answer: asks the outer context
            assert DispatchContext.current() is inner
            capture(3)
            assert captured[-1] == 3
        with ApplyFixedConfigs({key: {"index": 0, "knobs": {"v": 1}}}):
            capture(3)
            assert captured[-1] == 1                   # the innermost answer wins
        assert DispatchContext.current() is outer
        capture(4)                                     # another key: nobody answers
        assert captured[-1] == 2 and outer.fallbacks == [task_key("test.capture", [4])]
    assert DispatchContext.current() is None

    with ApplyFixedConfigs({task.key: cfg}):
        sched, tensors = testing.matmul(*SHAPE)
    check_matmul(sched, tensors, rng)


def test_dispatch_stack_is_per_thread():
    seen = []
    with ApplyFixedConfigs({}):
        t = threading.Thread(target=lambda: seen.append(DispatchContext.current()))
        t.start(); t.join()
    assert seen == [None]


def test_fallback_config_index_matches_collected_space():
    fb = FallbackConfig()
    from kiln.autotvm.task import _TEMPLATES
    _TEMPLATES["test.matmul"].run(fb, list(SHAPE), Target("llvm"))
    space = Task("test.matmul", SHAPE).config_space
    assert isinstance(space, ConfigSpace)
    assert space.get(fb.index).to_json() == fb.to_json()

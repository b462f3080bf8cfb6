"""AutoTVM on VDLA: the conv2d template's space and fallback, candidates built and measured by
the tuner's workers on simulated cycles, bad tiles classified, the tuned config dispatched."""
import numpy as np
import pytest

import kiln
from kiln import autotvm
from kiln.accel.vdla.conv2d import default_tiling
from kiln.accel.vdla.module import VDLAModule
from kiln.autotvm.measure_jobs import random_arguments
from kiln.autotvm.templates.vdla import CONV2D_INT8_VDLA_TEMPLATE, conv2d_int8_vdla
from kiln.target import Target

ARGS = [1, 32, 14, 14, 64, 3, 1, 1, 8, False]   # batch, C, H, W, O, k, stride, pad, shift, relu


def task(args=ARGS):
    return autotvm.Task(CONV2D_INT8_VDLA_TEMPLATE, args, "vdla")


def config(t, **knobs):
    space = t.config_space
    return space.get(space.index_of({**t.default_config().knobs, **knobs}))


def option():
    return autotvm.measure_option(builder=autotvm.LocalBuilder(timeout=60),
                                  runner=autotvm.LocalRunner(timeout=60, check_correctness=True))


def simulated_seconds(t, cfg):
    s, tensors = t.instantiate(cfg)
    f = kiln.build(s, tensors, target="vdla")
    return f(*[a.numpy() for a in random_arguments(f.function_info(f.entry))]).seconds


def test_space_and_fallback():
    t = task()
    knobs = t.config_space.knobs
    assert [v.val for v in knobs["tile_rows"]] == [1, 2, 7, 14]
    assert [v.val for v in knobs["tile_out_blocks"]] == [1, 2, 4]
    assert [v.val for v in knobs["vthreads"]] == [1, 2, 4]
    rows, obt, ibt, split = default_tiling(32, 14, 14, 64, 3, 1, 1, 2)
    d = t.default_config()
    assert (d["tile_rows"].val, d["tile_out_blocks"].val, d["tile_in_blocks"].val,
            d["vthreads"].val, d["split"].val) == (rows, obt, ibt, 2, split)
    assert t.flop == 2 * 64 * 14 * 14 * 32 * 9


def test_measured_cost_is_the_simulated_time_and_outputs_are_checked():
    t = task()
    configs = [t.default_config(), config(t, tile_rows=1, tile_out_blocks=1, tile_in_blocks=1,
                                          vthreads=1, split="rows")]
    with autotvm.create_measure_batch(t, option()) as batch:
        results = batch(configs)
    for cfg, res in zip(configs, results):
        assert res.status == "ok", res.message
        assert res.message == ""         # checked against the default config's outputs
        assert len(set(res.costs)) == 1  # the cycle model is deterministic
        assert res.costs[0] == pytest.approx(simulated_seconds(t, cfg), rel=1e-12)
    # The small tile reloads everything: latency hiding and reuse make the default faster.
    assert results[0].costs[0] < results[1].costs[0]


def test_bad_tiles_are_compile_errors_naming_why():
    t = autotvm.Task(CONV2D_INT8_VDLA_TEMPLATE, [1, 64, 56, 56, 64, 3, 1, 1, 8, False], "vdla")
    uneven = config(t, tile_rows=7, vthreads=2, split="rows")
    too_big = config(t, tile_rows=56, tile_out_blocks=4, tile_in_blocks=4, vthreads=1)
    with autotvm.create_measure_batch(t, option()) as batch:
        r_uneven, r_big = batch([uneven, too_big])
    assert r_uneven.status == "compile_error"
    assert "2 virtual threads do not divide" in r_uneven.message
    assert r_big.status == "compile_error"
    assert "buffer 'acc' needs 12544 acc entries" in r_big.message


def test_a_tuned_config_is_dispatched(tmp_path):
    t = task()
    log = tmp_path / "vdla.jsonl"
    tuner = autotvm.GridSearchTuner(t)
    tuner.tune(12, measure_option=option(), log_file=str(log))
    records = list(autotvm.load_records(str(log)))
    ok = [(r.costs[0], i.config) for i, r in records if r.status == "ok"]
    assert len(records) == 12 and ok
    best_cost, best = min(ok, key=lambda x: x[0])
    default_cost = simulated_seconds(t, t.default_config())
    assert best_cost <= default_cost            # the default is measured first
    with Target("vdla"), autotvm.apply_history_best(str(log)):
        s, tensors = conv2d_int8_vdla(*ARGS)
    tuned = kiln.build(s, tensors, target="vdla")
    s, tensors = t.instantiate(best)
    assert tuned.program == kiln.build(s, tensors, target="vdla").program
    # ... and the module round-trips through the description the tuner's workers exchange
    assert VDLAModule.from_dict(tuned.to_dict()).program == tuned.program
    arrays = [a.numpy() for a in random_arguments(tuned.function_info(tuned.entry))]
    assert tuned.time_evaluator(tuned.entry, repeat=2)(*arrays).results == \
        (pytest.approx(best_cost, rel=1e-12),) * 2
    np.testing.assert_array_equal(arrays[0], random_arguments(
        tuned.function_info(tuned.entry))[0].numpy())   # inputs are left as they were

"""Config spaces: sizes without enumeration, index <-> config, walks, JSON validation, fallbacks."""
import itertools
import json
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import te
from kiln.autotvm.space import ConfigSpace, FallbackConfig


def big_space() -> ConfigSpace:
    """> 1e9 points: two 5-way splits of 2^10, all orders of 6 axes, annotations, a knob."""
    space = ConfigSpace()
    space.define_split("a", 1024, num_outputs=5)
    space.define_split("b", 1024, num_outputs=5, policy="power2")
    space.define_reorder("r", range(6))
    space.define_annotate("ann", range(4), policy="try_unroll_vec")
    space.define_knob("k", [0, 8, 32, "x"])
    return space


BIG = big_space()


@pytest.mark.timing
def test_big_space_size_is_computed_not_enumerated():
    start = time.perf_counter()
    space = big_space()
    # C(10+4, 4) ordered factorizations of 2^10 into 5 parts, for both policies (powers of two
    # with a product <= 2^10 are the same set); 6!; 2^3 * 3; 4.
    expected = math.comb(14, 4) ** 2 * 720 * 24 * 4
    assert len(space) == expected > 10 ** 9
    assert time.perf_counter() - start < 2.0
    huge = ConfigSpace()
    huge.define_reorder("r", range(30))           # 30! points, never listed
    assert huge.size == math.factorial(30)       # beyond len()'s 2**63: .size
    cfg = huge.get(huge.size - 1)
    assert cfg["r"].perm == list(range(29, -1, -1))
    assert huge.from_json(cfg.to_json()).index == huge.size - 1
    assert len(set(huge.sample(0, 50))) == 50


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(BIG) - 1))
def test_index_config_round_trip(index):
    cfg = BIG.get(index)
    assert cfg.index == index
    data = json.loads(json.dumps(cfg.to_json()))
    assert BIG.from_json(data).index == index
    assert BIG.index_of(data["knobs"]) == index
    assert BIG.index_of(cfg.knobs) == index
    assert BIG.index_of_point(BIG.point(index)) == index
    split = cfg["a"].size
    assert split[0] == -1 and 1024 % math.prod(split[1:]) == 0
    assert sorted(cfg["r"].perm) == list(range(6))


def test_split_policies_match_brute_force():
    def brute(extent, parts, ok):
        out = set()
        for combo in itertools.product(range(1, extent + 1), repeat=parts - 1):
            if ok(combo, extent):
                out.add((-1,) + combo)
        return out

    divides = lambda c, e: e % math.prod(c) == 0
    pow2 = lambda c, e: all(f & (f - 1) == 0 for f in c) and math.prod(c) <= e
    for extent, parts in [(12, 3), (24, 2), (7, 3), (20, 3)]:
        for policy, ok in [("factors", divides), ("power2", pow2)]:
            space = ConfigSpace()
            space.define_split("s", extent, num_outputs=parts, policy=policy)
            got = {tuple(space.get(i)["s"].size) for i in range(len(space))}
            assert got == brute(extent, parts, ok), (extent, parts, policy)
            assert len(got) == len(space)
    space = ConfigSpace()
    space.define_split("s", 64, num_outputs=3, max_factor=4)
    assert all(max(space.get(i)["s"].size[1:]) <= 4 for i in range(len(space)))


def test_split_axis_from_itervar_and_apply():
    A = te.placeholder((48,), name="A")
    B = te.compute((48,), lambda i: A[i] * 2.0, name="B")
    space = ConfigSpace()
    space.define_split("t", B.op.axis[0], num_outputs=3)
    cfg = space.from_json({"index": space.index_of({"t": [-1, 4, 3]}), "knobs": {"t": [-1, 4, 3]}})
    s = te.create_schedule(B.op)
    axes = cfg["t"].apply(s, B, B.op.axis[0])
    assert len(axes) == 3 and s[B].leaf_iter_vars == axes
    with pytest.raises(ValueError, match="no constant extent"):
        ConfigSpace().define_split("t", te.reduce_axis((0, te.var("n")), "k"))


def test_neighbour_changes_exactly_one_knob_by_one_step():
    rng = np.random.default_rng(0)
    for index in BIG.sample(rng, 300):
        nxt = BIG.neighbour(index, rng)
        assert 0 <= nxt < len(BIG) and nxt != index
        before, after = BIG.point(index), BIG.point(nxt)
        diff = [k for k in range(len(before)) if before[k] != after[k]]
        assert len(diff) == 1 and abs(before[diff[0]] - after[diff[0]]) == 1


def test_walk_stays_in_range_and_moves():
    rng = np.random.default_rng(1)
    index = 0
    for _ in range(200):
        nxt = BIG.walk(index, rng, steps=1)
        assert 0 <= nxt < len(BIG)
        changed = sum(a != b for a, b in zip(BIG.point(index), BIG.point(nxt)))
        assert changed == 1
        index = BIG.walk(nxt, rng, steps=3)
    one = ConfigSpace()
    one.define_knob("only", [1])
    assert one.neighbour(0, 0) == 0 and one.walk(0, 0, 5) == 0


def test_sample_distinct_and_exhaustive():
    space = ConfigSpace()
    space.define_knob("a", [1, 2, 3])
    space.define_knob("b", [1, 2])
    assert sorted(space.sample(0, 6)) == list(range(6))
    got = BIG.sample(0, 1000)
    assert len(set(got)) == 1000 and all(0 <= i < len(BIG) for i in got)
    with pytest.raises(ValueError, match="cannot sample 7"):
        space.sample(0, 7)


def test_reorder_all_is_every_permutation_once():
    space = ConfigSpace()
    space.define_reorder("r", ["a", "b", "c", "d"])
    perms = [tuple(space.get(i)["r"].perm) for i in range(len(space))]
    assert sorted(perms) == sorted(itertools.permutations(range(4)))
    assert perms[0] == (0, 1, 2, 3)


def test_records_from_before_a_knob_was_appended_still_load():
    # A record written when the space ended at "ann": "k" takes its first candidate.
    older = ConfigSpace()
    older.define_split("a", 1024, num_outputs=5)
    older.define_split("b", 1024, num_outputs=5, policy="power2")
    older.define_reorder("r", range(6))
    older.define_annotate("ann", range(4), policy="try_unroll_vec")
    record = older.get(98765).to_json()
    cfg = BIG.from_json(record)
    assert cfg.index == 98765 and cfg["k"].val == 0
    assert cfg.to_json()["knobs"] == {**record["knobs"], "k": 0}
    # One that had a later candidate of "k" (its index says so) does not load without it.
    later = BIG.get(98765 + 3 * len(older)).to_json()
    del later["knobs"]["k"]
    with pytest.raises(ValueError, match="does not match"):
        BIG.from_json(later)


def test_from_json_errors_name_the_knob():
    cfg = BIG.get(12345).to_json()
    bad = json.loads(json.dumps(cfg)); bad["knobs"]["zzz"] = 1
    with pytest.raises(ValueError, match="unknown knob 'zzz'"):
        BIG.from_json(bad)
    bad = json.loads(json.dumps(cfg)); del bad["knobs"]["r"]
    with pytest.raises(ValueError, match="knob 'r' has no value"):
        BIG.from_json(bad)
    bad = json.loads(json.dumps(cfg)); bad["knobs"]["a"] = [-1, 3, 1, 1, 1]
    with pytest.raises(ValueError, match="knob 'a'"):
        BIG.from_json(bad)
    bad = json.loads(json.dumps(cfg)); bad["knobs"]["ann"] = ["vec", "none", "none", "none"]
    with pytest.raises(ValueError, match="knob 'ann'"):
        BIG.from_json(bad)
    bad = json.loads(json.dumps(cfg)); bad["knobs"]["k"] = 9
    with pytest.raises(ValueError, match="knob 'k'"):
        BIG.from_json(bad)
    bad = json.loads(json.dumps(cfg)); bad["index"] = cfg["index"] + 1
    with pytest.raises(ValueError, match="does not match"):
        BIG.from_json(bad)
    with pytest.raises(ValueError, match="out of range"):
        BIG.get(len(BIG))
    with pytest.raises(ValueError, match="'index' and 'knobs'"):
        BIG.from_json({"knobs": {}})


def test_define_errors():
    space = ConfigSpace()
    space.define_knob("x", [1, 2])
    with pytest.raises(ValueError, match="knob 'x' is defined twice"):
        space.define_knob("x", [3])
    with pytest.raises(ValueError, match="split policy"):
        space.define_split("s", 8, policy="nope")
    with pytest.raises(ValueError, match="not an order"):
        space.define_reorder("r", ["a", "b"], "candidate", candidate=[["a", "a"]])
    with pytest.raises(TypeError, match="not a JSON value"):
        space.define_knob("o", [object()])


def test_entity_define_is_noop_and_checks_membership():
    cfg = BIG.get(7)
    assert cfg.define_split("a", 1024, num_outputs=5) is None
    with pytest.raises(ValueError, match="knob 'zz'"):
        cfg.define_knob("zz", [1])


def test_fallback_defaults_and_heuristics():
    cfg = FallbackConfig()
    assert cfg.is_fallback
    cfg.define_split("x", 60, num_outputs=3)
    cfg.define_reorder("r", range(3))
    cfg.define_annotate("ann", range(2), policy="try_unroll_vec")
    cfg.define_knob("u", [0, 8])
    # Defaults: no tiling, identity order, no annotation, first value.
    assert cfg["x"].size == [-1, 1, 1] and cfg["r"].perm == [0, 1, 2]
    assert cfg["ann"].anns == ["none", "none"] and cfg["u"].val == 0
    cfg.fallback_split("x", [-1, 8, 16])     # innermost: largest divisor of 60 <= 16 is 15
    assert cfg["x"].size == [-1, 4, 15]      # then of 60/15 = 4: 4 <= 8
    cfg.fallback_with("ann", ["unroll", "vec"])
    assert cfg["ann"].anns == ["unroll", "vec"]
    with pytest.raises(ValueError, match="knob 'u'"):
        cfg.fallback_with("u", 3)
    with pytest.raises(KeyError, match="not defined yet"):
        cfg.fallback_split("nope", [-1, 2])
    space = cfg.space
    assert space.get(cfg.index).to_json() == cfg.to_json()


def test_str_lists_knobs():
    text = str(BIG)
    assert f"{len(BIG)} configs" in text and "r: reorder" in text and "a: split" in text

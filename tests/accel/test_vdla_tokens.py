"""Dependence tokens inserted into a sequential VDLA program: the hand-written protocol is
found again, every synced program runs race-free and exact, and no token is superfluous."""
import dataclasses

import numpy as np
import pytest

from kiln.accel.vdla import (Load, Program, Store, VDLADeadlockError, VDLAProgramError,
                             VDLARaceError,
                             simulate)
from kiln.accel.vdla.reference import gemm_dram, gemm_program, gemm_reference
from kiln.accel.vdla.tokens import insert_tokens, strip_tokens


@pytest.mark.parametrize("buffers", [1, 2])
def test_the_hand_written_tokens_are_found_again(buffers):
    p, _ = gemm_program(64, 64, 256, tm=16, tn=2, tk=4, buffers=buffers)
    assert insert_tokens(strip_tokens(p)) == p


def test_a_sequential_program_runs_wrong_without_tokens_and_right_with_them():
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (32, 128)).astype(np.int8)
    w = rng.integers(-128, 128, (32, 128)).astype(np.int8)
    p, _ = gemm_program(32, 32, 128, tm=16, tn=2, tk=2, buffers=2)
    bare = strip_tokens(p)
    with pytest.raises((VDLARaceError, AssertionError)):
        dram = gemm_dram(x, w)
        simulate(bare, dram)
        np.testing.assert_array_equal(dram["y"].reshape(32, 32), gemm_reference(x, w))
    dram = gemm_dram(x, w)
    simulate(insert_tokens(bare), dram)
    np.testing.assert_array_equal(dram["y"].reshape(32, 32), gemm_reference(x, w))


def test_every_inserted_token_is_needed():
    """Removing any one token (its push and its pop) breaks the run: a race, a deadlock or a
    wrong answer, as the simulator reports it."""
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (32, 64)).astype(np.int8)
    w = rng.integers(-128, 128, (32, 64)).astype(np.int8)
    p = insert_tokens(strip_tokens(gemm_program(32, 32, 64, tm=16, tn=2, tk=2, buffers=1)[0]))
    ins = p.instructions
    pushes = [(k, f) for k, i in enumerate(ins) for f in ("push_prev", "push_next")
              if getattr(i.deps, f)]
    assert pushes
    for k, flag in pushes:
        broken = list(ins)
        broken[k] = dataclasses.replace(ins[k], deps=dataclasses.replace(ins[k].deps, **{flag: False}))
        dram = gemm_dram(x, w)
        with pytest.raises((VDLADeadlockError, VDLARaceError, AssertionError)):
            simulate(Program(tuple(broken), p.regions, p.config), dram)
            np.testing.assert_array_equal(dram["y"].reshape(32, 32), gemm_reference(x, w))


def test_an_accumulator_load_after_a_store_waits_for_it():
    # Loads into the accumulators run on the compute module, so they order against stores
    # through s2c; inputs and outputs share no entries and get no token.
    p = Program((Store(0, "y", 0, 1, 1, 1), Load("acc", 0, "b", 0, 1, 1, 1)),
                {"y": ("out", 1), "b": ("acc", 1)})
    synced = insert_tokens(p)
    assert synced.instructions[0].deps.push_prev and synced.instructions[1].deps.pop_next
    apart = Program((Load("inp", 0, "x", 0, 1, 1, 1), Store(0, "y", 0, 1, 1, 1)),
                    {"x": ("inp", 1), "y": ("out", 1)})
    assert insert_tokens(apart) == apart


def test_a_program_with_tokens_is_refused():
    p, _ = gemm_program(32, 32, 64, tm=16, tn=2, tk=2, buffers=2)
    with pytest.raises(VDLAProgramError, match="strip_tokens it first"):
        insert_tokens(p)

"""Programs: steps recorded by State replay to the same schedule, survive JSON, and a step
that does not fit its kernel is an error naming it."""
import json

import pytest

import kiln
from kiln.auto_schedule import Program, ProgramError, State, replay
from kiln.testing.te_kernels import matmul


def _text(outputs, inputs, program):
    return str(kiln.lower(replay(outputs, program).schedule, inputs + outputs))


def test_recorded_steps_replay_to_the_same_loop_program():
    inputs, outputs = matmul()
    state = State(outputs)
    C = state.stage(outputs[0].op)
    i, j, k = C.leaf_iter_vars
    io, ii = state.split(C, i, [8])
    jo, j1, j2 = state.split(C, j, [4, 4])
    state.reorder(C, [io, jo, k, ii, j1, j2])
    fused = state.fuse(C, [io, jo])
    state.annotate(C, fused, "parallel")
    state.annotate(C, j2, "vectorize")
    state.pragma(C, fused, "auto_unroll_max_step", 16)
    program = state.program()
    direct = str(kiln.lower(state.schedule, inputs + outputs))
    again = Program(json.loads(json.dumps(program.to_json())))
    assert again == program and again.digest == program.digest
    assert _text(outputs, inputs, again) == direct
    assert str(program).splitlines()[:2] == ["split C i [8]", "split C j [4, 4]"]


def test_programs_are_immutable_and_named_by_their_steps():
    p = Program([["inline", 1]])
    with pytest.raises(AttributeError):
        p.steps = ()
    assert Program([["inline", 1]]).digest == p.digest != Program([["inline", 2]]).digest


@pytest.mark.parametrize("step, message", [
    (["warp", 2], "unknown step kind 'warp'"),
    (["split", 9, 0, [4]], "no stage 9"),
    (["split", 2, 7, [4]], "has no loop 7"),
    (["split", 2, 0, [0]], "lengths must be positive"),
    (["reorder", 2, [0, 0, 1]], "not a permutation"),
    (["annotate", 2, 0, "teleport"], "annotation 'teleport'"),
    (["annotate", 2, 2, "vectorize"], "cannot vectorize the reduction axis"),
    (["inline", 2, 5], "inline takes 1 arguments"),
    ("split", "a step is a list"),
])
def test_a_step_that_does_not_fit_names_itself(step, message):
    inputs, outputs = matmul()
    with pytest.raises(ProgramError, match=message):
        replay(outputs, [step])


def test_a_program_must_be_a_list():
    _, outputs = matmul()
    with pytest.raises(ProgramError, match="a program is a list of steps"):
        replay(outputs, {"split": 1})

"""Misuse of every schedule primitive raises a ScheduleError that names the stage and axis."""
import pytest

import kiln
from kiln import te
from kiln.te import ScheduleError


@pytest.fixture
def mm():
    A = te.placeholder((16, 16), name="A")
    B = te.placeholder((16, 16), name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    return A, B, C, D, k


def test_axis_of_another_stage(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"stage 'D'.*axis 'i'.*stage 'C'"):
        s[D].split(C.op.axis[0], factor=4)


def test_split_of_non_leaf(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    s[D].split(D.op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match=r"split on stage 'D'.*'i' was already split"):
        s[D].split(D.op.axis[0], factor=2)


def test_split_bad_factor(mm):
    s = te.create_schedule(mm[3].op)
    with pytest.raises(ScheduleError, match="exactly one of factor"):
        s[mm[3]].split(mm[3].op.axis[0])
    with pytest.raises(ScheduleError, match="must be positive"):
        s[mm[3]].split(mm[3].op.axis[0], factor=0)


def test_vectorize_reduction_axis(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"vectorize on stage 'C'.*reduction axis 'k'"):
        s[C].vectorize(k)


def test_parallel_reduction_axis(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"parallel on stage 'C'.*reduction axis 'k'"):
        s[C].parallel(k)


def test_compute_at_non_consumer(mm):
    A, B, C, D, k = mm
    E = te.compute((16,), lambda i: A[i, 0] * 2.0, name="E")
    s = te.create_schedule([D.op, E.op])
    with pytest.raises(ScheduleError, match=r"compute_at on stage 'C'.*'E' does not read"):
        s[C].compute_at(s[E], E.op.axis[0])


def test_compute_at_foreign_axis(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"compute_at on stage 'D'.*axis 'k'"):
        s[C].compute_at(s[D], k)


def test_reorder_duplicate_and_dropped_axis(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    i, j = D.op.axis
    with pytest.raises(ScheduleError, match=r"reorder on stage 'D'.*'i' is given more than once"):
        s[D].reorder(i, i)
    io, ii = s[D].split(i, factor=4)
    with pytest.raises(ScheduleError, match=r"reorder on stage 'D'.*'i' was already split"):
        s[D].reorder(j, i)


def test_fuse_not_adjacent_or_mixed(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    i, j = C.op.axis
    with pytest.raises(ScheduleError, match=r"fuse on stage 'C'.*adjacent"):
        s[C].fuse(i, k)
    with pytest.raises(ScheduleError, match=r"fuse on stage 'C'.*reduction axis"):
        s[C].fuse(j, k)


def test_inline_reduction_and_output(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"compute_inline on stage 'C'.*reduction"):
        s[C].compute_inline()
    with pytest.raises(ScheduleError, match=r"compute_inline on stage 'D'.*output"):
        s[D].compute_inline()


def test_schedule_placeholder(mm):
    A = mm[0]
    s = te.create_schedule(mm[3].op)
    with pytest.raises(ScheduleError, match=r"stage 'A'.*placeholder"):
        s[A].split(A.op.axis[0] if hasattr(A.op, "axis") else None, factor=2)


def test_attach_axis_split_afterwards(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    s[C].compute_at(s[D], D.op.axis[0])
    s[D].split(D.op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match=r"'C' is computed at axis 'i' of 'D'.*split"):
        kiln.lower(s, [A, B, D])


def test_rfactor_misuse(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"rfactor on stage 'D'.*not a reduction"):
        s.rfactor(D, D.op.axis[0])
    with pytest.raises(ScheduleError, match=r"rfactor on stage 'C'.*'i' is not a reduction axis"):
        s.rfactor(C, C.op.axis[0])


def test_cache_read_wrong_reader(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"cache_read of 'A'.*'D' does not read"):
        s.cache_read(A, "shared", [D])


def test_cache_write_after_scheduling(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match=r"cache_write on stage 'C'"):
        s.cache_write(C, "local")


def test_bind_needs_thread_axis(mm):
    s = te.create_schedule(mm[3].op)
    with pytest.raises(ScheduleError, match=r"bind on stage 'D'.*thread_axis"):
        s[mm[3]].bind(mm[3].op.axis[0], mm[3].op.axis[1])


def test_storage_align_misuse(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"storage_align on stage 'C'"):
        s[C].storage_align(C.op.axis[0], 8, 9)


@pytest.mark.parametrize("primitive", ["split", "tile", "fuse", "reorder", "vectorize", "unroll",
                                       "parallel", "pragma", "bind"])
def test_every_loop_primitive_rejects_a_foreign_axis(mm, primitive):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    foreign = C.op.axis[0]
    own = D.op.axis[1]
    calls = {
        "split": lambda: s[D].split(foreign, factor=2),
        "tile": lambda: s[D].tile(foreign, own, 2, 2),
        "fuse": lambda: s[D].fuse(foreign, own),
        "reorder": lambda: s[D].reorder(own, foreign),
        "vectorize": lambda: s[D].vectorize(foreign),
        "unroll": lambda: s[D].unroll(foreign),
        "parallel": lambda: s[D].parallel(foreign),
        "pragma": lambda: s[D].pragma(foreign, "auto_unroll_max_step", 4),
        "bind": lambda: s[D].bind(foreign, te.thread_axis("threadIdx.x")),
    }
    with pytest.raises(ScheduleError, match=rf"{primitive} on stage 'D'.*axis 'i'.*stage 'C'"):
        calls[primitive]()


def test_compute_at_placeholder_and_self(mm):
    A, B, C, D, k = mm
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"compute_at on stage 'A'.*placeholder"):
        s[A].compute_at(s[D], D.op.axis[0])
    with pytest.raises(ScheduleError, match=r"compute_at on stage 'D'.*own loop"):
        s[D].compute_at(s[D], D.op.axis[0])
    with pytest.raises(ScheduleError, match=r"compute_root on stage 'A'.*placeholder"):
        s[A].compute_root()


def test_compute_at_outside_a_consumer_is_rejected_at_lowering(mm):
    A, B, C, D, k = mm
    E = te.compute((16, 16), lambda i, j: D[i, j] * 2.0, name="E")
    s = te.create_schedule(E.op)
    # C is placed inside E's loop, but its consumer D runs at the root, before E.
    s[C].compute_at(s[E], E.op.axis[0])
    with pytest.raises(ScheduleError, match=r"'C'.*consumer 'D' is computed outside"):
        kiln.lower(s, [A, B, E])


def test_unknown_tensor_in_schedule(mm):
    A, B, C, D, k = mm
    other = te.compute((4,), lambda i: te.const(1.0), name="other")
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"'other' is not part of this schedule"):
        s[other]

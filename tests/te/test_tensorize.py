"""s[T].tensorize: loop nests replaced by declared intrinsics, checked against their
declarations; results against numpy."""
import re

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.te import ScheduleError
from kiln.tir import Broadcast, const
from kiln.tir.stmt import SeqStmt


def gemv_intrin(m, l, with_body=True, b_strides="any"):
    """c[i] = sum_k a[k] * b[i, k], written out in scalar loop IR."""
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    strides = [te.var("s"), 1] if b_strides == "any" else b_strides
    binds = {b: te.decl_buffer(b.shape, "float32", "B", strides=strides)}

    def lower(ins, outs):
        aa, bb = ins
        (cc,) = outs

        def dot(i):
            return sum((aa.vload([k]) * bb.vload([i, k]) for k in range(l)), const(0.0, "float32"))
        zero = const(0.0, "float32")
        body = SeqStmt.flatten([cc.vstore([i], dot(i)) for i in range(m)])
        reset = SeqStmt.flatten([cc.vstore([i], zero) for i in range(m)])
        update = SeqStmt.flatten([cc.vstore([i], cc.vload([i]) + dot(i)) for i in range(m)])
        return (body, reset, update) if with_body else (None, reset, update)

    return te.decl_tensor_intrin(c.op, lower, binds=binds, name=f"gemv{m}x{l}")


def matmul(n, m, l):
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((m, l), name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    return A, B, C


def run_matmul(s, A, B, C, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal([int(x) for x in A.shape]).astype("float32")
    b = rng.standard_normal([int(x) for x in B.shape]).astype("float32")
    c = np.zeros([int(x) for x in C.shape], "float32")
    kiln.build(s, [A, B, C])(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k_outside", [False, True])
def test_gemv_intrinsic_replaces_the_inner_nest(k_outside):
    A, B, C = matmul(12, 32, 48)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    jo, ji = s[C].split(j, factor=16)
    if k_outside:
        ko, ki = s[C].split(k, factor=16)
        s[C].reorder(i, jo, ko, ji, ki)
        s[C].tensorize(ji, gemv_intrin(16, 16))
    else:
        s[C].reorder(i, jo, ji, k)
        s[C].tensorize(ji, gemv_intrin(16, 48))
    text = str(kiln.lower(s, [A, B, C]))
    # The replaced loops are gone: only i, j.outer (and k.outer) remain as loops.
    loops = re.findall(r"for (\S+) in", text)
    assert loops == (["i", "j.outer", "k.outer"] if k_outside else ["i", "j.outer"])
    run_matmul(s, A, B, C)


def test_a_reduction_outside_needs_reset_and_update():
    A, B, C = matmul(4, 16, 32)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=16)
    s[C].reorder(i, ko, j, ki)
    s[C].tensorize(j, gemv_intrin(16, 16, with_body=True))
    run_matmul(s, A, B, C)
    # Whole reduction inside: the intrinsic's body is needed.
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[1], gemv_intrin(16, 32, with_body=False))
    with pytest.raises(ScheduleError, match="gave no body"):
        kiln.lower(s, [A, B, C])


def test_elementwise_intrinsic_with_vector_code():
    a = te.placeholder((8,), name="a")
    b = te.compute((8,), lambda i: a[i] * 2.0 + 1.0, name="b")
    intrin = te.decl_tensor_intrin(b.op, lambda ins, outs: outs[0].vstore(
        [0], ins[0].vload([0], 8) * Broadcast(const(2.0, "float32"), 8)
        + Broadcast(const(1.0, "float32"), 8)), name="affine8")
    X = te.placeholder((5, 24), name="X")
    Y = te.compute((5, 24), lambda i, j: X[i, j] * 2.0 + 1.0, name="Y")
    s = te.create_schedule(Y.op)
    jo, ji = s[Y].split(Y.op.axis[1], factor=8)
    s[Y].tensorize(ji, intrin)
    assert "ramp(" in str(kiln.lower(s, [X, Y]))
    x = np.random.default_rng(1).standard_normal((5, 24)).astype("float32")
    y = np.zeros_like(x)
    kiln.build(s, [X, Y])(x, y)
    np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)


def _errors_of(schedule_fn, shape=(8, 32, 32)):
    A, B, C = matmul(*shape)
    s = te.create_schedule(C.op)
    schedule_fn(s, C)
    with pytest.raises(ScheduleError) as info:
        kiln.lower(s, [A, B, C])
    message = str(info.value)
    assert "tensorize on stage 'C'" in message
    return message


def test_extent_mismatch_names_the_axis_and_both_extents():
    def sched(s, C):
        jo, ji = s[C].split(C.op.axis[1], factor=8)
        s[C].tensorize(ji, gemv_intrin(16, 32))
    msg = _errors_of(sched)
    assert "axis 'j' runs 8 iterations" in msg and "'i' has 16" in msg


def test_body_mismatch_names_what_differs():
    a = te.placeholder((32,), name="a")
    b = te.placeholder((16, 32), name="b")
    k = te.reduce_axis((0, 32), name="k")
    c = te.compute((16,), lambda i: te.sum(a[k] + b[i, k], axis=k), name="c")
    adder = te.decl_tensor_intrin(c.op, lambda ins, outs: None, name="gevadd")

    def sched(s, C):
        jo, ji = s[C].split(C.op.axis[1], factor=16)
        s[C].tensorize(ji, adder)
    msg = _errors_of(sched)
    assert "the stage computes `a[k]*b[i, k]`, the intrinsic `a[k] + b[i, k]`; they differ at " \
        "`a[k]*b[i, k]` against `a[k] + b[i, k]`" in msg


def test_operand_dtype_and_transposed_reads_are_mismatches():
    # The intrinsic reads b[k, i]; the stage reads B[j, k]: index order differs.
    a = te.placeholder((32,), name="a")
    b = te.placeholder((32, 16), name="b")
    k = te.reduce_axis((0, 32), name="k")
    c = te.compute((16,), lambda i: te.sum(a[k] * b[k, i], axis=k), name="c")
    transposed = te.decl_tensor_intrin(c.op, lambda ins, outs: None, name="gemv_t")

    def sched(s, C):
        jo, ji = s[C].split(C.op.axis[1], factor=16)
        s[C].tensorize(ji, transposed)
    assert "differ at" in _errors_of(sched)
    # float64 intrinsic on a float32 stage
    a64 = te.placeholder((32,), "float64", name="a")
    b64 = te.placeholder((16, 32), "float64", name="b")
    c64 = te.compute((16,), lambda i: te.sum(a64[k] * b64[i, k], axis=k), name="c")
    wide = te.decl_tensor_intrin(c64.op, lambda ins, outs: None, name="gemv64")

    def sched64(s, C):
        jo, ji = s[C].split(C.op.axis[1], factor=16)
        s[C].tensorize(ji, wide)
    assert "tensor 'A' is float32; the intrinsic's 'a' is float64" in _errors_of(sched64)


def test_strides_and_alignment_are_checked():
    # A compact (16, 32) operand cannot be a block of the 32-wide B rows... unless they are 32.
    def sched(s, C):
        jo, ji = s[C].split(C.op.axis[1], factor=16)
        s[C].tensorize(ji, gemv_intrin(16, 32, b_strides=[64, 1]))
    msg = _errors_of(sched)
    assert "operand 'b' (tensor 'B') has strides (32, 1)" in msg and "(64, 1)" in msg

    a = te.placeholder((8,), name="a")
    b = te.compute((8,), lambda i: a[i] + 1.0, name="b")
    aligned = te.decl_tensor_intrin(b.op, lambda ins, outs: None, binds={
        a: te.decl_buffer((8,), "float32", "a", offset_factor=8)}, name="inc8")
    X = te.placeholder((20,), name="X")
    Y = te.compute((16,), lambda i: X[i + 4] + 1.0, name="Y")
    s = te.create_schedule(Y.op)
    io, ii = s[Y].split(Y.op.axis[0], factor=8)
    s[Y].tensorize(ii, aligned)
    with pytest.raises(ScheduleError, match=r"starts at element `i.outer\*8 \+ 4`, which is not a "
                                            r"multiple of 8"):
        kiln.lower(s, [X, Y])


@pytest.mark.parametrize("k_outside", [False, True])
def test_tiles_cut_at_the_edge_run_the_plain_loops(k_outside):
    # 40 columns in tiles of 16 and 36 k in steps of 16: the last tiles are partial.
    A, B, C = matmul(6, 40, 36 if k_outside else 16)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=16)
    if k_outside:
        ko, ki = s[C].split(C.op.reduce_axis[0], factor=16)
        s[C].reorder(i, jo, ko, ji, ki)
    s[C].tensorize(ji, gemv_intrin(16, 16))
    # The plain loop over j.inner survives for the cut tiles only.
    assert "for j.inner in range(8)" in str(kiln.lower(s, [A, B, C]))
    run_matmul(s, A, B, C)


def test_loops_inside_are_refused():
    def attached(s, C):
        A = C.op.input_tensors()[0]
        AA = s.cache_read(A, "local", [C])
        jo, ji = s[C].split(C.op.axis[1], factor=16)
        s[AA].compute_at(s[C], ji)
        s[C].tensorize(ji, gemv_intrin(16, 32))
    assert "is computed at loop 'j.inner', inside the tensorized loops" in _errors_of(attached)


def test_axes_not_paired_must_stay_outside():
    def sched(s, C):
        i, j = C.op.axis
        io, ii = s[C].split(i, factor=2)
        jo, ji = s[C].split(j, factor=16)
        s[C].reorder(io, jo, ii, ji)
        s[C].tensorize(ii, gemv_intrin(16, 32))
    msg = _errors_of(sched)
    assert "axis 'i' runs 2 iterations inside the tensorized loop" in msg


def test_misuse_of_the_primitive_and_the_declaration():
    A, B, C = matmul(8, 32, 32)
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="expected an intrinsic"):
        s[C].tensorize(C.op.axis[1], "gemv")
    s[C].tensorize(C.op.axis[1], gemv_intrin(32, 32))
    with pytest.raises(ScheduleError, match="already tensorized"):
        s[C].tensorize(C.op.axis[0], gemv_intrin(32, 32))
    bad = te.decl_tensor_intrin(gemv_intrin(32, 32).op, lambda ins, outs: 42, name="bad")
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[1], bad)
    with pytest.raises(ScheduleError, match="returned 42"):
        kiln.lower(s, [A, B, C])
    x = te.placeholder((4,), name="x")
    y = te.compute((4,), lambda i: x[i] + 1.0, name="y")
    z = te.compute((4,), lambda i: y[i] * 2.0, name="z")
    with pytest.raises(ScheduleError, match="reads placeholders only"):
        te.decl_tensor_intrin(z.op, lambda ins, outs: None)
    with pytest.raises(ScheduleError, match="is float32\\[4\\] but its buffer 'xb' is declared int8"):
        te.decl_tensor_intrin(y.op, lambda ins, outs: None,
                              binds={x: te.decl_buffer((4,), "int8", "xb")})


def test_operand_dtypes_must_match_the_intrinsic():
    # int8 data through an intrinsic declared for uint8 data would read -1 as 255.
    from kiln.topi.x86.tensor_intrin import dot_u8s8_vnni
    A = te.placeholder((4, 64), "int8", name="A")
    W = te.placeholder((1, 16, 16, 4), "int8", name="W")
    ko = te.reduce_axis((0, 16), name="ko")
    ki = te.reduce_axis((0, 4), name="ki")
    C = te.compute((4, 16), lambda i, j: te.sum(
        A[i, ko * 4 + ki].astype("int32") * W[j // 16, ko, j % 16, ki].astype("int32"),
        axis=[ko, ki]), name="C")
    s = te.create_schedule(C.op)
    s[C].reorder(C.op.axis[0], ko, C.op.axis[1], ki)
    s[C].tensorize(C.op.axis[1], dot_u8s8_vnni(16))
    with pytest.raises(ScheduleError, match="tensor 'A' is int8; the intrinsic's 'data' is uint8"):
        kiln.lower(s, [A, W, C])

"""Misused GPU schedules and bad GPU input get errors that name what is wrong."""
import numpy as np
import pytest

import kiln
from kiln import te
from kiln.te.schedule import ScheduleError


def _vector_add(n=256):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    return A, B, te.create_schedule(B.op)


def test_bind_on_a_cpu_target():
    A, B, s = _vector_add()
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="threadIdx.x.*target llvm has no GPU threads"):
        kiln.build(s, [A, B], target="llvm")


def test_one_tag_two_extents_in_a_kernel():
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((64, 64), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=16)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], bx)
    s[B].set_scope("shared")
    _, btx = s[B].split(s[B].op.axis[1], factor=32)
    s[B].bind(btx, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="stage 'B'.*threadIdx.x with extent 32.*stage 'C'.*"
                                            "extent 16"):
        kiln.lower(s, [A, C], target="opencl")


def test_an_accelerator_scope_in_a_gpu_kernel():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((64,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=16)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], tx)
    s[B].set_scope("local.acc_buffer")
    with pytest.raises(kiln.codegen.CodegenError, match="buffer 'B' is in scope "
                                                        "'local.acc_buffer', an accelerator's"):
        kiln.build(s, [A, C], target="cuda")


def test_declared_extent_disagrees():
    A, B, s = _vector_add()
    _, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(tx, te.thread_axis((0, 32), "threadIdx.x"))
    with pytest.raises(ScheduleError, match="stage 'B'.*extent 64.*declared with extent 32"):
        kiln.lower(s, [A, B], target="cuda")


def test_bind_misuse():
    A, B, s = _vector_add()
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    with pytest.raises(ScheduleError, match="unknown thread tag 'warp.x'"):
        s[B].bind(tx, te.thread_axis("warp.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="both bound to threadIdx.x"):
        s[B].bind(bx, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="unknown memory scope 'texture'"):
        s[B].set_scope("texture")
    k = te.reduce_axis((0, 8), name="k")
    X = te.placeholder((4, 8), name="X")
    S = te.compute((4,), lambda i: te.sum(X[i, k], axis=k), name="S")
    s2 = te.create_schedule(S.op)
    with pytest.raises(ScheduleError, match="reduction axis 'k' cannot be bound to blockIdx.x.*"
                                            "threads of one block"):
        s2[S].bind(k, te.thread_axis("blockIdx.x"))
    with pytest.raises(ScheduleError, match="reduction axis 'k' cannot be bound to vthread"):
        s2[S].bind(k, te.thread_axis("vthread"))


def _row_sum(init=None):
    X = te.placeholder((4, 64), name="X")
    k = te.reduce_axis((0, 64), name="k")
    S = te.compute((4,), lambda i: te.sum(X[i, k], axis=k, init=init), name="S")
    s = te.create_schedule(S.op)
    _, ki = s[S].split(k, factor=16)
    s[S].bind(ki, te.thread_axis("threadIdx.x"))
    return X, S, s


def test_cross_thread_reduction_misuse():
    X, S, s = _row_sum(init=1.0)
    with pytest.raises(ScheduleError, match="stage 'S'.*initial value"):
        kiln.lower(s, [X, S], target="opencl")
    X, S, s = _row_sum()
    s[S].bind(s[S].op.axis[0], te.thread_axis("vthread", name="vy"))
    with pytest.raises(ScheduleError, match="stage 'S'.*inside virtual thread"):
        kiln.lower(s, [X, S], target="opencl")


def test_cross_thread_reduction_lowers_to_a_tree_with_barriers():
    X, S, s = _row_sum()
    s[S].bind(s[S].op.axis[0], te.thread_axis("blockIdx.x"))
    text = str(kiln.lower(s, [X, S], target="opencl"))
    steps = [line.strip() for line in text.splitlines() if "if threadIdx.x <" in line]
    assert steps == [f"if threadIdx.x < {d}:" for d in (8, 4, 2, 1)]
    assert text.count("thread_barrier()") == 5          # after the stores and each step
    assert "if threadIdx.x == 0:" in text                # one thread writes the result


def test_too_many_threads_and_too_much_shared_memory():
    A, B, s = _vector_add(4096)
    _, tx = s[B].split(B.op.axis[0], factor=512)
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="512 threads per block.*allows 256"):
        kiln.build(s, [A, B], target="opencl")
    from matmul_schedules import matmul, paper_schedule
    A, B, C = matmul(256, 256, 256)
    s = paper_schedule(A, B, C, threads=(8, 8), per_thread=(8, 8), k_tile=64)   # 2 x 64 KiB
    with pytest.raises(ScheduleError, match="shared memory.*stage 'A.shared'.*allows 49152"):
        kiln.build(s, [A, B, C], target="cuda")


def test_unbound_stage_on_a_gpu():
    A, B, s = _vector_add()
    with pytest.raises(kiln.codegen.CodegenError, match="buffer 'B' is written outside any GPU "
                                                        "kernel"):
        kiln.build(s, [A, B], target="opencl")


def test_device_arguments_are_checked(opencl_device):
    A, B, s = _vector_add()
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    mod = kiln.build(s, [A, B], target="opencl")
    a = kiln.nd.array(np.arange(256, dtype="float32"), device=opencl_device)
    with pytest.raises(TypeError, match="'B' must be an array on a opencl device"):
        mod(a, np.zeros(256, "float32"))
    with pytest.raises(ValueError, match="'B' has shape \\(100,\\), expected \\(256,\\)"):
        mod(a, kiln.nd.empty((100,), "float32", opencl_device))
    b = kiln.nd.empty((256,), "float32", opencl_device)
    mod(a, b)
    np.testing.assert_array_equal(b.numpy(), np.arange(256, dtype="float32") + 1)
    timing = mod.time_evaluator(mod.entry, number=3, repeat=2)(a, b)
    assert len(timing.results) == 2 and all(t > 0 for t in timing.results)


def test_missing_device_is_a_clear_error():
    from kiln.runtime.gpu import DeviceUnavailableError, device_api
    with pytest.raises(DeviceUnavailableError, match=r"opencl\(99\) does not exist|OpenCL"):
        device_api(kiln.opencl(99))

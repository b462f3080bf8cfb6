"""Schedules compiled for target="vdla": DMA copies, the tensorized GEMM, ALU requantization,
virtual threads interleaved with compiler-inserted tokens; results against numpy, latency
hiding measured, every token shown necessary."""
import dataclasses
import re

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.accel.vdla import Program, VDLADeadlockError, VDLARaceError
from kiln.accel.vdla.codegen import VDLACodegenError
from kiln.accel.vdla.dense import pack_data, pack_weight, reference, schedule_dense
from kiln.accel.vdla.module import VDLAModule


def run_dense(m, n, k, shift=8, seed=0, **tiles):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    s, args = schedule_dense(m, n, k, shift=shift, **tiles)
    f = kiln.build(s, args, target="vdla")
    y = np.zeros((m, n // 16, 16), np.int8)
    stats = f(pack_data(x), pack_weight(w), y)
    np.testing.assert_array_equal(y.reshape(m, n), reference(x, w, shift))
    return f, stats


@pytest.mark.parametrize("seed", range(5))
def test_random_shapes_and_tiles_are_exact(seed):
    rng = np.random.default_rng(seed)
    vthreads = int(rng.integers(1, 3))
    rows = int(rng.choice([4, 8, 16])) * vthreads
    blocks, chunk = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    m = rows * int(rng.integers(1, 3))
    n = 16 * blocks * int(rng.integers(1, 3))
    k = 16 * chunk * int(rng.integers(1, 4))
    run_dense(m, n, k, shift=int(rng.integers(0, 14)), seed=seed, rows=rows, blocks=blocks,
              chunk=chunk, vthreads=vthreads)


def test_virtual_threads_hide_load_latency():
    """The paper's Fig. 10 effect on one compute-bound product: with two virtual threads the
    load module fills one thread's buffers while the GEMM core works for the other."""
    shape = dict(m=256, n=128, k=512, rows=128, blocks=8, chunk=2)
    _, one = run_dense(**shape, vthreads=1)
    _, two = run_dense(**shape, vthreads=2)
    assert one.gemm_uop_cycles == two.gemm_uop_cycles
    assert two.utilization >= one.utilization + 0.15, (one.utilization, two.utilization)


def test_the_lowered_program_interleaves_threads_and_places_tokens():
    s, args = schedule_dense(32, 32, 64, rows=16, blocks=2, chunk=2, vthreads=2)
    f = kiln.build(s, args, target="vdla")
    lines = f.get_source().splitlines()
    text = [re.sub(r"^\s*\d+\s+", "", line) for line in lines]
    # Thread 0's loads (its rows of A, then W), then thread 1's, then both GEMMs: the first
    # GEMM waits for thread 0's last load only.
    assert text[2].startswith("LOAD inp[0:16] <- A[0 + 8x2, stride 4]")
    assert text[3].startswith("LOAD wgt[0:4]") and text[3].endswith("(push l2c)")
    assert text[4].startswith("LOAD inp[16:32] <- A[32 + 8x2, stride 4]")
    assert text[5].startswith("LOAD wgt[4:8]") and text[5].endswith("(push l2c)")
    assert text[6].startswith("GEMM (0,0,0)") and "pop l2c" in text[6]
    assert text[7].startswith("GEMM (32,16,4)") and "pop l2c" in text[7]
    # Stores wait for the ALU; the requantization is mov, shr, min, max.
    alu = [t for t in text if t.startswith("ALU")]
    assert [a.split()[1] for a in alu[:4]] == ["mov", "shr", "min", "max"]
    assert all("pop c2s" in t for t in text if t.startswith("STORE"))


def test_every_compiled_token_is_needed():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (32, 64)).astype(np.int8)
    w = rng.integers(-128, 128, (32, 64)).astype(np.int8)
    s, args = schedule_dense(32, 32, 64, rows=16, blocks=2, chunk=1, vthreads=2)
    f = kiln.build(s, args, target="vdla")
    p = f.program
    pushes = [(k, flag) for k, i in enumerate(p.instructions)
              for flag in ("push_prev", "push_next") if getattr(i.deps, flag)]
    assert len(pushes) > 4
    for k, flag in pushes:
        ins = list(p.instructions)
        ins[k] = dataclasses.replace(ins[k], deps=dataclasses.replace(ins[k].deps, **{flag: False}))
        broken = VDLAModule(f.name, Program(tuple(ins), p.regions, p.config), f.args)
        y = np.zeros((32, 2, 16), np.int8)
        with pytest.raises((VDLADeadlockError, VDLARaceError, AssertionError)):
            broken(pack_data(x), pack_weight(w), y)
            np.testing.assert_array_equal(y.reshape(32, 32), reference(x, w, 8))


def test_modules_save_and_load_as_json(tmp_path):
    f, stats = run_dense(32, 32, 64, rows=16, blocks=2, chunk=2, vthreads=2)
    f.save(tmp_path / "dense.json")
    g = VDLAModule.load(tmp_path / "dense.json")
    assert g.program == f.program and g.args == f.args
    (tmp_path / "bad.json").write_text('{"name": "x"}')
    with pytest.raises(ValueError, match="not a saved VDLA module"):
        VDLAModule.load(tmp_path / "bad.json")
    with pytest.raises(TypeError, match="argument 'A' must be int8 \\(32, 4, 16\\)"):
        g(np.zeros((32, 64), np.int8), np.zeros((2, 4, 16, 16), np.int8),
          np.zeros((32, 2, 16), np.int8))


def test_what_vdla_cannot_run_is_named():
    A = te.placeholder((16, 16), "int8", name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] + 1, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(VDLACodegenError, match="VDLA cannot run .*mark copies between DRAM"):
        kiln.build(s, [A, B], target="vdla")

    # Written by hand (a te stage never reads its own buffer): acc[i] = acc[16 + i] + acc[i]
    # needs a mov into acc[i] first, which would overwrite the operand.
    from kiln.tir import Allocate, Buffer, BufferLoad, BufferStore, For, PrimFunc, SeqStmt, Var, const
    from kiln.tir.expr import Cast
    X, Z = Buffer.make("X", "int32", (32,)), Buffer.make("Z", "int8", (16,))
    acc = Buffer.make("acc", "int32", (48,), scope="local.acc_buffer")
    i, j, k = Var("i"), Var("j"), Var("k")
    body = SeqStmt.flatten(
        For(i, const(0), const(32), "serial", BufferStore(acc, BufferLoad(X, i), i),
            annotations=(("pragma_dma_copy", 1),)),
        For(j, const(0), const(16), "serial", BufferStore(
            acc, BufferLoad(acc, j + 16) + BufferLoad(acc, j + 32), j + 32),
            annotations=(("pragma_alu", 1),)),
        For(k, const(0), const(16), "serial", BufferStore(
            acc, BufferLoad(acc, k + 16) + BufferLoad(acc, k + 32), k + 16),
            annotations=(("pragma_alu", 1),)),
        For(i, const(0), const(16), "serial", BufferStore(Z, Cast("int8", BufferLoad(acc, i + 16)), i),
            annotations=(("pragma_dma_copy", 1),)))
    func = PrimFunc("inplace", [X, Z], Allocate(acc, const(48), body), [])
    with pytest.raises(VDLACodegenError, match="reads entries it also writes"):
        kiln.build(func, target="vdla")

    s, args = schedule_dense(256, 64, 256, rows=256, blocks=4, chunk=16)
    with pytest.raises(VDLACodegenError, match="needs 4096 inp entries from entry 0; the inp "
                                               "buffer has 2048"):
        kiln.build(s, args, target="vdla")
    with pytest.raises(ValueError, match="do not divide it"):
        schedule_dense(64, 64, 256, rows=24)

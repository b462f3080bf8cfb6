"""Int8 dense through the x86 int8 dot-product intrinsics, exact against numpy's integer
product; the VNNI forms' code where the machine cannot run it; the float32 register-tile
intrinsic."""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import te
from kiln.target import Target
from kiln.topi.x86.dense_int8 import (dense_int8, int8_layout, pack_int8_weight,
                                      schedule_dense_int8)
from kiln.topi.x86.tensor_intrin import gemm_f32_tile, int8_dot

HOST = Target("llvm")


def run_int8(a, w, rows=4, panels=None, target=None):
    lanes, group, dtype = int8_layout(target)
    wp = pack_int8_weight(w, lanes, group, dtype)
    A = te.placeholder(a.shape, str(a.dtype), name="A")
    W = te.placeholder(wp.shape, dtype, name="W")
    C = dense_int8(A, W, w.shape[0])
    s = schedule_dense_int8([C], rows=rows, panels=panels, target=target)
    f = kiln.build(s, [A, W, C], target=target or "llvm")
    c = np.zeros((a.shape[0], w.shape[0]), "int32")
    f(a, wp, c)
    return c, f


def reference(a, w):
    return a.astype(np.int64) @ w.astype(np.int64).T


@settings(max_examples=30, deadline=None, derandomize=True)
@given(m=st.integers(1, 24), n=st.integers(1, 50), k=st.integers(1, 70),
       rows=st.sampled_from([1, 2, 3, 4]), data_dtype=st.sampled_from(["uint8", "int8"]),
       seed=st.integers(0, 2 ** 16))
def test_random_shapes_and_tiles_are_exact(m, n, k, rows, data_dtype, seed):
    if int8_dot(HOST)[3] == "int8" and data_dtype == "int8":
        data_dtype = "uint8"          # vpdpbusd takes uint8 data
    rng = np.random.default_rng(seed)
    info = np.iinfo(data_dtype)
    a = rng.integers(info.min, info.max + 1, (m, k)).astype(data_dtype)
    w = rng.integers(-128, 128, (n, k)).astype("int8")
    c, _ = run_int8(a, w, rows)
    np.testing.assert_array_equal(c, reference(a, w))


def test_extremes_do_not_saturate():
    # 255 * -128 summed over 1024: any int16 intermediate sum would saturate.
    a = np.full((4, 1024), 255, "uint8")
    w = np.full((16, 1024), -128, "int8")
    w[1::2] = 127
    c, f = run_int8(a, w)
    np.testing.assert_array_equal(c, reference(a, w))
    intrin = int8_dot(HOST)[0].name
    asm = f.get_source("asm")
    assert ("vpmaddwd" if intrin == "dot_i16_avx2" else "vpdpbusd") in asm


@pytest.mark.parametrize("cpu, lanes, register", [("cascadelake", 16, "zmm"),
                                                  ("alderlake", 8, "ymm")])
def test_vnni_targets_emit_vpdpbusd(cpu, lanes, register):
    target = Target(f"llvm -mcpu={cpu}")
    assert int8_dot(target)[1:] == (lanes, 4, "int8")
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (8, 64)).astype("uint8")
    w = rng.integers(-128, 128, (32, 64)).astype("int8")
    lanes_, group, dtype = int8_layout(target)
    wp = pack_int8_weight(w, lanes_, group, dtype)
    A = te.placeholder(a.shape, "uint8", name="A")
    W = te.placeholder(wp.shape, dtype, name="W")
    C = dense_int8(A, W, 32)
    f = kiln.build(schedule_dense_int8([C], target=target), [A, W, C], target=target)
    asm = f.get_source("asm")
    assert re.search(rf"vpdpbusd\s+%{register}", asm)
    feature = "avx512vnni" if lanes == 16 else "avxvnni"
    if not HOST.has_feature(feature):
        pytest.skip(f"this CPU has no {feature}: the code was compiled, not run")
    c = np.zeros((8, 32), "int32")
    f(a, wp, c)
    np.testing.assert_array_equal(c, reference(a, w))


def test_layout_and_dtype_errors_are_named():
    with pytest.raises(ValueError, match="2-D int8 array"):
        pack_int8_weight(np.zeros((4, 4), "float32"), 8, 2, "int16")
    W = te.placeholder((2, 16, 16, 4), "int8", name="W")
    with pytest.raises(ValueError, match="takes uint8 data"):
        dense_int8(te.placeholder((4, 64), "int8", name="A"), W, 32)
    with pytest.raises(ValueError, match="cover 32 units and 64 k"):
        dense_int8(te.placeholder((4, 80), "uint8", name="A"), W, 32)
    with pytest.raises(ValueError, match="no int8 dot product"):
        int8_dot(Target("llvm -mcpu=x86-64"))


def test_pack_places_each_lane_group_together():
    w = np.arange(6 * 5, dtype="int8").reshape(6, 5)
    p = pack_int8_weight(w, 4, 2, "int16")
    assert p.shape == (2, 3, 4, 2) and p.dtype == np.int16
    for n in range(8):
        for k in range(6):
            want = w[n, k] if n < 6 and k < 5 else 0
            assert p[n // 4, k // 2, n % 4, k % 2] == want


@pytest.mark.parametrize("rows, panels", [(4, 2), (3, 1)])
def test_float_register_tile_intrinsic(rows, panels):
    lanes = 8
    m, n, k = 2 * rows, 2 * lanes * panels, 37
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], rows, lanes * panels)
    s[CL].compute_at(s[C], jo)
    li, lj = s[CL].op.axis
    (lk,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(lk, factor=1)
    s[CL].reorder(ko, li, lj, ki)
    s[CL].tensorize(li, gemm_f32_tile(rows, lanes, panels))
    f = kiln.build(s, [A, B, C])
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    c = np.zeros((m, n), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert "vfmadd" in f.get_source("asm")

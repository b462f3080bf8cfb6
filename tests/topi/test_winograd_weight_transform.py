"""winograd_weight_transform_numpy (U = G w G^T, packed [a, a, O/oc, I/ic, ic, oc]) against a
direct float64 computation per kernel, and against exact rational arithmetic: the float32
result is the nearest float32 to the exact G w G^T."""
from fractions import Fraction

import numpy as np
import pytest

from kiln.topi.nn.winograd import _MATRICES, winograd_matrices, winograd_weight_transform_numpy
from kiln.topi.utils import TopiError


def _reference(w, tile, in_block, out_block):
    """G w G^T kernel by kernel in float64, packed with explicit channel arithmetic."""
    _, g, _ = winograd_matrices(tile)
    o, i = w.shape[:2]
    a = tile + 2
    ref = np.empty((a, a, o // out_block, i // in_block, in_block, out_block))
    for oc in range(o):
        for ic in range(i):
            ref[:, :, oc // out_block, ic // in_block, ic % in_block, oc % out_block] = \
                g @ w[oc, ic].astype(np.float64) @ g.T
    return ref


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("shape, in_block, out_block", [
    ((32, 16), 16, 8), ((16, 3), 3, 16), ((8, 8), 1, 1),
    ((64, 96), 16, 16),        # 16 * 96 kernels per output block: several products per block
])
def test_matches_float64_reference(rng, tile, shape, in_block, out_block):
    w = rng.standard_normal(shape + (3, 3)).astype("float32")
    u = winograd_weight_transform_numpy(w, tile, in_block, out_block)
    ref = _reference(w, tile, in_block, out_block)
    assert u.shape == ref.shape and u.dtype == np.float32 and u.flags.c_contiguous
    # within one float32 rounding of the float64 value
    assert np.all(np.abs(u - ref) <= np.spacing(np.abs(ref).astype(np.float32)))


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-14), ("float16", 1e-3)])
def test_other_dtypes(rng, dtype, rtol):
    w = rng.standard_normal((16, 8, 3, 3)).astype(dtype)
    u = winograd_weight_transform_numpy(w, 4, 8, 16)
    ref = _reference(w, 4, 8, 16)
    assert u.dtype == np.dtype(dtype)
    np.testing.assert_allclose(u, ref, rtol=rtol, atol=rtol * np.abs(ref).max())


@pytest.mark.parametrize("tile", [2, 4])
def test_float32_result_is_correctly_rounded(rng, tile):
    """Each entry is the float32 nearest to the exact rational G w G^T (ties to even), not
    just close to it: F(4x4)'s thirds put some exact values (~0.5%) on float32 ties, where a
    float64 sum with G's rounded fractions falls on either side."""
    w = rng.standard_normal((8, 4, 3, 3)).astype("float32")
    g = [[Fraction(v) for v in row] for row in _MATRICES[tile][1]]
    a = tile + 2
    exact = np.empty((a, a, 1, 1, 4, 8), np.float32)
    for o in range(8):
        for i in range(4):
            k = [[Fraction(float(v)) for v in row] for row in w[o, i]]
            for p in range(a):
                for q in range(a):
                    value = sum(g[p][r] * k[r][c] * g[q][c] for r in range(3) for c in range(3))
                    # float() rounds correctly; a tie is exact in float64, so it stays a tie
                    exact[p, q, 0, 0, i, o] = np.float32(float(value))
    np.testing.assert_array_equal(winograd_weight_transform_numpy(w, tile, 4, 8), exact)


def test_errors():
    w = np.zeros((16, 16, 3, 3), "float32")
    with pytest.raises(TopiError, match="output tile must be one of"):
        winograd_weight_transform_numpy(w, 3, 16, 16)
    with pytest.raises(TopiError, match="not a multiple of block"):
        winograd_weight_transform_numpy(w, 4, 16, 5)

"""PyTorch's OpInfo samples through from_pytorch (kiln.testing.opinfo) against the recorded
statuses of tests/frontend/opinfo_status.json, and the converters' forms OpInfo's float32
samples miss (integer and bool dtypes, signed zeros and infinities, tiny arguments, bad
arguments).

By default every claimed OpInfo (all float32 samples passed when the file was written) runs
a fixed subset of its samples: the first, the last and one in the middle (about a minute).
KILN_OPINFO_FULL=1 runs every OpInfo the way `python -m kiln.testing.opinfo --update` does
(tens of minutes) and fails on any regression or newly passing OpInfo.

Tolerance (the runner's): float outputs within 1e-5 + 1e-4 * |eager| per element, nan and inf
where eager has them; integer and bool outputs exact.
"""
import math
import os

import numpy as np
import pytest
import torch

import kiln
from kiln.frontend import UnsupportedOpsError, from_pytorch
from kiln.runtime import GraphExecutor
from kiln.testing import opinfo

FULL = os.environ.get("KILN_OPINFO_FULL") == "1"
# The samples of a claimed OpInfo the default run checks: the first and the last (the full
# run, KILN_OPINFO_FULL=1, checks all of them).
SUBSET = 2


@pytest.fixture(scope="module")
def recorded():
    if not opinfo.STATUS_FILE.exists():
        pytest.skip("no status file: run python -m kiln.testing.opinfo --update")
    return opinfo.load_status()


def _subset(total):
    return sorted({0, total - 1}) if total > SUBSET else list(range(total))


@pytest.mark.skipif(FULL, reason="the full run checks every sample")
def test_claimed_opinfos_still_pass(recorded):
    claimed = {k: r for k, r in recorded["opinfos"].items() if r["status"] == "pass"}
    pairs = [(k, i) for k, r in claimed.items() for i in _subset(r["total"])]
    results = opinfo.run_samples(pairs, jobs=2)
    failed = [f"{k}[{i}] {r['status']}: {r['reason']}" for (k, i), r in zip(pairs, results)
              if r["status"] != "pass"]
    assert not failed, f"{len(failed)} samples of claimed OpInfos fail:\n" + "\n".join(failed)
    # torch's samples changed (another torch version): the status file needs an --update.
    changed = sorted({k for (k, _), r in zip(pairs, results) if r["total"] != claimed[k]["total"]})
    assert not changed, f"sample counts changed for {changed}: rerun --update"


@pytest.mark.skipif(not FULL, reason="tens of minutes: set KILN_OPINFO_FULL=1")
def test_every_opinfo_as_recorded(recorded):
    results = opinfo.run_opinfos(opinfo.opinfo_names(), probe=opinfo.PROBE)
    records = {k: opinfo.summarize_op(v) for k, v in results.items()}
    regressions, fixed = opinfo.compare_records(recorded["opinfos"], records)
    lines = [f"REGRESSED {k}: {want} -> {got}: {why}" for k, want, got, why in regressions]
    lines += [f"NOW PASSES {k} (was {want}): rerun --update" for k, want, _, _ in fixed]
    assert not lines, "\n".join(lines)


def test_coverage_doc_is_current(recorded):
    assert opinfo.COVERAGE_DOC.read_text(encoding="utf-8") == opinfo.render(recorded), \
        "docs/pytorch_coverage.md is stale: run python -m kiln.testing.opinfo --update"


def test_claimed_cover_many_aten_ops(recorded):
    s = recorded["summary"]
    print(f"{s['claimed']} OpInfos claimed, {s['aten_ops_covered']} ATen ops covered")
    assert s["aten_ops_covered"] >= 150


# --------------------------------------------------------------------------- the runner
def test_compare_states_the_difference():
    assert opinfo.compare(np.float32([1, 2]), torch.tensor([1.0, 2.00001])) is None
    assert "beyond" in opinfo.compare(np.float32([1, 2]), torch.tensor([1.0, 2.01]))
    assert "nan" in opinfo.compare(np.float32([np.nan]), torch.tensor([0.0]))
    assert "dtype" in opinfo.compare(np.int32([1]), torch.tensor([1]))
    assert "differ" in opinfo.compare(np.int64([1, 3]), torch.tensor([1, 2]))


def test_compare_accepts_rounding_no_worse_than_eager():
    # 0.1169 as the difference of terms ~500: eager float32 is 2.1e-5 off float64, kiln 3e-6
    exact = np.float64([0.11688, 1.0])
    got, want = np.float32([0.116883, 1.0]), torch.tensor([0.116859, 1.0])
    assert "beyond" in opinfo.compare(got, want)
    assert opinfo.compare(got, want, exact) is None
    # farther from float64 than eager is: still wrong
    assert "beyond" in opinfo.compare(np.float32([0.11695, 1.0]), want, exact)


def test_summary_of_an_opinfo():
    r = opinfo.summarize_op([{"status": "pass", "ops": ["aten.abs"]},
                             {"status": "unsupported", "reason": "no", "ops": ["aten.sgn"]}])
    assert (r["status"], r["passed"], r["total"], r["failing_samples"]) == ("partial", 1, 2, [1])
    assert r["aten_ops"] == ["aten.abs", "aten.sgn"]


# --------------------------------------------------------------------------- converters
class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def kiln_run(fn, *inputs):
    """fn imported, compiled and run on inputs: its first output as a numpy array."""
    mod, params = from_pytorch(Fn(fn).eval(), inputs)
    m = GraphExecutor(kiln.compile(mod, target="llvm", params=params))
    names = [p.name_hint for p in mod["main"].params]
    m.run(**{k: np.array(x.numpy(), order="C") for k, x in zip(names, inputs)})
    return m.get_output(0).numpy()


def exact(fn, *inputs):
    """kiln's output equals eager's (nan where eager has nan, zeros of either sign)."""
    got = kiln_run(fn, *inputs)
    want = fn(*inputs).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


INTS = torch.tensor([[-7, 0, 5], [3, -2, 9]], dtype=torch.int32)
SPECIAL = torch.tensor([0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan])


@pytest.mark.parametrize("fn", [torch.sign, torch.trunc, torch.abs, torch.isnan, torch.isinf,
                                torch.signbit, lambda x: torch.clamp(x, torch.tensor(-2, dtype=
                                torch.int32), torch.tensor([1, 2, 3], dtype=torch.int32)),
                                lambda x: torch.flip(x, (0, 1)), lambda x: x.any(1),
                                lambda x: x.all(), torch.bitwise_not,
                                lambda x: x & 6, lambda x: x ^ x.flip(0), lambda x: x | 1,
                                lambda x: torch.fmod(x, 4), lambda x: torch.diagonal(x, -1)],
                         ids=["sign", "trunc", "abs", "isnan", "isinf", "signbit", "clamp",
                              "flip", "any", "all", "not", "and", "xor", "or", "fmod",
                              "diagonal"])
def test_integer_forms(fn):
    exact(fn, INTS)


@pytest.mark.parametrize("fn", [torch.logical_not, lambda x: x ^ x.flip(0), lambda x: x & True,
                                torch.bitwise_not, torch.sign, lambda x: x.any(0)],
                         ids=["not", "xor", "and", "bitwise_not", "sign", "any"])
def test_bool_forms(fn):
    exact(fn, INTS > 0)


@pytest.mark.parametrize("fn", [torch.sign, torch.isnan, torch.isinf, torch.signbit,
                                torch.trunc, torch.expm1, torch.log1p, torch.lgamma,
                                torch.digamma, torch.i0, torch.special.i1,
                                torch.special.i0e, torch.special.i1e, torch.erfc,
                                torch.special.modified_bessel_k0,
                                torch.special.scaled_modified_bessel_k1,
                                torch.special.spherical_bessel_j0],
                         ids=["sign", "isnan", "isinf", "signbit", "trunc", "expm1", "log1p",
                              "lgamma", "digamma", "i0", "i1", "i0e", "i1e", "erfc", "k0",
                              "k1e", "j0"])
def test_special_values(fn):
    # exact, or a few float32 ulps for the composed functions (rtol 1e-6; atol 1e-12 at the
    # zeros of lgamma); signs of zeros
    got, want = kiln_run(fn, SPECIAL), fn(SPECIAL).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    if want.dtype.kind == "f":
        number = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]))


def test_atan2_quadrants_signed_zeros_and_infinities():
    values = torch.tensor([0.0, -0.0, 2.0, -3.0, math.inf, -math.inf, math.nan])
    y, x = torch.meshgrid(values, values, indexing="ij")
    got, want = kiln_run(torch.atan2, y, x), torch.atan2(y, x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    number = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]))


@pytest.mark.parametrize("fn", [torch.expm1, torch.log1p])
def test_expm1_log1p_keep_relative_accuracy_near_zero(fn):
    x = torch.tensor([1e-30, -1e-20, 3e-8, -2e-6, 1e-3, 0.5, -0.7, 20.0])
    # float32 relative accuracy (a few ulps), where exp(x) - 1 or log(1 + x) would lose all
    np.testing.assert_allclose(kiln_run(fn, x), fn(x).numpy(), rtol=1e-6, atol=0)


def test_unsupported_forms_are_reported():
    with pytest.raises(UnsupportedOpsError, match="bitwise_and of float32"):
        from_pytorch(Fn(lambda x: torch.ops.aten.bitwise_and.Tensor(x, x)).eval(),
                     (torch.ones(2),))


def test_shifts_past_the_bit_width():
    a = torch.tensor([-8, 5, 1, -1, 7], dtype=torch.int32)
    b = torch.tensor([1, 40, -1, 31, 0], dtype=torch.int32)
    exact(lambda x, y: x << y, a, b)
    exact(lambda x, y: x >> y, a, b)


def test_nan_is_the_extreme_of_argmax_argmin_and_median():
    x = torch.tensor([[1.0, math.nan, 3.0, math.nan], [4.0, 0.0, -1.0, 2.0]])
    exact(lambda t: torch.argmax(t, 1), x)
    exact(lambda t: torch.argmin(t, 1), x)
    exact(lambda t: torch.max(t, 1).indices, x)
    got, want = kiln_run(lambda t: torch.median(t, 1).values, x), torch.median(x, 1).values
    np.testing.assert_array_equal(got, want.numpy())
    exact(lambda t: torch.median(t, 1).indices, x)


def test_max_pool_indices_with_padding_ties_and_nan():
    x = torch.tensor([[[[1.0, 1.0, 0.0, 2.0], [1.0, math.nan, -math.inf, 2.0],
                        [-math.inf, -math.inf, 0.5, 0.5], [3.0, 3.0, 0.5, -1.0]]]])
    for kw in ({"kernel_size": 2}, {"kernel_size": 3, "stride": 1, "padding": 1},
               {"kernel_size": 2, "stride": 1, "dilation": 2}):
        exact(lambda t: torch.nn.functional.max_pool2d(t, return_indices=True, **kw)[1], x)


def test_scatter_reduce_without_self_and_index_put_accumulating():
    x = torch.tensor([[5, -3, 7], [2, 0, 1]])
    index = torch.tensor([[0, 0, 2], [1, 0, 0]])
    src = torch.tensor([[1, 9, 4], [6, -2, 3]])
    for reduce in ("sum", "prod", "amax", "amin", "mean"):
        exact(lambda t, i, s: t.scatter_reduce(1, i, s, reduce, include_self=False), x, index,
              src)
    # rows 0, 0 and 2 of a (3, 2) tensor: the repeated row adds twice
    exact(lambda t, i, v: t.index_put((i[0],), v, accumulate=True), x.float().t(), index,
          torch.tensor([0.5, -2.0]))


def test_hypot_erfc_and_copysign_where_naive_forms_fail():
    big = torch.tensor([3e30, -4e-30, 0.0, math.inf, 1.0])
    other = torch.tensor([4e30, 3e-30, -0.0, math.nan, 1e-20])
    np.testing.assert_allclose(kiln_run(torch.hypot, big, other), torch.hypot(big, other),
                               rtol=1e-6)
    tail = torch.tensor([-6.0, -1.0, 0.0, 0.3, 2.0, 5.0, 9.0, math.inf, math.nan])
    # the fit's relative error is 1.2e-7, the tail of 1 - erf(x) would be all rounding
    np.testing.assert_allclose(kiln_run(torch.erfc, tail), torch.erfc(tail), rtol=1e-6)
    exact(torch.copysign, torch.tensor([1.0, -2.0, 3.0, 0.0]),
          torch.tensor([-0.0, 0.0, -math.inf, -1.0]))
    exact(torch.fmax, torch.tensor([1.0, math.nan, math.nan]), torch.tensor([math.nan, 2.0,
                                                                              math.nan]))


def test_training_mode_dropout_is_refused():
    with pytest.raises(UnsupportedOpsError, match=r"dropout in training mode with p = 0.5"):
        from_pytorch(Fn(lambda x: torch.nn.functional.dropout(x, 0.5, training=True)).eval(),
                     (torch.ones(4),))


def test_empty_operands_fold_to_what_torch_gives():
    exact(lambda t: torch.var(t, 0), torch.ones(0, 3))
    exact(lambda t: t.sum(1), torch.ones(2, 0))

"""kiln.lower / kiln.build end to end: sources, targets, modules, errors, registry, timing."""
import io

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.driver import PrintIR, TimePasses


def _vadd(n=None):
    n = n if n is not None else te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=16)
    s[C].vectorize(xi)
    return s, [A, B, C]


@pytest.mark.parametrize("target,marker", [("llvm", "define"), ("c", "int32_t")])
def test_get_source(target, marker, rng):
    s, args = _vadd()
    f = kiln.build(s, args, target=target, name="vadd")
    assert marker in f.get_source()
    a, b = rng.standard_normal(45).astype("float32"), rng.standard_normal(45).astype("float32")
    c = np.zeros(45, "float32")
    f["vadd"](a, b, c)
    np.testing.assert_allclose(c, a + b)


def test_llvm_vector_code_and_mcpu():
    s, args = _vadd(64)
    host = kiln.build(s, args, target="llvm")
    assert "<16 x float>" in host.get_source()
    generic = kiln.build(s, args, target="llvm -mcpu=x86-64")
    asm = generic.get_source("asm")
    assert "zmm" not in asm            # baseline x86-64 has no AVX-512 registers
    a = np.arange(64, dtype="float32")
    c = np.zeros(64, "float32")
    generic(a, a, c)
    np.testing.assert_array_equal(c, 2 * a)


def test_wrong_arguments_are_named(rng):
    s, args = _vadd()
    f = kiln.build(s, args)
    a = np.zeros(8, "float32")
    with pytest.raises(Exception, match=r"'B' \(#1\).*float32"):
        f(a, np.zeros(8, "float64"), a.copy())
    with pytest.raises(Exception, match=r"'C' \(#2\).*n=8"):
        f(a, a.copy(), np.zeros(9, "float32"))
    with pytest.raises(Exception, match=r"'A' \(#0\).*rank|'A' \(#0\).*dimension"):
        f(np.zeros((2, 4), "float32"), a, a.copy())
    with pytest.raises(Exception, match="3"):
        f(a, a)


def test_time_evaluator_and_ndarrays():
    s, args = _vadd(1024)
    f = kiln.build(s, args, name="vadd")
    a = kiln.nd.array(np.ones(1024, "float32"))
    c = kiln.nd.empty((1024,), "float32")
    timer = f.time_evaluator("vadd", kiln.cpu(0), number=20, repeat=3, min_repeat_ms=1)
    result = timer(a, a, c)
    assert len(result.results) == 3 and 0 < result.median < 0.01
    assert result.min <= result.median <= result.max
    np.testing.assert_array_equal(c.numpy(), np.full(1024, 2, "float32"))


@pytest.mark.timing
def test_time_evaluator_cache_flush_measures_cold_operands():
    from kiln.runtime.timing import can_flush_cache
    if not can_flush_cache():
        pytest.skip("cache_flush needs a C compiler and an x86 CPU")
    # 1 MiB operands fit the last-level cache: warm calls find B and C there, flushed calls
    # read them from DRAM (1.6-1.75x slower, measured on the 2-core CI machine; the bound
    # leaves room for noise).
    n = 1 << 18
    s, args = _vadd(n)
    f = kiln.build(s, args, name="vadd")
    a, b, c = np.ones(n, "float32"), np.ones(n, "float32"), np.zeros(n, "float32")
    ratios = []
    for _ in range(3):
        warm = f.time_evaluator("vadd", number=20, repeat=5)(a, b, c).median
        cold = f.time_evaluator("vadd", number=20, repeat=5, cache_flush=True)(a, b, c).median
        ratios.append(cold / warm)
    assert sorted(ratios)[1] > 1.25, ratios
    np.testing.assert_array_equal(c, np.full(n, 2, "float32"))


def test_lower_prints_and_instruments():
    s, args = _vadd()
    out = io.StringIO()
    timer = TimePasses()
    func = kiln.lower(s, args, name="vadd", instruments=[PrintIR("vectorize", file=out), timer])
    assert "# after vectorize" in out.getvalue() and "ramp(" in out.getvalue()
    assert [n for n, _ in timer.times][:3] == ["simplify", "loop_partition", "vectorize"]
    text = str(func)
    assert text.startswith("def vadd(A: Buffer(float32, [n])")


def test_build_a_primfunc_directly(rng):
    s, args = _vadd(32)
    func = kiln.lower(s, args, name="main")
    f = kiln.build(func, target="llvm")
    a = rng.standard_normal(32).astype("float32")
    c = np.zeros(32, "float32")
    f(a, a, c)
    np.testing.assert_allclose(c, 2 * a)


def test_register_and_get_global_func():
    @kiln.register_func("test.kiln.double")
    def double(x):
        return 2 * x

    assert kiln.get_global_func("test.kiln.double")(21) == 42
    with pytest.raises(Exception, match="test.kiln.nope"):
        kiln.get_global_func("test.kiln.nope")
    assert kiln.get_global_func("test.kiln.nope", allow_missing=True) is None


def test_unbound_size_variable_is_reported():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * te.cast(m, "float32"), name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(Exception, match="'m' is used but not bound"):
        kiln.lower(s, [A, B])
    f = kiln.build(s, [A, B, m])
    a = np.ones(5, "float32")
    b = np.zeros(5, "float32")
    f(a, b, 3)
    np.testing.assert_array_equal(b, np.full(5, 3, "float32"))


def test_output_missing_from_arguments():
    s, (A, B, C) = _vadd()
    with pytest.raises(Exception, match="output 'C'.*not in the argument list"):
        kiln.lower(s, [A, B])

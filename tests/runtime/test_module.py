"""Module and PackedFunction on C functions with the KilnValue calling convention (kernels.c)."""
import threading

import numpy as np
import pytest

import kiln.runtime as rt
from kiln.runtime import FunctionInfo, ParamInfo

from helpers_native import address_of


def buf(name, dtype, *shape):
    return ParamInfo(name, "buffer", dtype, shape)


def scalar(name, dtype):
    return ParamInfo(name, "scalar", dtype)


INFOS = {
    "vadd": FunctionInfo("vadd", (buf("A", "float32", "n"), buf("B", "float32", "n"),
                                  buf("C", "float32", "n")), (("n", "int64"),)),
    "matmul": FunctionInfo("matmul", (buf("A", "float64", "n", "k"), buf("B", "float64", "k", "m"),
                                      buf("C", "float64", "n", "m")),
                           (("n", "int64"), ("k", "int64"), ("m", "int64"))),
    "axpy": FunctionInfo("axpy", (buf("X", "float32", "m", 4), buf("Y", "float32", "m", 4),
                                  scalar("alpha", "float32"), scalar("shift", "int32"),
                                  scalar("enable", "bool")), (("m", "int32"),)),
    "scalars": FunctionInfo("scalars", (buf("out", "int64", 3), buf("fout", "float64", 1),
                                        scalar("i", "int8"), scalar("u", "uint64"),
                                        scalar("f", "float64"), scalar("b", "bool"))),
    "count": FunctionInfo("count", (buf("counter", "int64", 1),)),
    "checked": FunctionInfo("checked", (buf("A", "int32", "n"),), (("n", "int64"),)),
    "empty3": FunctionInfo("empty3", (buf("A", "float32", "n"), buf("B", "float32", "n"),
                                      buf("C", "float32", "n")), (("n", "int64"),)),
}


@pytest.fixture(scope="module")
def mod(kernels_lib):
    return rt.Module(INFOS, lambda name: address_of(kernels_lib, name),
                     {"c": "/* kernels.c */", "asm": "; asm"}, entry="vadd",
                     keepalive=kernels_lib, type_key="c")


def rand(shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------ calls
def test_vadd_numpy_in_place(mod):
    a, b, c = rand(1000, seed=1), rand(1000, seed=2), np.zeros(1000, "float32")
    mod["vadd"](a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6, atol=0)     # float32 add: exact to 1 ulp


def test_entry_call_with_ndarrays_and_dlpack_tensors(mod):
    a, b = rand(64, seed=3), rand(64, seed=4)
    c = rt.empty(64, "float32")
    mod(rt.array(a), rt.array(b), c)
    np.testing.assert_allclose(c.numpy(), a + b, rtol=1e-6, atol=0)

    class Tensor:                               # only the DLPack protocol, like torch
        def __init__(self, data):
            self.data = data

        def __dlpack__(self, **kwargs):
            return self.data.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return (1, 0)

    out = np.zeros(64, "float32")
    mod(Tensor(a), rt.array(b), Tensor(out))
    np.testing.assert_allclose(out, a + b, rtol=1e-6, atol=0)


def test_matmul_binds_three_sizes(mod):
    a, b = rand((5, 7), "float64", 5), rand((7, 3), "float64", 6)
    c = np.zeros((5, 3))
    mod["matmul"](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


def test_scalars_travel_in_their_slots(mod):
    out, fout = np.zeros(3, "int64"), np.zeros(1)
    f = mod["scalars"]
    f(out, fout, -128, 2**64 - 1, 0.1, True)
    assert list(out) == [-128, -1, 1] and fout[0] == 0.1
    f(out, fout, np.int8(127), np.uint64(2**63), np.float32(1.5), np.bool_(False))
    assert list(out) == [127, -2**63, 0] and fout[0] == 1.5
    f(out, fout, 0, 5, 3, 1)                    # an int for a float scalar, 1 for a bool
    assert list(out) == [0, 5, 1] and fout[0] == 3.0
    f(out, fout, np.array(-3), 7, np.array(2.5), np.array(True))   # 0-d arrays
    assert list(out) == [-3, 7, 1] and fout[0] == 2.5


def test_axpy_scalars_and_constant_dimension(mod):
    x, y = rand((6, 4), seed=7), np.zeros((6, 4), "float32")
    mod["axpy"](x, y, 2.0, 3, True)
    np.testing.assert_allclose(y, 2 * x + 3, rtol=1e-6, atol=1e-6)
    before = y.copy()
    mod["axpy"](x, y, 2.0, 3, False)
    np.testing.assert_array_equal(y, before)


def test_zero_size_buffers(mod):
    empty = np.zeros(0, "float32")
    mod["vadd"](empty, empty.copy(), rt.empty(0, "float32"))


def test_readonly_inputs_are_accepted(mod):
    a = rand(16, seed=8)
    a.flags.writeable = False
    c = np.zeros(16, "float32")
    mod["vadd"](a, a, c)
    np.testing.assert_allclose(c, 2 * a, rtol=1e-6, atol=0)


def test_native_failure_raises_naming_the_function(mod):
    f = mod["checked"]
    f(np.array([1, 2], "int32"))
    with pytest.raises(rt.NativeCallError, match="'checked' failed with status 7"):
        f(np.array([-1, 2], "int32"))
    with pytest.raises(RuntimeError, match="status 2"):
        f(np.zeros(0, "int32"))


@pytest.mark.parametrize("messages", [{7: "checked: assert A[0] >= 0"},
                                      {7: "checked: assert A[0] >= 0"}.get])
def test_native_failure_with_the_code_generators_message(kernels_lib, messages):
    m = rt.Module({"checked": INFOS["checked"]}, lambda name: address_of(kernels_lib, name), {},
                  "checked", kernels_lib, status_messages=messages)
    with pytest.raises(rt.NativeCallError,
                       match=r"'checked' failed with status 7: checked: assert A\[0\] >= 0"):
        m(np.array([-1], "int32"))
    with pytest.raises(rt.NativeCallError, match=r"status 2 \(a check in the generated code"):
        m(np.zeros(0, "int32"))
    with pytest.raises(rt.NativeCallError, match="status 7 while being timed: checked: assert"):
        m.time_evaluator("checked")(np.array([-1], "int32"))


def test_concurrent_calls_from_threads(mod):
    f, errors = mod["vadd"], []

    def work(seed):
        try:
            for k in range(30):
                a, b = rand(20000, seed=seed * 100 + k), rand(20000, seed=seed * 100 + k + 1)
                c = np.empty_like(a)
                f(a, b, c)
                np.testing.assert_allclose(c, a + b, rtol=1e-6, atol=0)
        except Exception as err:     # noqa: BLE001  (reported in the main thread)
            errors.append(err)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ------------------------------------------------------------------ argument errors
def err(mod, name, *args):
    """The message of the ArgumentError that calling mod[name](*args) raises."""
    with pytest.raises(rt.ArgumentError) as info:
        mod[name](*args)
    return str(info.value)


def test_wrong_number_of_arguments(mod):
    a = np.zeros(4, "float32")
    msg = err(mod, "vadd", a, a)
    assert msg == "vadd(A: float32[n], B: float32[n], C: float32[n]) takes 3 argument(s), got 2"
    with pytest.raises(TypeError):
        mod(a, a, a, a)


def test_wrong_dtype(mod):
    a = np.zeros(4, "float32")
    assert err(mod, "vadd", a, np.zeros(4), a) == \
        "vadd: argument 'B' (#1) has dtype float64, expected float32"
    assert "has dtype >f4" in err(mod, "vadd", a, a, np.zeros(4, ">f4"))


def test_wrong_rank(mod):
    a = np.zeros(4, "float32")
    assert err(mod, "vadd", np.zeros((2, 2), "float32"), a, a) == \
        "vadd: argument 'A' (#0) has 2 dimension(s) (shape (2, 2)), expected 1 (shape ('n',))"


def test_constant_dimension_mismatch(mod):
    x = np.zeros((6, 4), "float32")
    msg = err(mod, "axpy", x, np.zeros((6, 5), "float32"), 1.0, 0, True)
    assert msg.startswith("axpy: argument 'Y' (#1) dimension 1: expected 4, got 5")


def test_symbolic_size_bound_inconsistently(mod):
    a = np.zeros(128, "float32")
    assert err(mod, "vadd", a, np.zeros(64, "float32"), a) == \
        "vadd: argument 'B' (#1) dimension 0: expected n=128 (bound by argument 'A'), got 64"
    msg = err(mod, "matmul", np.zeros((5, 7)), np.zeros((6, 3)), np.zeros((5, 3)))
    assert msg == ("matmul: argument 'B' (#1) dimension 0: expected k=7 (bound by argument "
                   "'A'), got 6")
    msg = err(mod, "matmul", np.zeros((5, 7)), np.zeros((7, 3)), np.zeros((5, 4)))
    assert msg == ("matmul: argument 'C' (#2) dimension 1: expected m=3 (bound by argument "
                   "'B'), got 4")


@pytest.mark.parametrize("position", [0, 1, 2])
def test_non_contiguous_arrays_are_rejected_for_every_buffer(mod, position):
    args = [np.zeros(8, "float32") for _ in range(3)]
    args[position] = np.zeros(16, "float32")[::2]
    msg = err(mod, "vadd", *args)
    name = "ABC"[position]
    assert msg.startswith(f"vadd: argument '{name}' (#{position}) is not C-contiguous")
    assert "np.ascontiguousarray" in msg
    args[position] = rt.from_dlpack(np.zeros(16, "float32")[::2])     # through an NDArray too
    assert "is not C-contiguous" in err(mod, "vadd", *args)


def test_fortran_order_is_rejected(mod):
    a = np.asfortranarray(np.zeros((3, 3)))
    assert "'A' (#0) is not C-contiguous" in err(mod, "matmul", a, np.zeros((3, 3)),
                                                 np.zeros((3, 3)))


def test_misaligned_data_is_rejected(mod):
    raw = np.zeros(4 * 9 + 1, "uint8")
    a = raw[1:].view("float32")          # float32 elements at an odd address
    ok = np.zeros(9, "float32")
    assert "is not aligned to its 4-byte elements" in err(mod, "vadd", a, ok, ok)


@pytest.mark.parametrize("args, fragment", [
    ((1.5, 7, 0.1, True), "argument 'i' (#2) expects an integer (int8), got float 1.5"),
    ((True, 7, 0.1, True), "argument 'i' (#2) expects an integer (int8), got bool True"),
    ((200, 7, 0.1, True), "argument 'i' (#2): 200 is out of range for int8"),
    ((1, -1, 0.1, True), "argument 'u' (#3): -1 is out of range for uint64"),
    ((1, 7, "0.1", True), "argument 'f' (#4) expects a real number (float64), got str '0.1'"),
    ((1, 7, None, True), "argument 'f' (#4) expects a real number (float64), got NoneType"),
    ((1, 7, 1j, True), "got complex 1j"),
    ((1, 7, 0.1, 2), "argument 'b' (#5) expects a bool, got int 2"),
    ((1, 7, 0.1, "yes"), "argument 'b' (#5) expects a bool, got str"),
])
def test_scalars_of_the_wrong_kind(mod, args, fragment):
    msg = err(mod, "scalars", np.zeros(3, "int64"), np.zeros(1), *args)
    assert msg.startswith("scalars: ") and fragment in msg


def test_non_arrays_for_buffers(mod):
    a = np.zeros(4, "float32")
    assert err(mod, "vadd", [0.0] * 4, a, a) == (
        "vadd: argument 'A' (#0) expects an array of float32 (kiln NDArray, numpy array or "
        "DLPack tensor), got list")


def test_int32_size_overflow_is_caught_before_native_code(kernels_lib, tmp_path):
    info = FunctionInfo("empty3", (buf("A", "uint8", "n"),), (("n", "int32"),))
    f = rt.PackedFunction(info, address_of(kernels_lib, "empty3"))
    big = np.memmap(tmp_path / "big", dtype="uint8", mode="w+", shape=(2**31,))  # sparse file
    with pytest.raises(rt.ArgumentError, match="n=2147483648 does not fit the function's int32"):
        f(big)
    f(big[:2**31 - 1])


def test_errors_never_reach_native_code(mod):
    counter = np.zeros(1, "int64")
    f = mod["count"]
    for bad in (np.zeros(2, "int64"), np.zeros(1, "int32"), [0], np.zeros((1, 1), "int64")):
        with pytest.raises(rt.ArgumentError):
            f(bad)
    assert counter[0] == 0
    f(counter)
    assert counter[0] == 1


# ------------------------------------------------------------------ module API
def test_module_lookup_and_sources(mod):
    assert mod.function_names() == list(INFOS)
    assert "vadd" in mod and "nope" not in mod
    assert mod["vadd"] is mod.get_function("vadd")
    assert mod.function_info("matmul") is INFOS["matmul"]
    assert mod.get_source() == "/* kernels.c */" and mod.get_source("asm") == "; asm"
    with pytest.raises(ValueError, match="no source in format 'll'; available: 'c', 'asm'"):
        mod.get_source("ll")
    with pytest.raises(KeyError) as info:
        mod["nope"]
    assert str(info.value).startswith("module has no function 'nope'; it has vadd, matmul")
    assert "vadd" in repr(mod) and repr(mod["vadd"]).startswith("<kiln.PackedFunction vadd(")


def test_module_construction_errors(kernels_lib):
    get = lambda name: address_of(kernels_lib, name)          # noqa: E731
    with pytest.raises(ValueError, match="entry function 'main' is not among"):
        rt.Module(INFOS, get, {}, entry="main")
    with pytest.raises(ValueError, match=r"functions\['x'\] describes a function named 'vadd'"):
        rt.Module({"x": INFOS["vadd"]}, get, {}, entry="x")
    m = rt.Module({"vadd": INFOS["vadd"]}, lambda name: 0, {}, entry="vadd")
    with pytest.raises(RuntimeError, match="no native code for function 'vadd'"):
        m["vadd"]
    with pytest.raises(ValueError, match="available: none"):
        m.get_source()


def test_functions_keep_the_code_alive(kernels_lib):
    m = rt.Module({"vadd": INFOS["vadd"]}, lambda name: address_of(kernels_lib, name), {},
                  "vadd", keepalive=kernels_lib)
    f = m["vadd"]
    del m
    assert f._owner.keepalive is kernels_lib


# ------------------------------------------------------------------ timing
def test_time_evaluator_counts_calls(mod):
    counter = np.zeros(1, "int64")
    result = mod.time_evaluator("count", number=7, repeat=3)(counter)
    assert counter[0] == 1 + 7 * 3                # one warm-up call, then number * repeat
    assert len(result.results) == 3 and all(r > 0 for r in result.results)
    assert result.min <= result.median <= result.max
    assert result.mean == pytest.approx(np.mean(result.results), rel=1e-12)
    assert result.std == pytest.approx(np.std(result.results), rel=1e-9, abs=1e-15)
    assert "Execution time summary" in repr(result)


def test_time_evaluator_min_repeat_ms_raises_number(mod):
    counter = np.zeros(1, "int64")
    result = mod.time_evaluator("count", number=1, repeat=2, min_repeat_ms=2)(counter)
    assert len(result.results) == 2
    # Each repeat lasted >= 2 ms, so far more calls than 1 + 2 * number were made.
    assert counter[0] > 100
    calls_per_repeat_lower_bound = 2e-3 / max(result.results)
    assert counter[0] >= 2 * calls_per_repeat_lower_bound


def test_cache_flush_evicts_the_buffers_after_the_first(mod):
    from kiln.runtime.timing import _flush_ranges
    a, b, c = rand(1000, seed=1), rand(1000, seed=2), np.zeros(1000, "float32")
    values, keep = mod["vadd"].prepare(a, b, c)
    assert _flush_ranges(mod["vadd"], values) == [(b.ctypes.data, 4000), (c.ctypes.data, 4000)]
    # Symbolic extents are the bound values; scalars are not buffers.
    x, y = np.zeros((5, 4), "float32"), np.zeros((5, 4), "float32")
    values, keep = mod["axpy"].prepare(x, y, 2.0, 1, True)
    assert _flush_ranges(mod["axpy"], values) == [(y.ctypes.data, 80)]


def test_time_evaluator_cache_flush_counts_calls(mod):
    if not rt.timing.can_flush_cache():
        pytest.skip("cache_flush needs a C compiler and an x86 CPU")
    counter = np.zeros(1, "int64")
    result = mod.time_evaluator("count", number=7, repeat=3, cache_flush=True)(counter)
    assert counter[0] == 1 + 7 * 3 and len(result.results) == 3


def test_time_evaluator_checks_arguments_and_failures(mod):
    with pytest.raises(rt.ArgumentError, match="has dtype float64"):
        mod.time_evaluator("vadd")(np.zeros(3), np.zeros(3), np.zeros(3))
    with pytest.raises(rt.NativeCallError, match="'checked' failed with status 7"):
        mod.time_evaluator("checked")(np.array([-1], "int32"))
    for kwargs in ({"number": 0}, {"repeat": -1}, {"min_repeat_ms": -1}, {"number": 1.5},
                   {"cache_flush": "yes"}):
        with pytest.raises(ValueError, match="time_evaluator"):
            mod.time_evaluator("count", **kwargs)
    with pytest.raises(NotImplementedError, match="only cpu"):
        mod.time_evaluator("count", device=rt.Device("cuda", 0))


def test_time_evaluator_python_fallback(mod, monkeypatch):
    from kiln.runtime import timing
    monkeypatch.setattr(timing, "_native_timer", lambda: None)
    counter = np.zeros(1, "int64")
    result = mod.time_evaluator("count", number=4, repeat=2)(counter)
    assert counter[0] == 1 + 8 and len(result.results) == 2
    with pytest.raises(ValueError, match="cache_flush needs a C compiler"):
        mod.time_evaluator("count", cache_flush=True)

"""NDArray: allocation, alignment, copies, dtypes and DLPack interop (exact comparisons)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kiln.runtime as rt

DTYPES = ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (2, 0, 4), (2, 3, 4, 5)])
def test_round_trip_is_exact(dtype, shape):
    x = sample(dtype, shape)
    a = rt.array(x)
    assert a.shape == shape and a.dtype == dtype and a.device == rt.cpu(0)
    y = a.numpy()
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y, x)            # tolerance: exact (a copy)
    assert not np.shares_memory(y, x)
    z = rt.empty(shape, dtype).copyfrom(x).copyto(np.zeros(shape, dtype))
    np.testing.assert_array_equal(z, x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_storage_is_64_byte_aligned(dtype):
    for n in range(0, 70, 3):
        assert rt.empty((n,), dtype).data_ptr % 64 == 0
        assert rt.array(sample(dtype, (n, 2))).data_ptr % 64 == 0
    assert rt.ALIGNMENT == 64


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(st.sampled_from(DTYPES), hnp.array_shapes(min_dims=0, max_dims=4,
                                                            min_side=0, max_side=6)))
def test_array_copies_any_numpy_array(x):
    a = rt.array(x)
    assert a.data_ptr % 64 == 0 and a.is_contiguous
    np.testing.assert_array_equal(a.numpy(), x)     # tolerance: exact
    assert not np.shares_memory(np.from_dlpack(a), x)


def test_array_copies_non_contiguous_input():
    x = np.arange(24, dtype="float32").reshape(4, 6)[:, ::2].T
    a = rt.array(x)
    assert a.is_contiguous
    np.testing.assert_array_equal(a.numpy(), x)


def test_array_from_list_scalar_and_ndarray():
    np.testing.assert_array_equal(rt.array([[1, 2], [3, 4]]).numpy(), [[1, 2], [3, 4]])
    assert rt.array([1.5, 2.5], dtype="float16").dtype == "float16"
    assert rt.array(3.0).shape == ()
    a = rt.array([1, 2, 3], dtype="int32")
    b = rt.array(a)
    assert b.data_ptr != a.data_ptr
    np.testing.assert_array_equal(b.numpy(), [1, 2, 3])


def test_array_makes_byte_swapped_input_native():
    x = np.arange(5, dtype=">i4")
    a = rt.array(x)
    assert a.dtype == "int32"
    np.testing.assert_array_equal(a.numpy(), x)


def test_array_converts_dtype():
    a = rt.array(np.array([1.7, -2.2]), dtype="int32")
    np.testing.assert_array_equal(a.numpy(), np.array([1.7, -2.2]).astype("int32"))


@pytest.mark.parametrize("dtype", ["complex64", "float", "object", "U3", ">f4", "bfloat16"])
def test_unsupported_dtypes_are_rejected(dtype):
    with pytest.raises(TypeError, match="unsupported dtype"):
        rt.empty((2,), dtype)


def test_unsupported_data_is_rejected():
    with pytest.raises(TypeError, match="unsupported dtype"):
        rt.array(["a", "b"])
    with pytest.raises(TypeError, match="unsupported dtype"):
        rt.array(np.zeros(3, dtype="complex64"))
    with pytest.raises(TypeError, match="cannot make a kiln array from dict"):
        rt.array({"a": 1})


@pytest.mark.parametrize("shape", [(-1,), (2, "3"), (1.5,), "ab", None])
def test_bad_shapes_are_rejected(shape):
    with pytest.raises((ValueError, TypeError), match="shape"):
        rt.empty(shape)


def test_copy_shape_and_dtype_mismatches():
    a = rt.empty((2, 3), "float32")
    with pytest.raises(ValueError, match=r"copyfrom: source has shape \(3, 2\)"):
        a.copyfrom(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"copyto: target is float64\[2, 3\]"):
        a.copyto(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="copyto: target must be"):
        a.copyto([0] * 6)


def test_copyto_ndarray_and_device():
    x = sample("int16", (4, 4))
    a, b = rt.array(x), rt.empty((4, 4), "int16")
    assert a.copyto(b) is b
    np.testing.assert_array_equal(b.numpy(), x)
    c = a.copyto(rt.cpu(0))
    assert c.data_ptr != a.data_ptr and c.data_ptr % 64 == 0
    np.testing.assert_array_equal(c.numpy(), x)


def test_numpy_is_a_copy_and_asarray_is_a_view():
    a = rt.array(np.zeros(3, "float32"))
    a.numpy()[0] = 5
    assert a.numpy()[0] == 0
    np.asarray(a)[1] = 7
    assert a.numpy()[1] == 7


def test_repr_and_device():
    a = rt.array(np.arange(3, dtype="int8"))
    assert repr(a).startswith("<kiln.NDArray shape=(3,) dtype=int8 device=cpu(0)>")
    assert repr(rt.cpu(0)) == "cpu(0)" and rt.cpu() == rt.Device("cpu", 0)
    assert hash(rt.cpu(1)) == hash(rt.Device("cpu", 1))
    with pytest.raises(ValueError, match="unknown device type 'tpu'"):
        rt.Device("tpu", 0)
    from kiln.runtime.gpu import DeviceUnavailableError
    with pytest.raises(DeviceUnavailableError, match=r"no runtime for vulkan\(0\).*cpu, cuda, opencl"):
        rt.array([1.0]).copyto(rt.Device("vulkan", 0))
    with pytest.raises(ValueError, match="non-negative"):
        rt.cpu(-1)


# ------------------------------------------------------------------ DLPack
@pytest.mark.parametrize("dtype", DTYPES)
def test_dlpack_export_to_numpy_is_zero_copy(dtype):
    a = rt.array(sample(dtype, (3, 4)))
    view = np.from_dlpack(a)
    assert view.ctypes.data == a.data_ptr and view.dtype == np.dtype(dtype)
    assert a.__dlpack_device__() == (1, 0)
    view[0, 0] = view[1, 1]
    np.testing.assert_array_equal(a.numpy(), view)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dlpack_import_from_numpy_is_zero_copy(dtype):
    x = sample(dtype, (5, 2))
    a = rt.from_dlpack(x)
    assert a.data_ptr == x.ctypes.data and a.dtype == dtype and a.shape == (5, 2)
    np.testing.assert_array_equal(a.numpy(), x)


def test_array_imports_dlpack_objects_zero_copy():
    class Producer:                      # a foreign tensor: only the DLPack protocol
        def __init__(self, data):
            self.data = data

        def __dlpack__(self, **kwargs):
            return self.data.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.data.__dlpack_device__()

    x = np.arange(6, dtype="float32")
    a = rt.array(Producer(x))
    assert a.data_ptr == x.ctypes.data
    b = rt.array(Producer(x), dtype="float64")   # another dtype: a converted copy
    assert b.dtype == "float64" and b.data_ptr != x.ctypes.data
    np.testing.assert_array_equal(b.numpy(), x.astype("float64"))


def test_from_dlpack_rejects_non_tensors():
    with pytest.raises(TypeError, match="needs an object with __dlpack__"):
        rt.from_dlpack([1, 2])


def test_torch_interop_is_zero_copy():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    a = rt.from_dlpack(t)
    assert a.data_ptr == t.data_ptr()
    back = torch.from_dlpack(a)
    assert back.data_ptr() == a.data_ptr
    np.testing.assert_array_equal(back.numpy(), t.numpy())
    assert rt.array(t).data_ptr == t.data_ptr()

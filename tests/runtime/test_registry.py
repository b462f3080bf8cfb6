"""The global function registry."""
import pytest

import kiln.runtime as rt


@pytest.fixture
def names():
    """Names registered by a test, removed afterwards."""
    used = []
    yield used
    for name in used:
        if rt.get_global_func(name, allow_missing=True) is not None:
            rt.remove_global_func(name)


def test_register_directly_and_as_decorator(names):
    names += ["test.double", "test.triple", "square_for_registry_test"]
    rt.register_func("test.double", lambda x: 2 * x)

    @rt.register_func("test.triple")
    def triple(x):
        return 3 * x

    @rt.register_func
    def square_for_registry_test(x):
        return x * x

    assert triple(2) == 6     # the decorator returns the function itself
    assert rt.get_global_func("test.double")(5) == 10
    assert rt.get_global_func("test.triple")(5) == 15
    assert rt.get_global_func("square_for_registry_test")(5) == 25
    assert {"test.double", "test.triple"} <= set(rt.list_global_func_names())
    assert rt.list_global_func_names() == sorted(rt.list_global_func_names())


def test_duplicate_needs_override(names):
    names.append("test.dup")
    rt.register_func("test.dup", lambda: 1)
    with pytest.raises(ValueError, match="'test.dup' is already registered.*override=True"):
        rt.register_func("test.dup", lambda: 2)
    assert rt.get_global_func("test.dup")() == 1
    rt.register_func("test.dup", lambda: 3, override=True)
    assert rt.get_global_func("test.dup")() == 3


def test_missing_function_error_names_it(names):
    names.append("test.present")
    rt.register_func("test.present", print)
    with pytest.raises(KeyError) as info:
        rt.get_global_func("test.presnt")
    assert str(info.value) == ("no global function named 'test.presnt' is registered; "
                               "did you mean 'test.present'?")
    assert isinstance(info.value, rt.GlobalFuncNotFound)
    assert rt.get_global_func("test.absent", allow_missing=True) is None
    with pytest.raises(KeyError, match="test.absent"):
        rt.remove_global_func("test.absent")


@pytest.mark.parametrize("name", ["", None, 3])
def test_bad_names_and_values(name):
    with pytest.raises(TypeError, match="non-empty string"):
        rt.register_func(name, print)
    with pytest.raises(TypeError, match="is not callable"):
        rt.register_func("test.not_callable", 42)

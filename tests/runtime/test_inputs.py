"""The runtime's casting rule at the call boundary: safe casts accepted, lossy ones
(a wrapped int, an overflowed float, float64 -> float32 data) refused with an error
naming the input. Expected values come from plain Python loops."""
import numpy as np
import pytest

import whilst
from whilst.runtime import load

pytestmark = pytest.mark.iree


def count_up(n, x):
    """Double x, n times (i32 counter, f32 carry)."""
    return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 2.0), [0, x])


def reference(n, x):
    i = 0
    while i < n:
        i, x = i + 1, x * 2.0
    return i, x


@pytest.fixture(scope="module")
def fn():
    return load(whilst.compile(count_up, np.int32(0), np.float32(0)).data).main


@pytest.mark.parametrize("n, x", [
    (3, 1.5),                                   # Python numbers, in range
    (np.int32(3), np.float32(1.5)),             # exact dtypes
    (np.int16(3), np.float16(1.5)),             # numpy data, safe casts
    (np.array(3, np.int8), np.array(1.5, np.float32)),
    (True, 1),                                  # bool -> i32 and an exact int -> f32
])
def test_safe_inputs_are_accepted(fn, n, x):
    i, y = fn(n, x)
    want_i, want_y = reference(int(n), float(x))
    assert int(i) == want_i and float(y) == want_y
    assert i.dtype == np.int32 and y.dtype == np.float32


@pytest.mark.parametrize("n, x, message", [
    (2**32 + 2, 1.0, "outside the range of i32[] [-2147483648, 2147483647]; it would wrap"),
    (2**31, 1.0, "outside the range of i32[]"),
    (-2**31 - 1, 1.0, "outside the range of i32[]"),
    (2**70, 1.0, "outside the range of i32[]"),
    (3, 1e40, "beyond the range of f32[] (it would become inf)"),
    (3, 2**24 + 1, "which f32[] cannot hold exactly"),
    (3.0, 1.0, "expects i32[], an integer"),
    (np.int64(2**33), 1.0, "int64 -> int32 can lose values"),
    (np.int64(3), 1.0, "int64 -> int32 can lose values"),   # by dtype, not by value
    (3, np.float64(1.5), "float64 -> float32 can lose values"),
    (3, np.array(1.5), "float64 -> float32 can lose values"),
])
def test_lossy_inputs_are_refused_naming_the_input(fn, n, x, message):
    with pytest.raises(ValueError) as e:
        fn(n, x)
    assert message in str(e.value)
    assert "main: args[" in str(e.value)


@pytest.mark.parametrize("n, x, message", [
    (None, 1.0, "args[0] is NoneType None, but the module expects i32[]"),
    ("3", 1.0, "args[0] is str '3', but the module expects i32[]"),
    (3, np.array(["a"]), "args[1] is ndarray"),
    (3, [1.0, None], "args[1] is list"),
])
def test_non_numbers_are_refused(fn, n, x, message):
    with pytest.raises(TypeError) as e:
        fn(n, x)
    assert message in str(e.value)


def test_lists_follow_the_python_number_rule():
    def total(x):
        return whilst.while_loop(lambda i, s: i < 2, lambda i, s: (i + 1, s + x), [0, x])[1]

    f = load(whilst.compile(total, np.zeros(3, np.float32)).data).main
    np.testing.assert_array_equal(f([1.0, 2.0, 3.5]), np.array([3.0, 6.0, 10.5], np.float32))
    with pytest.raises(ValueError, match="beyond the range of f32"):
        f([1.0, 1e39, 0.0])
    with pytest.raises(ValueError, match="float64 -> float32"):
        f(np.array([1.0, 2.0, 3.0]))


def test_arguments_by_name(fn):
    assert fn.arg_names == ["n", "x"]
    i, y = fn(x=np.float32(1.0), n=4)
    assert int(i) == 4 and float(y) == 16.0
    i, y = fn(2, x=np.float32(1.0))
    assert float(y) == 4.0
    with pytest.raises(TypeError, match=r"no argument named 'm'; its arguments are \['n', 'x'\]"):
        fn(m=1, x=1.0)
    with pytest.raises(TypeError, match="missing argument"):
        fn(n=1)
    with pytest.raises(TypeError, match="given by position and by name"):
        fn(1, n=1, x=1.0)


def test_functions_without_a_whilst_signature_take_arrays_of_numbers():
    """A module from plain iree-compile (no whilst metadata): arrays pass as they are."""
    from whilst.lowering._iree_ir import ir

    from whilst.lowering import compile_text, prepare

    text = prepare([whilst.export(count_up, np.int32(0), np.float32(0))])
    with ir.Context():
        module = ir.Module.parse(text)
        for op in module.body.operations:
            if "iree.reflection" in op.attributes:
                del op.attributes["iree.reflection"]
        plain = load(compile_text(module.operation.get_asm())).main
    assert plain.signature is None
    i, y = plain(np.int32(3), np.float32(1.5))
    assert (int(i), float(y)) == reference(3, 1.5)
    with pytest.raises(TypeError, match=r"args\[1\] is NoneType None; pass a numpy array"):
        plain(np.int32(3), None)
    with pytest.raises(TypeError, match=r"args\[0\] is ndarray"):
        plain(np.array(["3"]), np.float32(1.5))

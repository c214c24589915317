"""whilst.TensorArray outside loops: the cases of TensorFlow's
`kernel_tests/data_structures/tensor_array_ops_test.py`, values restated (no
TensorFlow), each run eagerly and under `jax.jit`. Where TensorFlow's eager arrays
take elements of varying shapes (`infer_shape=False`, ragged `concat`/`split`),
whilst refuses them, as TensorFlow's XLA path does; those tests check the error."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

from whilst import TensorArray

MODES = ["eager", "jit"]


def run(mode, fn, *args):
    return fn(*args) if mode == "eager" else jax.jit(fn)(*args)


@pytest.mark.parametrize("mode", MODES)
def test_write_read(mode):  # testTensorArrayWriteRead, one element shape
    def fn():
        ta = TensorArray(jnp.float32, tensor_array_name="foo", size=3)
        w = ta.write(0, [[4.0, 5.0]]).write(1, [[1.0, 2.0]]).write(2, [[-3.0, 0.0]])
        return w.read(0), w.read(1), w.read(2)
    d0, d1, d2 = run(mode, fn)
    np.testing.assert_array_equal(d0, [[4.0, 5.0]])
    np.testing.assert_array_equal(d1, [[1.0, 2.0]])
    np.testing.assert_array_equal(d2, [[-3.0, 0.0]])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.complex64, np.bool_])
def test_write_pack(mode, dtype):  # testTensorArrayWritePack
    convert = lambda x: np.asarray(x).astype(dtype)  # noqa: E731

    def fn():
        ta = TensorArray(dtype, size=3)
        return (ta.write(0, convert([[4.0, 5.0]])).write(1, convert([[6.0, 7.0]]))
                .write(2, convert([[8.0, 9.0]])).stack())
    out = run(mode, fn)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, convert([[[4.0, 5.0]], [[6.0, 7.0]], [[8.0, 9.0]]]))


@pytest.mark.parametrize("mode", MODES)
def test_empty_elements_pack(mode):  # testEmptyTensorArrayPack
    def fn():
        ta = TensorArray(jnp.float32, size=3)
        empty = np.zeros((0, 1), np.float32)
        return ta.write(0, empty).write(1, empty).write(2, empty).stack()
    assert run(mode, fn).shape == (3, 0, 1)


@pytest.mark.parametrize("mode", MODES)
def test_write_concat(mode):  # testTensorArrayWriteConcat, equal first dimensions
    def fn():
        ta = TensorArray(jnp.int32, size=3)
        return (ta.write(0, np.int32([[4, 5], [104, 105]])).write(1, np.int32([[6, 7], [106, 107]]))
                .write(2, np.int32([[8, 9], [204, 205]])).concat())
    np.testing.assert_array_equal(
        run(mode, fn), [[4, 5], [104, 105], [6, 7], [106, 107], [8, 9], [204, 205]])


def test_ragged_elements_are_refused():  # testTensorArrayWriteConcat / WriteRead, ragged
    ta = TensorArray(jnp.float32, size=3).write(0, [[4.0, 5.0], [104.0, 105.0]])
    with pytest.raises(ValueError, match=r"write: the element has shape \(1, 2\), but the "
                       r"array's elements have shape \(2, 2\)"):
        ta.write(1, [[6.0, 7.0]])
    with pytest.raises(ValueError, match="infer_shape=False .* not supported"):
        TensorArray(jnp.float32, size=3, infer_shape=False)


@pytest.mark.parametrize("mode", MODES)
def test_unwritten_elements_stack_and_concat_as_zeros(mode):
    # testTensorArrayReadOrPackNotAllValuesAvailable(InferShape)FillsZeros
    def fn():
        ta = TensorArray(jnp.float32, size=3, element_shape=(1, 2)).write(1, [[4.0, 5.0]])
        return ta.stack(), ta.concat()
    stacked, concatenated = run(mode, fn)
    np.testing.assert_array_equal(stacked, [[[0.0, 0.0]], [[4.0, 5.0]], [[0.0, 0.0]]])
    np.testing.assert_array_equal(concatenated, [[0.0, 0.0], [4.0, 5.0], [0.0, 0.0]])


@pytest.mark.parametrize("mode", MODES)
def test_read_of_an_unwritten_index_is_an_error(mode):
    # TensorFlow reads zeros here; whilst refuses a read known to be unwritten.
    def fn():
        return TensorArray(jnp.float32, size=3).write(1, [[4.0, 5.0]]).read(0)
    with pytest.raises(ValueError, match=r"read: index 0 has not been written\. Write it"):
        run(mode, fn)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.complex64])
def test_unstack_read(mode, dtype):  # testTensorArrayUnpackRead
    convert = lambda x: np.asarray(x).astype(dtype)  # noqa: E731

    def fn():
        ta = TensorArray(dtype, size=3)
        w0 = ta.unstack(convert([1.0, 2.0, 3.0]))
        w1 = ta.unstack(convert([[1.0, 1.1], [2.0, 2.1], [3.0, 3.1]]))
        w2 = ta.unstack(convert([[], [], []]))
        return [[w.read(k) for k in range(3)] for w in (w0, w1, w2)]
    r0, r1, r2 = run(mode, fn)
    for k in range(3):
        np.testing.assert_array_equal(r0[k], convert(k + 1.0))
        np.testing.assert_array_equal(r1[k], convert([k + 1.0, k + 1.1]))
        assert r2[k].shape == (0,)


@pytest.mark.parametrize("mode", MODES)
def test_split_read(mode):  # testTensorArraySplitRead, equal lengths
    def fn():
        ta = TensorArray(jnp.float32, size=3)
        empty = ta.split(np.float32([]), lengths=[0, 0, 0])
        vector = ta.split(np.float32([1.0, 2.0, 3.0]), lengths=[1, 1, 1])
        matrix = ta.split(np.float32([[1.0, 101.0], [2.0, 201.0], [3.0, 301.0],
                                      [4.0, 401.0], [5.0, 501.0], [6.0, 601.0]]), [2, 2, 2])
        return [[w.read(k) for k in range(3)] for w in (empty, vector, matrix)]
    empty, vector, matrix = run(mode, fn)
    assert all(r.shape == (0,) for r in empty)
    np.testing.assert_array_equal(vector, [[1.0], [2.0], [3.0]])
    np.testing.assert_array_equal(matrix[1], [[3.0, 301.0], [4.0, 401.0]])


def test_split_errors():  # testTensorArraySplitIncompatibleShapesFails
    ta = TensorArray(jnp.float32, size=3)
    with pytest.raises(ValueError, match="lengths must be a vector of ints"):
        ta.split([1.0, 2.0, 3.0], 1)
    with pytest.raises(ValueError, match=r"lengths must sum to value.shape\[0\] = 3; they sum "
                       r"to 1"):
        ta.split([1.0, 2.0, 3.0], [1])
    with pytest.raises(ValueError, match="value must be at least a vector"):
        TensorArray(jnp.float32, size=1).split(1.0, [1])
    with pytest.raises(ValueError, match=r"size is 2 but lengths has 1 entries, and the "
                       r"array is not dynamic_size"):
        TensorArray(jnp.float32, size=2).split([1.0], [1])
    with pytest.raises(ValueError, match=r"lengths \[2, 0, 1\] differ; elements share one "
                       r"shape"):
        ta.split([1.0, 2.0, 3.0], [2, 0, 1])


@pytest.mark.parametrize("mode", MODES)
def test_write_errors(mode):  # testTensorArrayWriteWrongIndexOrDataTypeFails
    ta = TensorArray(jnp.float32, tensor_array_name="foo", size=3)
    with pytest.raises(TypeError, match=r"TensorArray 'foo'.write: value is str "
                       r"'wrong_type_scalar' .* does not convert to the array's dtype float32"):
        run(mode, lambda: ta.write(0, "wrong_type_scalar").stack())
    with pytest.raises(IndexError, match="write: index -1 is negative"):
        run(mode, lambda: ta.write(-1, 3.0).stack())
    with pytest.raises(IndexError, match="index 3 is out of range: the array's size is 3 and "
                       "it is not dynamic_size"):
        run(mode, lambda: ta.write(3, 3.0).stack())
    with pytest.raises(TypeError, match=r"value has dtype int32, but the array holds float32\. "
                       r"Cast it with \.astype\(float32\)"):
        run(mode, lambda: ta.write(0, np.int32(1)).stack())


@pytest.mark.parametrize("mode", MODES)
def test_read_errors(mode):  # testTensorArrayReadWrongIndexOrDataTypeFails
    ta = TensorArray(jnp.float32, size=3).write(0, [[4.0, 5.0]])
    for index in (-1, 3):
        with pytest.raises(IndexError, match=f"read: index {index} is out of range for an "
                           f"array of size 3"):
            run(mode, lambda: ta.read(index))


@pytest.mark.parametrize("mode", MODES)
def test_write_twice_is_an_error(mode):  # testSkipEagerTensorArrayWriteMultipleFails
    ta = TensorArray(jnp.float32, size=3)
    with pytest.raises(ValueError, match="could not write to index 2: it has already been "
                       "written to"):
        run(mode, lambda: ta.write(2, 3.0).write(2, 3.0).stack())
    with pytest.raises(ValueError, match=r"indices \[1, 1\] repeat an index"):
        run(mode, lambda: ta.scatter([1, 1], [1.0, 2.0]).stack())


def test_concat_of_scalars_is_an_error():  # testTensorArrayConcatIncompatibleShapesFails
    ta = TensorArray(jnp.float32, size=3).write(0, 3.0).write(1, 4.0)
    with pytest.raises(ValueError, match="elements are scalars, but concat needs at least "
                       "vectors"):
        ta.concat()


@pytest.mark.parametrize("mode", MODES)
def test_two_arrays(mode):  # testMultiTensorArray
    def fn():
        r1 = TensorArray(jnp.float32, size=1, tensor_array_name="foo").write(0, 4.0).read(0)
        r2 = TensorArray(jnp.float32, size=1, tensor_array_name="bar").write(0, 5.0).read(0)
        return r1 + r2
    assert float(run(mode, fn)) == 9.0


@pytest.mark.parametrize("mode", MODES)
def test_gradient_write_read(mode):  # _testTensorArrayGradientWriteReadType
    def f(value_0, value_1):
        w = TensorArray(jnp.float32, size=3).write(0, value_0).write(1, value_1)
        return (jnp.sum(w.read(0) * np.float32([[2.0, 3.0]]))
                + jnp.sum(w.read(0) * np.float32([[1.0, -1.0]])) + jnp.sum(w.read(1) * -2.0))
    g0, g1 = run(mode, jax.grad(f, (0, 1)), np.float32([[4.0, 5.0]]), np.float32([[3.0, 3.0]]))
    np.testing.assert_array_equal(g0, [[3.0, 2.0]])
    np.testing.assert_array_equal(g1, [[-2.0, -2.0]])


@pytest.mark.parametrize("mode", MODES)
def test_gradient_pack_concat_and_read(mode):
    # _testTensorArrayGradientWritePackConcatAndRead
    def f(value_0, value_1):
        w = TensorArray(jnp.float32, size=2, clear_after_read=False).write(0, value_0)
        w = w.write(1, value_1)
        return (jnp.sum(w.stack() * np.float32([[2.0, 3.0], [4.0, 5.0]]))
                + jnp.sum(w.read(0) * np.float32([-0.5, 1.5]))
                + jnp.sum(w.concat() * np.float32([20.0, 30.0, 40.0, 50.0])))
    g0, g1 = run(mode, jax.grad(f, (0, 1)), np.float32([-1.0, 1.0]), np.float32([-10.0, 10.0]))
    np.testing.assert_allclose(g0, [2.0 - 0.5 + 20.0, 3.0 + 1.5 + 30.0])
    np.testing.assert_array_equal(g1, [4.0 + 40.0, 5.0 + 50.0])


@pytest.mark.parametrize("mode", MODES)
def test_gradient_of_gradient(mode):  # testSkipEagerTensorArrayGradGrad
    def y(x):
        r0 = TensorArray(jnp.float32, size=1).write(0, x).read(0)
        return r0 * r0
    assert float(run(mode, jax.grad(jax.grad(y)), np.float32(4.0))) == 2.0


@pytest.mark.parametrize("mode", MODES)
def test_gradient_unstack_read_and_split_concat(mode):
    # _testTensorArrayGradientUnpackRead, testSkipEagerTensorArrayGradientSplitConcat
    value = np.float32([[1.0, -1.0], [10.0, -10.0]])

    def f(v):
        w = TensorArray(jnp.float32, size=2, clear_after_read=False).unstack(v)
        return (jnp.sum(w.read(0) * np.float32([2.0, 3.0]))
                + jnp.sum(w.read(0) * np.float32([-1.5, 1.5]))
                + jnp.sum(w.read(1) * np.float32([4.0, 5.0])))
    np.testing.assert_array_equal(run(mode, jax.grad(f), value),
                                  [[2.0 - 1.5, 3.0 + 1.5], [4.0, 5.0]])
    dy = np.float32([[2.0, -2.0], [20.0, -20.0], [200.0, -200.0], [1.0, 1.0]])

    def g(v):
        return jnp.sum(TensorArray(jnp.float32, size=2).split(v, [2, 2]).concat() * dy)
    np.testing.assert_array_equal(run(mode, jax.grad(g), np.ones((4, 2), np.float32)), dy)


@pytest.mark.parametrize("mode", MODES)
def test_close_size_and_identity(mode):
    # testCloseTensorArray, testSizeTensorArray, testWriteCloseTensorArray,
    # testTensorArrayIdentity
    def fn():
        ta = TensorArray(jnp.float32, tensor_array_name="foo", size=3)
        assert ta.close() is None
        ta0 = TensorArray(jnp.float32, size=2).write(0, 0.0).identity()
        ta1 = TensorArray(jnp.int32, size=4).write(0, 1).identity()
        assert (ta0.dtype, ta1.dtype) == (jnp.float32, jnp.int32)
        assert ta0.element_shape == ta1.element_shape == ()
        return ta.size(), ta0.read(0), ta1.read(0), ta0.size(), ta1.size()
    assert [int(x) for x in run(mode, fn)] == [3, 0, 1, 2, 4]


@pytest.mark.parametrize("mode", MODES)
def test_dynamic_unstack_then_write(mode):
    # _testTensorArrayUnpackDynamic, testSkipEagerTensorArraySplitDynamic
    def f(x):
        w = TensorArray(jnp.float32, size=3, dynamic_size=True).unstack(x).write(3, 4.0)
        return w.stack(), w.size()

    def g(x):
        return TensorArray(jnp.float32, size=3, dynamic_size=True).split(
            x, [1, 1, 1]).write(3, [4.0]).concat()
    x = np.float32([1.0, 2.0, 3.0])
    stacked, size = run(mode, f, x)
    np.testing.assert_array_equal(stacked, [1.0, 2.0, 3.0, 4.0])
    assert int(size) == 4
    np.testing.assert_array_equal(run(mode, g, x), [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(run(mode, jax.grad(lambda x: jnp.sum(f(x)[0])), x), [1, 1, 1])
    np.testing.assert_array_equal(run(mode, jax.grad(lambda x: jnp.sum(g(x))), x), [1, 1, 1])


@pytest.mark.parametrize("mode", MODES)
def test_empty_array_with_known_shape(mode):  # _testTensorArrayEvalEmptyWithDefault
    def fn():
        ta = TensorArray(jnp.float32, size=0).unstack(jnp.zeros((0, 3, 5)))
        return ta.size(), ta.stack(), ta.concat()
    size, packed, concatenated = run(mode, fn)
    assert int(size) == 0 and packed.shape == (0, 3, 5) and concatenated.shape == (0, 5)
    with pytest.raises(ValueError, match="stack: the element shape is not known"):
        TensorArray(jnp.float32, size=0).stack()  # testSkipEagerTensorArrayEvalEmpty


@pytest.mark.parametrize("mode", MODES)
def test_scatter_read_and_gradients(mode):
    # testSkipEagerTensorArrayScatter(Partial)ReadAndGradients
    def reads(value):
        w = TensorArray(jnp.float32, tensor_array_name="foo", size=0,
                        dynamic_size=True).scatter(np.int32([1, 8]), value)
        return w.read(1), w.read(8), w.size()
    value = np.float32([[1.0, -1.0], [10.0, -10.0]])
    r0, r1, size = run(mode, reads, value)
    np.testing.assert_array_equal(r0, [1.0, -1.0])
    np.testing.assert_array_equal(r1, [10.0, -10.0])
    assert int(size) == 9
    both = jax.grad(lambda v: jnp.sum(reads(v)[0] * np.float32([2.0, 3.0]))
                    + jnp.sum(reads(v)[1] * np.float32([4.0, 5.0])))
    np.testing.assert_array_equal(run(mode, both, value), [[2.0, 3.0], [4.0, 5.0]])
    partial = jax.grad(lambda v: jnp.sum(reads(v)[0] * np.float32([2.0, 3.0])))
    np.testing.assert_array_equal(run(mode, partial, value), [[2.0, 3.0], [0.0, 0.0]])


@pytest.mark.parametrize("mode", MODES)
def test_scatter_into_existing_array(mode):  # testScatterIntoExistingList
    def fn():
        ta = TensorArray(jnp.float32, tensor_array_name="foo", size=5)
        ta = ta.scatter(indices=[3, 4], value=jnp.ones([2]))
        a = ta.stack()
        ta = ta.scatter(indices=[1], value=jnp.ones([1]))
        b = ta.stack()
        ta = ta.scatter(indices=[0, 2], value=[5.0, 6.0])
        return a, b, ta.stack()
    a, b, c = run(mode, fn)
    np.testing.assert_array_equal(a, [0.0, 0.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(b, [0.0, 1.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(c, [5.0, 1.0, 6.0, 1.0, 1.0])


@pytest.mark.parametrize("mode", MODES)
def test_gather_and_gradients(mode):  # testTensorArrayWriteGatherAndGradients
    def func(values):
        w = TensorArray(jnp.float32, size=0, dynamic_size=True).unstack(values)
        return w.gather(np.int32([1, 8]))
    values = np.float32([[1.0 * x, -1.0 * x] for x in range(10)])
    np.testing.assert_array_equal(run(mode, func, values), [[1.0, -1.0], [8.0, -8.0]])
    dy = np.float32([[2.0, 3.0], [4.0, 5.0]])
    expected = np.zeros((10, 2), np.float32)
    expected[1], expected[8] = dy
    np.testing.assert_array_equal(
        run(mode, jax.grad(lambda v: jnp.sum(func(v) * dy)), values), expected)
    with pytest.raises(IndexError, match="gather: index 10 is out of range"):
        run(mode, lambda: TensorArray(jnp.float32, size=10).unstack(values).gather([0, 10]))


@pytest.mark.parametrize("mode", MODES)
def test_stack_read_gather_shapes(mode):  # testStackShape, testReadShape, testGatherShape
    def fn():
        ta = TensorArray(jnp.float32, size=3).write(0, jnp.array([1.0, 2.0, 3.0]))
        return ta.stack(), ta.read(0), ta.gather(jnp.array([0]))
    stacked, read, gathered = run(mode, fn)
    assert (stacked.shape, read.shape, gathered.shape) == ((3, 3), (3,), (1, 3))


def test_traced_indices_follow_the_documented_rule():
    """Under jit with traced indices nothing can raise: out-of-range writes are
    dropped, out-of-range or unwritten reads give zeros, a second write replaces."""
    @jax.jit
    def fn(i, j):
        ta = TensorArray(jnp.float32, size=3).write(i, 7.0).write(j, 8.0)
        return ta.stack(), ta.read(i), ta.read(j + 1), ta.size()
    stacked, at_i, past, size = fn(1, 5)
    np.testing.assert_array_equal(stacked, [0.0, 7.0, 0.0])
    assert (float(at_i), float(past), int(size)) == (7.0, 0.0, 3)
    stacked, *_ = fn(2, 2)
    np.testing.assert_array_equal(stacked, [0.0, 0.0, 8.0])


def test_constructor_errors():
    with pytest.raises(ValueError, match="size is required when dynamic_size is False"):
        TensorArray(jnp.float32)
    with pytest.raises(TypeError, match="size must be a Python int"):
        TensorArray(jnp.float32, size=jnp.int32(3) + jnp.zeros((), jnp.int32) * 0.5)
    with pytest.raises(TypeError, match="element_shape must be a tuple of ints"):
        TensorArray(jnp.float32, size=3, element_shape=("a",))


def test_is_a_pytree_with_named_leaves():
    def paths(ta):
        return [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(ta)]
    ta = TensorArray(jnp.float32, size=2, element_shape=(3,))
    assert paths(ta) == [".buffer"]
    assert paths(TensorArray(jnp.float32, size=2, dynamic_size=True, element_shape=(3,))) == [
        ".buffer", ".size"]
    back = jax.tree_util.tree_map(lambda x: x, ta.write(1, jnp.ones(3)))
    np.testing.assert_array_equal(back.stack(), [[0, 0, 0], [1, 1, 1]])
    assert back.element_shape == (3,) and back.dtype == jnp.float32

"""Run-time errors (`jax.experimental.checkify`) from a whilst loop compiled by IREE:
the checkified function exported with the Error's arrays as outputs, the Error
rebuilt from them after the run, as README's "Run-time errors" says."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.experimental import checkify

import whilst
import whilst.lax as wl
from whilst import TensorArray

pytestmark = pytest.mark.iree


def emit(x, n):
    """Writes x * (k + 1) to index k // 2 at step k, then reads index n - 1."""
    ta = TensorArray(jnp.float32, size=4, name="out", run_time_checks=True)
    ta = wl.fori_loop(0, n, lambda k, ta: ta.write(k // 2, x * (k + 1.)), ta)
    checkify.check(x > 0, "x must be positive, found {x}", x=x)
    return ta.stack(), ta.read(n - 1)


checked = checkify.checkify(emit, errors=checkify.user_checks)
ARGS = (jnp.float32(2.), jnp.int32(1))
error_trees = []  # the Error's structure (with its messages) at each trace


def exported(x, n):
    err, out = checked(x, n)
    leaves, tree = jax.tree.flatten(err)
    error_trees.append(tree)
    return leaves, out


@pytest.fixture(scope="module")
def module():
    return whilst.compile(exported, *ARGS).load()


@pytest.mark.parametrize("x, n", [(2., 1), (2., 3), (-1., 1), (2., 0)])
def test_errors_from_the_module_are_jaxs(module, x, n):
    leaves, out = module.main(np.float32(x), np.int32(n))
    err = jax.tree.unflatten(error_trees[-1], list(leaves))  # the module's trace
    jax_err, jax_out = jax.jit(checked)(jnp.float32(x), jnp.int32(n))
    assert err.get() == jax_err.get()
    jax.tree.map(np.testing.assert_allclose, out, jax_out)


def test_the_expected_messages():
    assert jax.jit(checked)(jnp.float32(2.), jnp.int32(1))[0].get() is None
    assert jax.jit(checked)(jnp.float32(2.), jnp.int32(3))[0].get().startswith(
        "TensorArray 'out'.write: could not write to index 0: it has already been written")
    assert jax.jit(checked)(jnp.float32(2.), jnp.int32(0))[0].get().startswith(
        "TensorArray 'out'.read: index -1 is out of range for an array of size 4.")


def test_an_error_output_is_refused_with_the_recipe():
    with pytest.raises(TypeError, match=r"export: the output at \[0\] is a checkify.Error.*"
                       r"jax.tree.flatten\(err\)"):
        whilst.export(checked, *ARGS)

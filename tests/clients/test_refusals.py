"""What no compiled module can hold is refused at export, with what to do
(whilst/ir/iree_forms/_unportable_ops.py): equinox's runtime error checks (host
callbacks), other host callbacks, and JAX's LAPACK-backed linear algebra (an
optimistix Newton root find solves with lineax's LU)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst

X = np.ones(3, np.float32)


def test_equinox_error_checks_name_EQX_ON_ERROR():
    """Equinox's default (`EQX_ON_ERROR=raise`) is a host callback; "nan" exports."""
    eqx = pytest.importorskip("equinox")
    with pytest.raises(ValueError, match="EQX_ON_ERROR=nan"):
        whilst.export(lambda x: eqx.error_if(x, x < 0, "negative", on_error="raise"), X)
    exported = whilst.export(lambda x: eqx.error_if(x, x < 0, "negative", on_error="nan"), X)
    np.testing.assert_array_equal(exported.exported.call(X), X)
    assert np.isnan(exported.exported.call(-X)).all()


def test_host_callbacks_are_named():
    for fn, name in [(lambda x: jax.debug.print("{}", x) or x, "debug_print"),
                     (lambda x: jax.pure_callback(np.sin, x, x), "pure_callback")]:
        with pytest.raises(ValueError, match=f"host callback .`{name}`"):
            whilst.export(fn, X)


def test_callback_inside_a_loop_body_is_found():
    def fn(x):
        def body(i, x):
            return jax.pure_callback(np.cos, x, x)
        return jax.lax.fori_loop(0, 3, body, x)

    with pytest.raises(ValueError, match="pure_callback"):
        whilst.export(fn, X)


@pytest.mark.parametrize("solve, name", [
    (lambda a, b: jnp.linalg.eigh(a)[0] + b, "eigh"),
    (lambda a, b: jnp.linalg.lstsq(a, b)[0], "svd"),
])
def test_lapack_linear_algebra_is_named(solve, name):
    with pytest.raises(ValueError, match=f"calls `{name}`.*LAPACK.*lineax.LU/Cholesky"):
        whilst.export(solve, np.eye(3, dtype=np.float32), X)


def test_custom_calls_only_lowering_shows_are_named():
    """A pivoted QR is the `qr` primitive in the jaxpr, LAPACK's geqp3 once lowered."""
    with pytest.raises(ValueError, match=r"custom call to `lapack_sgeqp3_ffi`.*lineax.LU/Cholesky"):
        whilst.export(lambda a: jax.scipy.linalg.qr(a, pivoting=True)[1],
                      np.eye(3, dtype=np.float32))


def test_callbacks_only_lowering_shows_are_named():
    """lineax's `linear_solve` primitive traces its operator only when lowered: a
    callback in it is met by `jax.export`, and named with what to do."""
    lx = pytest.importorskip("lineax")

    def solve(b):
        operator = lx.FunctionLinearOperator(
            lambda x: 2.0 * jax.pure_callback(np.asarray, jax.ShapeDtypeStruct((3,), np.float32),
                                              x), jax.ShapeDtypeStruct((3,), np.float32))
        return lx.linear_solve(operator, b, lx.GMRES(rtol=1e-6, atol=1e-6), throw=False).value

    with pytest.raises(ValueError, match=r"lowers to a host callback.*EQX_ON_ERROR=nan"):
        whilst.export(solve, X)


def test_exports_without_them_still_work():
    exported = whilst.export(lambda x: jnp.sin(x) @ x, X).exported
    np.testing.assert_allclose(exported.call(X), np.sin(X) @ X, rtol=1e-6)

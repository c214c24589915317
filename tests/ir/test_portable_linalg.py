"""`lu`, `triangular_solve`, `cholesky` and QR export without LAPACK custom calls
(whilst/ir/iree_forms/_portable_linalg.py) and compute what JAX's LAPACK calls compute
(on XLA, `Exported.call`; the client tests run them on IREE)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src.lax import linalg as lapack_linalg   # geqrf, ormqr: not in jax.lax

import whilst
from whilst.ir.iree_forms._portable_linalg import UNROLLED_ROWS

RNG = np.random.default_rng(0)


def triangular(n, lower):
    a = RNG.normal(size=(n, n)).astype(np.float32) + n * np.eye(n, dtype=np.float32)
    return np.tril(a) if lower else np.triu(a)


PROGRAMS = {
    "solve": lambda a, b: jnp.linalg.solve(a, b),
    "lu_solve": lambda a, b: jax.scipy.linalg.lu_solve(jax.scipy.linalg.lu_factor(a), b),
    "lower_transposed": lambda a, b: jax.scipy.linalg.solve_triangular(
        jnp.tril(a), b, lower=True, trans=1),
    "upper_unit": lambda a, b: jax.scipy.linalg.solve_triangular(
        jnp.triu(a), b, lower=False, unit_diagonal=True),
    "right_side": lambda a, b: lax.linalg.triangular_solve(
        jnp.tril(a) + 3 * jnp.eye(a.shape[0]), b[None, :], left_side=False, lower=True),
    "grad_of_solve": jax.grad(lambda a, b: jnp.sum(jnp.linalg.solve(a, b) ** 2)),
    "batched_solve": lambda a, b: jax.vmap(jnp.linalg.solve, (None, 0))(a, jnp.stack([b, -b])),
    "cholesky": lambda a, b: jnp.linalg.cholesky(a @ a.T) @ b,
    "cho_solve": lambda a, b: jax.scipy.linalg.cho_solve(
        jax.scipy.linalg.cho_factor(a @ a.T, lower=True), b),
    "upper_cho_solve": lambda a, b: jax.scipy.linalg.cho_solve(
        jax.scipy.linalg.cho_factor(a @ a.T, lower=False), b),
    "grad_of_cholesky": jax.grad(lambda a, b: jnp.sum(jnp.linalg.cholesky(a @ a.T) @ b)),
    "batched_cholesky": lambda a, b: jnp.linalg.cholesky(jnp.stack([a @ a.T, a.T @ a])) @ b,
    "qr": lambda a, b: jnp.concatenate(jnp.linalg.qr(a)) @ b,
    "qr_of_wide": lambda a, b: jnp.concatenate(jnp.linalg.qr(a[:3]), axis=1) @ jnp.tile(b, 2)[
        :a.shape[0] + 3],
    "qr_complete_of_tall": lambda a, b: jnp.linalg.qr(a[:, :3], mode="complete")[0] @ b,
    "qr_solve": lambda a, b: jax.scipy.linalg.solve_triangular(
        jnp.linalg.qr(a)[1], jnp.linalg.qr(a)[0].T @ b),
    "grad_of_qr": jax.grad(lambda a, b: jnp.sum(jnp.linalg.qr(a)[1] @ b)),
    "batched_qr": lambda a, b: jnp.linalg.qr(jnp.stack([a, a.T]))[0] @ b,
}


@pytest.mark.parametrize("n", [4, UNROLLED_ROWS + 3])   # unrolled rows, a fori_loop
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_exports_in_lax_ops_and_matches_lapack(name, n):
    a = RNG.normal(size=(n, n)).astype(np.float32) + n * np.eye(n, dtype=np.float32)
    b = RNG.normal(size=n).astype(np.float32)
    exported = whilst.export(PROGRAMS[name], a, b)
    assert "custom_call" not in exported.text
    np.testing.assert_allclose(exported.exported.call(a, b), PROGRAMS[name](a, b),
                               rtol=1e-4, atol=1e-5)


def test_jax_keeps_its_lapack_lowering_around_an_export():
    a, b = triangular(3, True), np.ones(3, np.float32)
    whilst.export(PROGRAMS["solve"], a, b)
    assert "lapack" in jax.jit(PROGRAMS["solve"]).lower(a, b).as_text().lower()


def test_cholesky_reads_the_lower_triangle_and_fails_as_lapack_does():
    """`symmetrize_input=False` reads the lower triangle only; a matrix that is not
    positive definite gives NaNs, each matrix of a batch on its own (JAX's CPU rule)."""
    spd = np.array([[4.0, 2.0, 0.4], [2.0, 3.0, 0.5], [0.4, 0.5, 2.0]], np.float32)
    indefinite = np.diag(np.array([1.0, -1.0, 2.0], np.float32))
    batch = np.stack([spd + np.triu(np.ones((3, 3), np.float32), 1), indefinite])
    fn = lambda a: lax.linalg.cholesky(a, symmetrize_input=False)   # noqa: E731
    exported = whilst.export(fn, batch)
    assert "custom_call" not in exported.text
    got = exported.exported.call(batch)
    np.testing.assert_allclose(got[0], np.linalg.cholesky(spd), rtol=1e-6)
    assert np.isnan(got[1][np.tril_indices(3)]).all()
    np.testing.assert_array_equal(got[1], fn(batch)[1])   # NaN below, zeros above


@pytest.mark.parametrize("m, n", [(5, 3), (3, 5), (4, 4), (UNROLLED_ROWS + 4, UNROLLED_ROWS + 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_householder_factors_are_lapacks(m, n, dtype):
    """`geqrf`'s R and reflectors, `householder_product` and `ormqr` on each side,
    transposed or not, equal LAPACK's (geqrf, orgqr, ormqr) on real and complex
    matrices, tall and wide, unrolled and in a fori_loop."""
    a = RNG.normal(size=(2, m, n)).astype(dtype)
    if np.iscomplexobj(a):
        a = a + 1j * RNG.normal(size=a.shape).astype(np.float32)
    k = min(m, n)
    c = RNG.normal(size=(2, m, 3)).astype(dtype)

    def factors(a, c):
        r, taus = lapack_linalg.geqrf(a)
        q = lapack_linalg.householder_product(r[..., :, :k] if m >= n else r[..., :, :m], taus)
        return (r, taus, q, *(lapack_linalg.ormqr(r, taus, x, left=left, transpose=transpose)
                              for left, x in ((True, c), (False, jnp.swapaxes(c, -1, -2)))
                              for transpose in (False, True)))

    exported = whilst.export(factors, a, c)
    assert "custom_call" not in exported.text
    for got, want in zip(exported.exported.call(a, c), jax.jit(factors)(a, c)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


def test_reflection_of_a_zero_column_is_the_identity():
    """Where a column has nothing below its diagonal, LAPACK's tau is 0 (H = I)."""
    a = np.array([[2.0, 1.0], [0.0, 3.0], [0.0, 4.0]], np.float32)
    exported = whilst.export(lapack_linalg.geqrf, a)
    for got, want in zip(exported.exported.call(a), lapack_linalg.geqrf(a)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert exported.exported.call(a)[1][0] == 0

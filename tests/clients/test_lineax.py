"""lineax's and jax.numpy's Cholesky and QR solves, and lineax's GMRES, inside whilst
loops and outside, compiled by `whilst.compile` and run by `whilst.runtime`, against
JAX on CPU (whose rules call LAPACK's potrf, trsm, geqrf, orgqr and ormqr; whilst
exports them in portable ops)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

lx = pytest.importorskip("lineax")

import whilst  # noqa: E402
from whilst.ir.iree_forms._portable_linalg import UNROLLED_ROWS  # noqa: E402

pytestmark = pytest.mark.iree

RNG = np.random.default_rng(1)


def spd(n):
    a = RNG.normal(size=(n, n)).astype(np.float32)
    return a @ a.T / n + np.eye(n, dtype=np.float32)


def cholesky_iteration(m, b):
    """x <- m^-1 (x + b) by lineax's Cholesky until |x| passes 10 (or 50 steps)."""
    operator = lx.MatrixLinearOperator(m, lx.positive_semidefinite_tag)

    def body(carry):
        i, x = carry
        return i + 1, lx.linear_solve(operator, x + b, lx.Cholesky()).value

    return whilst.lax.while_loop(lambda c: (jnp.linalg.norm(c[1]) < 10.0) & (c[0] < 50), body,
                                 (0, b))


def factor_and_solve(m, b):
    """jnp.linalg.cholesky of a batch, and cho_solve with its upper factor."""
    factors = jnp.linalg.cholesky(jnp.stack([m, 2.0 * m]))
    return factors, jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(m, lower=False), b)


def test_cholesky_solves_in_and_out_of_loops_run_on_iree():
    m, b = spd(4) * 0.5, RNG.normal(size=4).astype(np.float32)
    module = whilst.compile([whilst.export(cholesky_iteration, m, b, name="iteration"),
                             whilst.export(factor_and_solve, m, b, name="factors")]).load()
    steps, x = module.iteration(m, b)
    want_steps, want_x = jax.jit(cholesky_iteration)(m, b)
    assert steps == want_steps > 1
    np.testing.assert_allclose(x, want_x, rtol=2e-4, atol=1e-5)
    for got, want in zip(module.factors(m, b), jax.jit(factor_and_solve)(m, b)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-5)


def qr_iteration(m, b):
    """x <- r^-1 q^T (x + b), q r = m + x x^T / 100, until sum(x) passes 100 (or 50 steps)."""
    def body(carry):
        i, x = carry
        q, r = jnp.linalg.qr(m + jnp.outer(x, x) * 0.01)
        return i + 1, jax.scipy.linalg.solve_triangular(r, q.T @ (x + b))

    return whilst.lax.while_loop(lambda c: (jnp.sum(c[1]) < 100.0) & (c[0] < 50), body, (0, b))


def lineax_least_squares(m, b):
    """The least-squares solution of a 5 x 4 system by lineax's QR."""
    tall = jnp.concatenate([m, m[:1] + 1.0])
    return lx.linear_solve(lx.MatrixLinearOperator(tall), jnp.concatenate([b, b[:1]]),
                           lx.QR()).value


def lineax_gmres(m, b):
    return lx.linear_solve(lx.MatrixLinearOperator(m + jnp.triu(m, 1)), b,
                           lx.GMRES(rtol=1e-6, atol=1e-6), throw=False).value


def test_qr_solves_and_gmres_run_on_iree():
    """jnp.linalg.qr in a loop, lineax's QR (geqrf and ormqr) and its GMRES (whose
    least-squares steps are QR solves) match JAX."""
    m, b = spd(4), RNG.normal(size=4).astype(np.float32)
    programs = {"iteration": qr_iteration, "least_squares": lineax_least_squares,
                "gmres": lineax_gmres}
    module = whilst.compile([whilst.export(f, m, b, name=name)
                             for name, f in programs.items()]).load()
    steps, x = module.iteration(m, b)
    want_steps, want_x = jax.jit(qr_iteration)(m, b)
    assert steps == want_steps > 1
    np.testing.assert_allclose(x, want_x, rtol=2e-4, atol=1e-5)
    for name in ("least_squares", "gmres"):
        np.testing.assert_allclose(getattr(module, name)(m, b), jax.jit(programs[name])(m, b),
                                   rtol=2e-4, atol=1e-5)


def test_solves_of_more_rows_than_unrolled_run_on_iree():
    """Past UNROLLED_ROWS the factorizations and substitutions are `fori_loop`s (the
    substitution by columns: by rows, iree-compile 3.13 crashed)."""
    m = spd(UNROLLED_ROWS + 3)
    b = RNG.normal(size=(m.shape[0], 2)).astype(np.float32)
    programs = {"lu": jnp.linalg.solve,
                "cholesky": lambda m, b: jax.scipy.linalg.cho_solve(
                    jax.scipy.linalg.cho_factor(m, lower=False), b),
                "upper_unit": lambda m, b: jax.scipy.linalg.solve_triangular(
                    jnp.triu(m), b, lower=False, unit_diagonal=True),
                "qr": lambda m, b: lx.linear_solve(lx.MatrixLinearOperator(m), b[:, 0],
                                                   lx.QR()).value}
    module = whilst.compile([whilst.export(f, m, b, name=name)
                             for name, f in programs.items()]).load()
    for name, f in programs.items():
        np.testing.assert_allclose(getattr(module, name)(m, b), jax.jit(f)(m, b),
                                   rtol=2e-4, atol=1e-5)

"""lineax's and jax.numpy's Cholesky solves, inside whilst loops and outside, compiled
by `whilst.compile` and run by `whilst.runtime`, against JAX on CPU (whose rules call
LAPACK's potrf and trsm; whilst exports them in portable ops)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

lx = pytest.importorskip("lineax")

import whilst  # noqa: E402
from whilst.lowering._portable_linalg import UNROLLED_ROWS  # noqa: E402

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


def test_solves_of_more_rows_than_unrolled_run_on_iree():
    """Past UNROLLED_ROWS the factorizations and substitutions are `fori_loop`s (the
    substitution by columns: by rows, iree-compile 3.13 crashed)."""
    m = spd(UNROLLED_ROWS + 3)
    b = RNG.normal(size=(m.shape[0], 2)).astype(np.float32)
    programs = {"lu": jnp.linalg.solve,
                "cholesky": lambda m, b: jax.scipy.linalg.cho_solve(
                    jax.scipy.linalg.cho_factor(m, lower=False), b),
                "upper_unit": lambda m, b: jax.scipy.linalg.solve_triangular(
                    jnp.triu(m), b, lower=False, unit_diagonal=True)}
    module = whilst.compile([whilst.export(f, m, b, name=name)
                             for name, f in programs.items()]).load()
    for name, f in programs.items():
        np.testing.assert_allclose(getattr(module, name)(m, b), jax.jit(f)(m, b),
                                   rtol=2e-4, atol=1e-5)

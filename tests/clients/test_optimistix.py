"""optimistix root finds, minimisations, least squares and fixed points (their own
loops, with lineax's LU inside Newton and the implicit gradient, and its QR inside
Levenberg-Marquardt) compiled by `whilst.compile` unchanged, run by `whilst.runtime`,
compared with optimistix on JAX."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

optx = pytest.importorskip("optimistix")

import whilst  # noqa: E402

pytestmark = pytest.mark.iree

Y0 = np.array([0.5, 0.2, 0.8], np.float32)


def newton(y0, a):
    """The root of tanh(y) + a y = 0.5, elementwise (lineax's LU solves each step)."""
    return optx.root_find(lambda y, a: jnp.tanh(y) + a * y - 0.5,
                          optx.Newton(rtol=1e-6, atol=1e-6), y0, a, max_steps=64,
                          throw=False).value


def fixed_point(y0, a):
    """y = cos(a y) by plain iteration."""
    return optx.fixed_point(lambda y, a: jnp.cos(a * y),
                            optx.FixedPointIteration(rtol=1e-6, atol=1e-6), y0, a,
                            max_steps=256, throw=False).value


def rosenbrock(y, a):
    return jnp.sum(a * (y[1:] - y[:-1] ** 2) ** 2 + (1 - y[:-1]) ** 2)


def bfgs(y0, a):
    return optx.minimise(rosenbrock, optx.BFGS(rtol=1e-6, atol=1e-6), y0, a, max_steps=256,
                         throw=False).value


def shifted_quartic(y, a):
    """Its minimum is at y = a * [1, 2, 3]: d/da sum(argmin) = 6."""
    d = y - a * jnp.array([1.0, 2.0, 3.0])
    return jnp.sum(d ** 2 + 0.1 * d ** 4)


def bfgs_argmin_sum(y0, a):
    return jnp.sum(optx.minimise(shifted_quartic, optx.BFGS(rtol=1e-6, atol=1e-6), y0, a,
                                 max_steps=256, throw=False).value)


def rosenbrock_residuals(y, a):
    return jnp.concatenate([jnp.sqrt(a) * (y[1:] - y[:-1] ** 2), 1 - y[:-1]])


def levenberg_marquardt(y0, a):
    """Rosenbrock's residuals: 4 of them, 3 unknowns (lineax's QR solves each step)."""
    return optx.least_squares(rosenbrock_residuals,
                              optx.LevenbergMarquardt(rtol=1e-6, atol=1e-6), y0, a,
                              max_steps=256, throw=False).value


CASES = {
    "newton": (newton, Y0, np.float32(0.9)),
    "newton_grad": (jax.grad(lambda y, a: jnp.sum(newton(y, a)), argnums=1), Y0,
                    np.float32(0.9)),
    "fixed_point": (fixed_point, Y0, np.float32(0.9)),
    "fixed_point_grad": (jax.grad(lambda y, a: jnp.sum(fixed_point(y, a)), argnums=1), Y0,
                         np.float32(0.9)),
    "bfgs": (bfgs, np.array([-1.0, 1.0, 0.5], np.float32), np.float32(10.0)),
    "bfgs_implicit_grad": (jax.grad(bfgs_argmin_sum, argnums=1), Y0, np.float32(0.7)),
    "levenberg_marquardt": (levenberg_marquardt, np.array([-1.0, 1.0, 0.5], np.float32),
                            np.float32(10.0)),
    "levenberg_marquardt_grad": (jax.grad(lambda y, a: jnp.sum(levenberg_marquardt(y, a)),
                                          argnums=1), Y0, np.float32(10.0)),
}


@pytest.fixture(scope="module")
def module():
    exports = [whilst.export(fn, y0, a, name=name) for name, (fn, y0, a) in CASES.items()]
    return whilst.compile(exports).load()


# The cases whose loops branch (`lax.cond`): Levenberg-Marquardt's accepted or
# rejected step, BFGS's line search.
BRANCHING = ["bfgs", "levenberg_marquardt", "levenberg_marquardt_grad"]


@pytest.fixture(scope="module")
def host_driven():
    """The BRANCHING cases compiled with every loop stepped from the host (as for a
    GPU), loaded on local-task."""
    exports = [whilst.export(fn, y0, a, name=name)
               for name, (fn, y0, a) in CASES.items() if name in BRANCHING]
    return whilst.compile(exports, loops_in_dispatch=False).load("local-task")


def test_bfgs_implicit_gradient_is_the_argmin_derivative():
    np.testing.assert_allclose(jax.grad(bfgs_argmin_sum, argnums=1)(Y0, 0.7), 6.0, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_optimistix_on_jax(module, name):
    fn, y0, a = CASES[name]
    for scale in (1.0, 0.5):
        want = jax.jit(fn)(y0 * scale, a)
        np.testing.assert_allclose(getattr(module, name)(y0 * scale, a), want,
                                   rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", BRANCHING)
def test_host_driven_loops_match_optimistix_on_local_task(host_driven, name):
    """Before: Levenberg-Marquardt failed every call on local-task and vulkan (its
    step's `lax.cond` returns a constant: iree_limits/constant_branch_result.mlir)."""
    fn, y0, a = CASES[name]
    for scale in (1.0, 0.5):
        want = jax.jit(fn)(y0 * scale, a)
        np.testing.assert_allclose(getattr(host_driven, name)(y0 * scale, a), want,
                                   rtol=2e-5, atol=2e-5)

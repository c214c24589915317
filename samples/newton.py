"""Newton's method for a parametrised nonlinear system, and the derivative of its root
with respect to the parameters.

    python samples/newton.py [--small] [--figures DIR]

The system is the Bratu problem with a source, -u'' = lam exp(u) + s sin(pi x) on (0, 1),
u(0) = u(1) = 0, on n interior grid points: F(u, theta) = 0 with theta = (lam, s).
Newton steps u <- u - J(u)^-1 F(u) (J tridiagonal, solved by the Thomas algorithm)
run until the step is below 1e-4; the trip count grows as lam nears the fold where
the solution branch ends. jax.jacrev of the root runs the gradient While once per
output (vmap of the gradient While) and is checked against the implicit-function
theorem, du/dtheta = -(dF/du)^-1 dF/dtheta at the root (the oracle, with
jnp.linalg.solve in JAX). A batch of parameters is solved by vmap, each example
taking its own number of steps.

The script's module holds `solve_batch` and `root_jacobian`; the command line
exports scalar functions and their gradients, so it compiles the mean of the root and
its gradient (the column means of du*/dtheta) as `mean_root` and `mean_root_grad`:

    whilst compile samples/newton.py:mean_root --arg 'f32[2]' --grad 0 -o newton.vmfb
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import whilst
from _harness import Stages, best_time, print_speed, run_main, save_figure

STEP_TOL = 1e-4
MAX_STEPS = 50
FIGURE = "newton.png"


def grid(n):
    return jnp.arange(1, n + 1) / (n + 1)


def residual(u, theta):
    """F(u, theta): the discretised -u'' - lam exp(u) - s sin(pi x)."""
    lam, s = theta[0], theta[1]
    h = 1.0 / (u.shape[0] + 1)
    padded = jnp.pad(u, 1)
    return ((2 * u - padded[:-2] - padded[2:]) / h ** 2 - lam * jnp.exp(u)
            - s * jnp.sin(jnp.pi * grid(u.shape[0])))


def tridiagonal_solve(off, diag, rhs):
    """Solve T x = rhs, T with `diag` on the diagonal and the scalar `off` beside it
    (Thomas algorithm: a forward sweep and a back substitution)."""
    def sweep(carry, row):
        c_prev, d_prev = carry
        b, d = row
        m = b - off * c_prev
        c, d = off / m, (d - off * d_prev) / m
        return (c, d), (c, d)

    _, (c, d) = lax.scan(sweep, (jnp.zeros(()), jnp.zeros(())), (diag, rhs))

    def substitute(x_next, row):
        c, d = row
        x = d - c * x_next
        return x, x

    _, x = lax.scan(substitute, jnp.zeros(()), (c, d), reverse=True)
    return x


def solve(theta, n):
    """Newton from u = 0 while the last step's max |du| > STEP_TOL (at most
    MAX_STEPS steps). Returns (u, steps)."""
    h = 1.0 / (n + 1)

    def cond(k, u, step_size):
        return step_size > STEP_TOL

    def body(k, u, step_size):
        jacobian_diag = 2 / h ** 2 - theta[0] * jnp.exp(u)
        step = tridiagonal_solve(-1 / h ** 2, jacobian_diag, residual(u, theta))
        return k + 1, u - step, jnp.max(jnp.abs(step))

    steps, u, _ = whilst.while_loop(cond, body, [0, jnp.zeros(n), jnp.inf],
                                    maximum_iterations=MAX_STEPS, name="newton")
    return u, steps


def root(theta, n=64):
    """The root u*(theta) of F(., theta), on n grid points."""
    return solve(theta, n)[0]


def mean_root(theta):
    """The mean of u*(theta) over the grid: a scalar for `whilst compile --grad`."""
    return jnp.mean(root(theta))


def implicit_function_jacobian(u, theta):
    """The oracle: du*/dtheta = -(dF/du)^-1 dF/dtheta at the root u."""
    dF_du = jax.jacobian(residual, 0)(u, theta)
    dF_dtheta = jax.jacobian(residual, 1)(u, theta)
    return -jnp.linalg.solve(dF_du, dF_dtheta)


def bench_program(n=64, lam=3.2, s=1.0):
    """`(fn, args)` for bench/iree_vs_jax.py: du*/dtheta (jacrev through the solver)."""
    return (jax.jacrev(lambda theta: root(theta, n)), (np.array([lam, s], np.float32),))


def exported(n=64, lams=(0.5, 1.5, 2.5, 3.0, 3.2), s=1.0):
    """`{name: (fn, export args, call args)}`: the functions `run` exports and calls."""
    theta = np.array([lams[-1], s], np.float32)
    thetas = np.array([[lam, s] for lam in lams], np.float32)
    return {"solve_batch": (jax.vmap(lambda theta: solve(theta, n)), (thetas,), (thetas,)),
            "root_jacobian": (jax.jacrev(lambda theta: root(theta, n)), (theta,), (theta,))}


def run(n=64, lams=(0.5, 1.5, 2.5, 3.0, 3.2), s=1.0, figure=None):
    """Export, compile, run on IREE and compare with JAX; returns the numbers."""
    theta = np.array([lams[-1], s], np.float32)
    thetas = np.array([[lam, s] for lam in lams], np.float32)
    solve_n = lambda theta: solve(theta, n)  # noqa: E731
    solve_batch = jax.vmap(solve_n)
    jacobian = jax.jacrev(lambda theta: root(theta, n))
    stages = Stages()
    with stages("trace + export to StableHLO"):
        exports = [whilst.export(fn, *args, name=name)
                   for name, (fn, args, _) in exported(n, lams, s).items()]
    with stages("IREE compile (llvm-cpu, host)"):
        compiled = whilst.compile(exports, target="llvm-cpu")
    with stages("load + first call on the IREE runtime"):
        module = whilst.runtime.load(compiled.data)
        us, steps = module.solve_batch(thetas)
        du_dtheta = module.root_jacobian(theta)
    with stages("JAX reference + implicit-function oracle"):
        us_jax, steps_jax = jax.jit(solve_batch)(thetas)
        du_dtheta_ift = np.asarray(implicit_function_jacobian(us_jax[-1], theta))
    result = dict(n=n, lams=lams, steps=steps, steps_jax=np.asarray(steps_jax), us=us,
                  us_jax=np.asarray(us_jax), du_dtheta=du_dtheta,
                  du_dtheta_ift=du_dtheta_ift,
                  max_residual=float(np.abs(jax.vmap(residual)(us, thetas)).max()))

    print(f"Newton on the Bratu problem, n = {n}, s = {s}")
    print(f"  lam:                {' '.join(f'{lam:5.2f}' for lam in lams)}")
    print(f"  Newton steps, IREE: {' '.join(f'{k:5d}' for k in steps)}")
    print(f"  Newton steps, JAX:  {' '.join(f'{k:5d}' for k in result['steps_jax'])}")
    print(f"  max |F(u*)| on IREE: {result['max_residual']:.2e} (F scales like 1/h^2 = "
          f"{(n + 1) ** 2})")
    print(f"  u*  max |IREE - JAX| = {np.abs(us - result['us_jax']).max():.2e}")
    print(f"  du*/dtheta at lam = {lams[-1]}: max |IREE - implicit function| / max |.| = "
          f"{jacobian_error(result):.2e}")
    stages.print()
    print_speed(f"solve, batch of {len(lams)} (vmap)", best_time(module.solve_batch, thetas),
                best_time(jax.jit(solve_batch), thetas))
    print_speed("du*/dtheta (jacrev: vmap of gradient While)",
                best_time(module.root_jacobian, theta), best_time(jax.jit(jacobian), theta))
    if figure:
        plot(result, figure)
    return result


def jacobian_error(result):
    return float(np.abs(result["du_dtheta"] - result["du_dtheta_ift"]).max()
                 / np.abs(result["du_dtheta_ift"]).max())


def check(result):
    """IREE's roots and step counts agree with JAX's; the derivative of the root
    agrees with the implicit-function theorem."""
    np.testing.assert_array_equal(result["steps"], result["steps_jax"])
    np.testing.assert_allclose(result["us"], result["us_jax"], rtol=1e-4, atol=1e-5)
    assert result["max_residual"] < 1e-6 * (result["n"] + 1) ** 2
    assert jacobian_error(result) < 1e-3, jacobian_error(result)


def plot(result, path):
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    x = np.asarray(grid(result["n"]))
    for lam, u, k in zip(result["lams"], result["us"], result["steps"]):
        left.plot(x, u, label=f"lam = {lam}: {k} Newton steps")
    left.set(xlabel="x", ylabel="u*(x)", title="Roots from the vmapped solve on IREE")
    left.legend(fontsize=8)
    for j, name in enumerate(("lam", "s")):
        line, = right.plot(x, result["du_dtheta"][:, j], label=f"du*/d{name}, whilst on IREE")
        right.plot(x[::4], result["du_dtheta_ift"][::4, j], "o", mfc="none",
                   color=line.get_color(), label=f"du*/d{name}, implicit function theorem")
    right.set(xlabel="x", title=f"Derivative of the root at lam = {result['lams'][-1]}")
    right.legend(fontsize=8)
    save_figure(fig, path)


def main():
    run_main(__doc__, run, check, small=dict(n=8), figure=FIGURE,
             small_help="n = 8")


if __name__ == "__main__":
    main()

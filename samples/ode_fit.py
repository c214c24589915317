"""Adaptive ODE solver: fit a Lotka-Volterra model to noisy data through Dormand-Prince 5(4).

    python samples/ode_fit.py [--small] [--figures DIR]

The solver takes Dormand-Prince 5(4) steps with a PI step-size controller until the
last observation time: the controller decides the trip count, rejected steps are
retried smaller, and steps are shortened to land on each observation time. The loss is
the mean squared error between the solution at the observation times and noisy
observations; jax.value_and_grad through the solver (one forward While, one gradient
While over the steps taken) gives the gradient with respect to the four log-parameters
of the predator-prey system dx/dt = a x - b x y, dy/dt = d x y - g y. Step sizes are
constants for the gradient (stop_gradient on the controller's output): the gradient
is that of the discrete solution along the steps taken, which does not hinge on the
controller's rounding-sensitive choices.

Gradient descent (Adam, in numpy) runs its steps on the IREE-compiled loss and
gradient through whilst.runtime. The first loss and gradient are checked against JAX:
the same whilst solver under jax.jit, and jax.grad of the same step function iterated
a fixed number of times by `lax.fori_loop` (the oracle, no whilst).

The script's module holds `loss_and_grad` (one call per training step) and `solve`;
the loss and its gradient as two functions, `loss` and `loss_grad`, from the command
line:

    whilst compile samples/ode_fit.py:loss --arg 'f32[4]' --arg 'f32[2]' \\
        --arg 'f32[20]' --arg 'f32[20,2]' --grad 0 -o ode_fit.vmfb
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import whilst
from _harness import Stages, best_time, print_speed, run_main, save_figure

RTOL, ATOL = 1e-4, 1e-4
MAX_STEPS = 2000
TRUE_PARAMS = np.array([1.1, 0.4, 0.1, 0.4], np.float32)  # a, b, d, g
Y0 = np.array([10.0, 10.0], np.float32)
FIGURE = "ode_fit.png"

# Dormand-Prince 5(4): stage coefficients, 5th-order weights, and 5th minus 4th.
A = [[],
     [1 / 5],
     [3 / 40, 9 / 40],
     [44 / 45, -56 / 15, 32 / 9],
     [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
     [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
     [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84]]
B5 = np.array(A[6] + [0])
B4 = np.array([5179 / 57600, 0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40])
E = B5 - B4


def lotka_volterra(y, params):
    a, b, d, g = params
    prey, predator = y
    return jnp.stack([a * prey - b * prey * predator, d * prey * predator - g * predator])


def dopri_step(y, h, params):
    """One Dormand-Prince step: the 5th-order solution and the error estimate."""
    ks = []
    for row in A:
        ks.append(lotka_volterra(y + h * sum(a * k for a, k in zip(row, ks)), params))
    y_next = y + h * sum(b * k for b, k in zip(B5, ks))
    return y_next, h * sum(e * k for e, k in zip(E, ks))


def solver_step(state, params, t_obs):
    """One attempt: step by h, shortened (or stretched by up to 10%) to land on the
    next observation time; accept if the scaled error norm is <= 1; the PI controller
    picks the next h."""
    t, y, h, err_prev, j, ys, attempts, rejected = state
    t_land = jnp.asarray(t_obs)[j]
    remaining = t_land - t
    lands = 1.1 * h >= remaining
    h = jnp.where(lands, remaining, h)
    y_next, y_err = dopri_step(y, h, params)
    scale = ATOL + RTOL * jnp.maximum(jnp.abs(y), jnp.abs(y_next))
    err = jnp.maximum(jnp.sqrt(jnp.mean((y_err / scale) ** 2)), 1e-6)
    accept = err <= 1.0
    factor = jnp.where(accept, 0.9 * err ** -0.14 * err_prev ** 0.08, 0.9 * err ** -0.2)
    h_next = lax.stop_gradient(h * jnp.clip(factor, 0.2, 10.0))
    t = jnp.where(accept, jnp.where(lands, t_land, t + h), t)
    y = jnp.where(accept, y_next, y)
    record = accept & lands
    ys = ys.at[j].set(jnp.where(record, y_next, ys[j]))
    return (t, y, h_next, jnp.where(accept, err, err_prev), j + record.astype(j.dtype), ys,
            attempts + 1, rejected + (~accept).astype(rejected.dtype))


def initial_state(y0, t_obs):
    zero = jnp.zeros((), jnp.int32)
    return (jnp.zeros(()), y0, jnp.full((), 0.01), jnp.ones(()), zero,
            jnp.zeros((t_obs.shape[0], y0.shape[0])), zero, zero)


def solve(log_params, y0, t_obs):
    """Integrate from t = 0 until t_obs[-1]; returns (y at t_obs, attempted steps,
    rejected steps)."""
    params = jnp.exp(log_params)
    state = whilst.while_loop(lambda *s: s[4] < t_obs.shape[0],
                              lambda *s: solver_step(s, params, t_obs),
                              initial_state(y0, t_obs), maximum_iterations=MAX_STEPS,
                              name="dopri5")
    return state[5], state[6], state[7]


def loss(log_params, y0, t_obs, y_obs):
    """Mean squared error between the solution at t_obs and the observations."""
    ys, _, _ = solve(log_params, y0, t_obs)
    return jnp.mean((ys - y_obs) ** 2)


def oracle_loss(log_params, y0, t_obs, y_obs, attempts):
    """The same loss with `solver_step` applied exactly `attempts` times."""
    params = jnp.exp(log_params)
    state = lax.fori_loop(0, attempts, lambda _, s: solver_step(s, params, t_obs),
                          initial_state(y0, t_obs))
    return jnp.mean((state[5] - y_obs) ** 2)


def observations(n_obs, t_end=15.0, noise=1.0, seed=0):
    """Observation times in (0, t_end] and the true solution plus Gaussian noise."""
    t_obs = np.linspace(t_end / n_obs, t_end, n_obs).astype(np.float32)
    ys, _, _ = jax.jit(solve)(np.log(TRUE_PARAMS), Y0, t_obs)
    noisy = ys + noise * np.random.default_rng(seed).normal(size=ys.shape)
    return t_obs, noisy.astype(np.float32)


def adam(grad_fn, x, steps, lr=0.03, b1=0.9, b2=0.999, eps=1e-8):
    """Adam on numpy arrays; grad_fn(x) -> (loss, gradient). Returns x and the losses."""
    m, v, losses = np.zeros_like(x), np.zeros_like(x), []
    for k in range(1, steps + 1):
        value, g = grad_fn(x)
        losses.append(float(value))
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g ** 2
        x = x - lr * (m / (1 - b1 ** k)) / (np.sqrt(v / (1 - b2 ** k)) + eps)
    return x, losses


def bench_program():
    """`(fn, args)` for bench/iree_vs_jax.py: the loss and its gradient at the
    initial guess (what each Adam step calls)."""
    t_obs, y_obs = observations(20)
    start = np.log(TRUE_PARAMS * np.array([0.7, 0.7, 1.4, 1.4], np.float32))
    return jax.value_and_grad(loss), (start, Y0, t_obs, y_obs)


def exported(n_obs=20):
    """`{name: (fn, export args, call args)}`: the functions `run` exports (`solve`
    for any number of output times) and its first calls."""
    t_obs, y_obs = observations(n_obs)
    start = np.log(TRUE_PARAMS * np.array([0.7, 0.7, 1.4, 1.4], np.float32))
    any_number_of_times = jax.ShapeDtypeStruct(jax.export.symbolic_shape("k"), np.float32)
    args = (start, Y0, t_obs, y_obs)
    return {"loss_and_grad": (jax.value_and_grad(loss), args, args),
            "solve": (solve, (start, Y0, any_number_of_times), (start, Y0, t_obs))}


def run(n_obs=20, train_steps=400, figure=None):
    """Export, compile, check the first gradient against JAX, then fit on IREE."""
    t_obs, y_obs = observations(n_obs)
    t_plot = np.linspace(0.0, 15.0, 301)[1:].astype(np.float32)
    start = np.log(TRUE_PARAMS * np.array([0.7, 0.7, 1.4, 1.4], np.float32))
    value_and_grad = jax.value_and_grad(loss)
    stages = Stages()
    with stages("trace + export to StableHLO"):
        exports = [whilst.export(fn, *args, name=name)
                   for name, (fn, args, _) in exported(n_obs).items()]
    with stages("IREE compile (llvm-cpu, host)"):
        compiled = whilst.compile(exports, target="llvm-cpu")
    with stages("load + first call on the IREE runtime"):
        module = whilst.runtime.load(compiled.data)
        first = module.loss_and_grad(start, Y0, t_obs, y_obs)
        _, attempts, rejected = module.solve(start, Y0, t_obs)
    with stages("JAX reference (jit) + fori_loop oracle"):
        first_jax = jax.jit(value_and_grad)(start, Y0, t_obs, y_obs)
        _, attempts_jax, _ = jax.jit(solve)(start, Y0, t_obs)
        first_oracle = jax.value_and_grad(oracle_loss)(start, Y0, t_obs, y_obs,
                                                      int(attempts_jax))
    with stages(f"fit: {train_steps} Adam steps on IREE"):
        fitted, losses = adam(lambda p: module.loss_and_grad(p, Y0, t_obs, y_obs), start,
                              train_steps)
    result = dict(attempts=int(attempts), rejected=int(rejected),
                  attempts_jax=int(attempts_jax), first=first,
                  first_jax=jax.tree_util.tree_map(np.asarray, first_jax),
                  first_oracle=jax.tree_util.tree_map(np.asarray, first_oracle),
                  losses=losses, fitted=np.exp(fitted))

    print(f"Dormand-Prince 5(4) on Lotka-Volterra, {n_obs} observations, rtol {RTOL}")
    print(f"  steps at the initial guess: IREE {result['attempts']} ({result['rejected']} "
          f"rejected), JAX {result['attempts_jax']}")
    for name in ("first_jax", "first_oracle"):
        print(f"  first loss and gradient, IREE vs {name[6:]}: loss "
              f"{first[0]:.5f} vs {result[name][0]:.5f}, max |d grad| / max |grad| = "
              f"{grad_error(result, name):.2e}")
    print(f"  loss: {losses[0]:.4f} -> {losses[-1]:.4f} after {train_steps} steps")
    print(f"  fitted a, b, d, g = {np.round(result['fitted'], 3)}  (true {TRUE_PARAMS})")
    stages.print()
    print_speed("loss and gradient (forward + gradient While)",
                best_time(module.loss_and_grad, start, Y0, t_obs, y_obs),
                best_time(jax.jit(value_and_grad), start, Y0, t_obs, y_obs))
    print_speed(f"solve on {t_plot.size} output times", best_time(module.solve, start, Y0, t_plot),
                best_time(jax.jit(solve), start, Y0, t_plot))
    if figure:
        plot(module, result, start, fitted, t_obs, y_obs, t_plot, figure)
    return result


def grad_error(result, name):
    g, g_ref = result["first"][1], result[name][1]
    return float(np.abs(g - g_ref).max() / np.abs(g_ref).max())


def check(result):
    """IREE's first loss and gradient agree with JAX's and with the fori_loop oracle;
    the fit lowers the loss. Step counts may differ by a few: XLA and IREE round
    differently, and the controller's decision to land on an observation time
    (1.1 h >= remaining) can flip."""
    assert abs(result["attempts"] - result["attempts_jax"]) <= max(2, result["attempts_jax"] // 10)
    for name in ("first_jax", "first_oracle"):
        np.testing.assert_allclose(result["first"][0], result[name][0], rtol=1e-3)
        assert grad_error(result, name) < 1e-2, (name, grad_error(result, name))
    assert result["losses"][-1] < result["losses"][0]


def plot(module, result, start, fitted, t_obs, y_obs, t_plot, path):
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for params, style, label in ((start, ":", "initial guess"), (fitted, "-", "fitted")):
        ys, _, _ = module.solve(params, Y0, t_plot)
        _, attempts, _ = module.solve(params, Y0, t_obs)
        for i, (name, color) in enumerate((("prey", "C0"), ("predator", "C1"))):
            left.plot(t_plot, ys[:, i], style, color=color,
                      label=f"{name}, {label} ({attempts} steps to t = {t_obs[-1]:g})")
    left.plot(t_obs, y_obs[:, 0], "o", color="C0", label="prey, noisy data")
    left.plot(t_obs, y_obs[:, 1], "s", color="C1", label="predator, noisy data")
    left.set(xlabel="t", ylabel="population", title="Lotka-Volterra fit (solved on IREE)")
    left.legend(fontsize=7)
    right.semilogy(result["losses"])
    right.set(xlabel="Adam step (loss and gradient on IREE)", ylabel="mean squared error",
              title="Loss")
    save_figure(fig, path)


def main():
    run_main(__doc__, run, check, small=dict(n_obs=5, train_steps=5), figure=FIGURE,
             small_help="5 observations, 5 Adam steps")


if __name__ == "__main__":
    main()

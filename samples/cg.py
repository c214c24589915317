"""Conjugate gradient: solve A x = b until the residual is small, and differentiate
through the solver.

    python samples/cg.py [--small] [--figures DIR]

CG runs while ||r|| > tol * ||b|| (the trip count depends on A's spectrum and on b).
jax.grad of a loss on x, with respect to A and b, runs one gradient While over the
steps taken; it is checked against jax.grad through `jnp.linalg.solve` (the oracle).
A is read through its symmetric part (A + A^T) / 2, in the solver and in the oracle:
CG needs a symmetric positive definite matrix, and only symmetric perturbations of A
keep it one.

The script's module holds `solve`, `loss` and `loss_grad`; the last two from the
command line:

    whilst compile samples/cg.py:loss --arg 'f32[128,128]' --arg 'f32[128]' \\
        --grad 0,1 -o cg.vmfb
"""
import jax
import jax.numpy as jnp
import numpy as np

import whilst
from _harness import Stages, best_time, print_speed, run_main, save_figure

TOL = 1e-5
FIGURE = "cg.png"


def conjugate_gradient(A, b):
    """CG from x = 0 while ||r|| > TOL ||b||, at most 4 n steps.

    Returns (x, steps, history): history[k] = ||r_k|| / ||b|| for k <= steps.
    """
    A = 0.5 * (A + A.T)
    n = b.shape[0]
    bb = b @ b
    history = jnp.zeros(4 * n + 1).at[0].set(1.0)

    def cond(k, x, r, p, rr, history):
        return rr > TOL ** 2 * bb

    def body(k, x, r, p, rr, history):
        Ap = A @ p
        alpha = rr / (p @ Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rr_next = r @ r
        p = r + (rr_next / rr) * p
        history = history.at[k + 1].set(jnp.sqrt(rr_next / bb))
        return k + 1, x, r, p, rr_next, history

    x = jnp.zeros_like(b)
    r = b - A @ x
    steps, x, _, _, _, history = whilst.while_loop(
        cond, body, [0, x, r, b, bb, history],
        maximum_iterations=4 * n, name="cg")
    return x, steps, history


def loss(A, b):
    """0.5 ||x||^2 for the CG solution x of A x = b."""
    x, _, _ = conjugate_gradient(A, b)
    return 0.5 * jnp.sum(x ** 2)


def oracle_loss(A, b):
    """The same loss through LAPACK's solve (JAX only: IREE rejects jnp.linalg)."""
    x = jnp.linalg.solve(0.5 * (A + A.T), b)
    return 0.5 * jnp.sum(x ** 2)


def problem(n, condition=1e2, seed=0):
    """A symmetric positive definite A with eigenvalues log-spaced in [1, condition]
    and a random b, as float32."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    A = (Q * np.logspace(0, np.log10(condition), n)) @ Q.T
    b = rng.normal(size=n)
    return A.astype(np.float32), b.astype(np.float32)


def bench_program():
    """`(fn, args)` for bench/iree_vs_jax.py: the loss gradient at n = 128."""
    return jax.grad(loss, argnums=(0, 1)), problem(128)


def exported(n=128):
    """`{name: (fn, export args, call args)}`: the functions `run` exports and calls."""
    A, b = problem(n)
    return {"solve": (conjugate_gradient, (A, b), (A, b)), "loss": (loss, (A, b), (A, b)),
            "loss_grad": (jax.grad(loss, argnums=(0, 1)), (A, b), (A, b))}


def run(n=128, figure=None):
    """Export, compile, run on IREE and compare with JAX; returns the numbers."""
    A, b = problem(n)
    grad = jax.grad(loss, argnums=(0, 1))
    stages = Stages()
    with stages("trace + export to StableHLO"):
        exports = [whilst.export(fn, *args, name=name)
                   for name, (fn, args, _) in exported(n).items()]
    with stages("IREE compile (llvm-cpu, host)"):
        compiled = whilst.compile(exports, target="llvm-cpu")
    with stages("load + first call on the IREE runtime"):
        module = whilst.runtime.load(compiled.data)
        x, steps, history = module.solve(A, b)
        value, (dA, db) = module.loss(A, b), module.loss_grad(A, b)
    with stages("JAX oracle (jnp.linalg.solve, its jax.grad)"):
        x_ref = np.asarray(jnp.linalg.solve(0.5 * (A + A.T), b))
        value_ref = oracle_loss(A, b)
        dA_ref, db_ref = jax.grad(oracle_loss, argnums=(0, 1))(A, b)
    result = dict(n=n, steps=int(steps), x=x, x_ref=x_ref, loss=value,
                  loss_ref=np.asarray(value_ref), dA=dA, dA_ref=np.asarray(dA_ref),
                  db=db, db_ref=np.asarray(db_ref),
                  jax_steps=int(jax.jit(conjugate_gradient)(A, b)[1]))

    print(f"Conjugate gradient, n = {n}, condition number 1e2, tol {TOL}")
    print(f"  steps taken: IREE {result['steps']}, JAX {result['jax_steps']}")
    for name in ("x", "loss", "dA", "db"):
        print(f"  {name:<4} max |IREE - oracle| / max |oracle| = {rel_error(result, name):.2e}")
    stages.print()
    print_speed("solve", best_time(module.solve, A, b),
                best_time(jax.jit(conjugate_gradient), A, b))
    print_speed("loss gradient (forward + gradient While)", best_time(module.loss_grad, A, b),
                best_time(jax.jit(grad), A, b))
    if figure:
        plot(result, history, figure)
    return result


def rel_error(result, name):
    return float(np.abs(result[name] - result[name + "_ref"]).max()
                 / np.abs(result[name + "_ref"]).max())


def check(result):
    """The IREE solution and gradients agree with the LAPACK oracle; the step count
    agrees with JAX's up to float32 rounding in the stopping test."""
    assert abs(result["steps"] - result["jax_steps"]) <= 2
    assert result["steps"] < 4 * result["n"]
    for name, tol in (("x", 1e-3), ("loss", 1e-3), ("dA", 1e-2), ("db", 1e-2)):
        assert rel_error(result, name) < tol, (name, rel_error(result, name))


def plot(result, history, path):
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    steps = result["steps"]
    left.semilogy(np.arange(steps + 1), history[:steps + 1], ".-")
    left.axhline(TOL, color="gray", ls="--", label=f"tol = {TOL}")
    left.set(xlabel="CG step", ylabel="||r|| / ||b||",
             title=f"Residual, n = {result['n']} ({steps} steps on IREE)")
    left.legend()
    for name, marker in (("dA", "."), ("db", "x")):
        right.plot(result[name + "_ref"].ravel(), result[name].ravel(), marker, ms=3,
                   label=f"d loss / d{name[1:]}")
    lo, hi = right.get_xlim()
    right.plot([lo, hi], [lo, hi], color="gray", lw=0.8)
    right.set(xlabel="oracle: jax.grad through jnp.linalg.solve",
              ylabel="whilst gradient While on IREE", title="Gradient of 0.5 ||x||^2")
    right.legend()
    save_figure(fig, path)


def main():
    run_main(__doc__, run, check, small=dict(n=16), figure=FIGURE,
             small_help="n = 16")


if __name__ == "__main__":
    main()

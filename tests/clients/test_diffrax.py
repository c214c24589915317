"""diffrax solves compiled by `whilst.compile` and run by `whilst.runtime`, both ways
in: diffrax's own loops (`lax.while_loop`s) passed unchanged, and its loops routed to
whilst by `whilst.integrations.diffrax.WhilstAdjoint`; compared with diffrax on JAX
(`RecursiveCheckpointAdjoint`, its default)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

diffrax = pytest.importorskip("diffrax")

import whilst  # noqa: E402
from helpers import vulkan_or_skip  # noqa: E402
from whilst._compile import FALLBACK_NOTE  # noqa: E402
from whilst.integrations.diffrax import WhilstAdjoint  # noqa: E402
from whilst.lowering import (  # noqa: E402
    compile_to_stream, has_loops_in_dispatch, loop_costs, prepare, unroll_factors)

Y0 = np.array([10.0, 10.0], np.float32)
RATES = np.array([0.1, 0.02, 0.4, 0.02], np.float32)
TS = np.linspace(0.0, 10.0, 21).astype(np.float32)


def lotka_volterra(t, y, rates):
    a, b, c, d = rates
    return jnp.stack([a * y[0] - b * y[0] * y[1], -c * y[1] + d * y[0] * y[1]])


def lv_solve(y0, rates, adjoint=diffrax.RecursiveCheckpointAdjoint(), solver=diffrax.Tsit5(),
             saveat=diffrax.SaveAt(ts=TS)):
    """Lotka-Volterra, adaptive steps (PID controller), about 34 steps."""
    return diffrax.diffeqsolve(
        diffrax.ODETerm(lotka_volterra), solver, 0.0, 10.0, 0.1, y0, args=rates,
        stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5), saveat=saveat,
        max_steps=256, adjoint=adjoint).ys


def decay_solve(y0, rate, adjoint=diffrax.RecursiveCheckpointAdjoint(),
                saveat=diffrax.SaveAt(t1=True)):
    """dy/dt = -rate y by Euler steps of 0.1 from 0 to 1."""
    return diffrax.diffeqsolve(diffrax.ODETerm(lambda t, y, r: -r * y), diffrax.Euler(), 0.0,
                               1.0, 0.1, y0, args=rate, saveat=saveat, max_steps=64,
                               adjoint=adjoint).ys


def loss_grad(solve, **kwargs):
    return jax.grad(lambda y0, p: jnp.sum(solve(y0, p, **kwargs)), argnums=1)


# --- On JAX: WhilstAdjoint gives diffrax's results (forward and reverse mode) ---------

@pytest.mark.parametrize("solver", ["Tsit5", "Dopri5"])
@pytest.mark.parametrize("saveat", ["ts", "t1"])
def test_whilst_adjoint_matches_diffrax_on_jax(solver, saveat):
    kwargs = dict(solver=getattr(diffrax, solver)(),
                  saveat=diffrax.SaveAt(ts=TS) if saveat == "ts" else diffrax.SaveAt(t1=True))
    want = jax.jit(lambda y, p: lv_solve(y, p, **kwargs))(Y0, RATES)
    got = jax.jit(lambda y, p: lv_solve(y, p, WhilstAdjoint(), **kwargs))(Y0, RATES)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(loss_grad(lv_solve, adjoint=WhilstAdjoint(), **kwargs))(
        Y0, RATES), jax.jit(loss_grad(lv_solve, **kwargs))(Y0, RATES), rtol=2e-4)


def test_whilst_adjoint_with_checkpoints_matches_on_jax():
    want = loss_grad(lv_solve)(Y0, RATES)
    got = jax.jit(loss_grad(lv_solve, adjoint=WhilstAdjoint(checkpoints=4)))(Y0, RATES)
    np.testing.assert_allclose(got, want, rtol=2e-4)


def event_solve(y0, rates, adjoint=diffrax.RecursiveCheckpointAdjoint()):
    """Lotka-Volterra (Tsit5, PID controller) stopped by an event: the step where y[0]
    falls below 9. Returns that time and y there."""
    event = diffrax.Event(lambda t, y, args, **kw: y[0] - 9.0, root_finder=None)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lotka_volterra), diffrax.Tsit5(), 0.0, 10.0, 0.1, y0, args=rates,
        stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5), event=event,
        max_steps=256, adjoint=adjoint)
    return sol.ts[-1], sol.ys[-1]


def _stopped_solve(y0, rates, adjoint, controller, dt0, cond):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lotka_volterra), diffrax.Tsit5(), 0.0, 10.0, dt0, y0, args=rates,
        stepsize_controller=controller, max_steps=128, adjoint=adjoint,
        event=diffrax.Event(cond, root_finder=None))
    return sol.ts[-1], sol.ys[-1]


def adaptive_event_solve(y0, rates, adjoint=diffrax.RecursiveCheckpointAdjoint()):
    """Tsit5, PID controller (rtol = atol = 1e-3, dt0 = 4), stopped by an event with
    no root finder at the end of the step where y[0] rises past 11: (t, y) there.

    These tolerances and first step make every step's error estimate about the
    tolerance. At `event_solve`'s (rtol = atol = 1e-5, dt0 = 0.1) the first steps'
    float32 error estimates are rounding noise (1.8e-5 to 1.1e-4 by the order of
    Tsit5's seven-term sum; 4.9e-7 in float64), so the steps chosen, and the stop
    time, depend on how a compiler rounds (IREE: t = 2.587, XLA: 2.546)."""
    return _stopped_solve(y0, rates, adjoint, diffrax.PIDController(rtol=1e-3, atol=1e-3),
                          4.0, lambda t, y, args, **kw: y[0] - 11.0)


def fixed_step_event_solve(y0, rates, adjoint=diffrax.RecursiveCheckpointAdjoint()):
    """Tsit5, steps of 0.1, stopped by an event with no root finder at the end of the
    step where y[0] falls below 9: (t, y) there."""
    return _stopped_solve(y0, rates, adjoint, diffrax.ConstantStepSize(), 0.1,
                          lambda t, y, args, **kw: y[0] - 9.0)


def test_event_stops_the_solve_on_jax():
    """The solve stops at the end of the step where y[0] falls below 9."""
    t_want, y_want = jax.jit(event_solve)(Y0, RATES)
    t_got, y_got = jax.jit(lambda y, p: event_solve(y, p, WhilstAdjoint()))(Y0, RATES)
    assert 0.0 < float(t_want) < 10.0 and float(y_want[0]) <= 9.0
    np.testing.assert_allclose([t_got, *y_got], [t_want, *y_want], rtol=1e-6)


def test_vmapped_batch_of_initial_conditions_on_jax():
    y0s = Y0 * np.linspace(0.5, 1.5, 64, dtype=np.float32)[:, None]
    got = jax.jit(jax.vmap(lambda y: lv_solve(y, RATES, WhilstAdjoint(),
                                               saveat=diffrax.SaveAt(t1=True))))(y0s)
    np.testing.assert_allclose(got, jax.jit(batch_solve)(y0s, RATES), rtol=1e-5)


RNG = np.random.default_rng(0)
WEIGHTS = (RNG.normal(size=(2, 16)).astype(np.float32) * 0.5,
           RNG.normal(size=(16, 2)).astype(np.float32) * 0.5)


def neural_ode(y0, weights, adjoint=diffrax.RecursiveCheckpointAdjoint()):
    """A tanh MLP vector field, Tsit5, adaptive steps, y(1)."""
    return diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, w: jnp.tanh(y @ w[0]) @ w[1]), diffrax.Tsit5(), 0.0, 1.0,
        0.1, y0, args=weights, stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-4),
        saveat=diffrax.SaveAt(t1=True), max_steps=64, adjoint=adjoint).ys


def test_neural_ode_gradient_on_jax():
    """The gradient with respect to the vector field's weights."""
    grad = lambda adj: jax.grad(lambda w: jnp.sum(neural_ode(Y0 / 10, w, adj) ** 2))
    for got, want in zip(jax.jit(grad(WhilstAdjoint()))(WEIGHTS),
                         grad(diffrax.RecursiveCheckpointAdjoint())(WEIGHTS)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)


def batch_solve(y0s, rates):
    """A batch of initial conditions under vmap, y(10) of each."""
    return jax.vmap(lambda y: lv_solve(y, rates, saveat=diffrax.SaveAt(t1=True)))(y0s)


BATCH = Y0 * np.linspace(0.5, 1.5, 64, dtype=np.float32)[:, None]


# --- On IREE ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def own_loops_compiled():
    """diffrax's `lax.while_loop`s (step loop, SaveAt loop, carries the bodies never
    read) through `whilst.compile` as they are: one module of five functions."""
    return whilst.compile([whilst.export(lv_solve, Y0, RATES, name="lv"),
                           whilst.export(batch_solve, BATCH, RATES, name="batch"),
                           whilst.export(neural_ode, Y0 / 10, WEIGHTS, name="node"),
                           whilst.export(adaptive_event_solve, Y0, RATES, name="event"),
                           whilst.export(fixed_step_event_solve, Y0, RATES,
                                         name="fixed_step_event")])


@pytest.fixture(scope="module")
def own_loops(own_loops_compiled):
    return own_loops_compiled.load()


@pytest.mark.iree
def test_diffrax_own_loops_compile_unchanged_and_match(own_loops):
    for y0 in (Y0, Y0 * 0.5):
        np.testing.assert_allclose(own_loops.lv(y0, RATES), jax.jit(lv_solve)(y0, RATES),
                                   rtol=2e-5, atol=2e-5)


@pytest.mark.iree
def test_vmapped_batch_and_neural_ode_on_own_loops(own_loops):
    np.testing.assert_allclose(own_loops.batch(BATCH, RATES),
                               jax.jit(batch_solve)(BATCH, RATES), rtol=2e-5, atol=2e-5)
    for y0 in (Y0 / 10, Y0 / 20):
        np.testing.assert_allclose(own_loops.node(y0, WEIGHTS),
                                   jax.jit(neural_ode)(y0, WEIGHTS), rtol=2e-5, atol=2e-5)


@pytest.mark.iree
def test_fixed_step_event_solve_on_own_loops_runs_its_loops_in_dispatches(own_loops_compiled,
                                                                          own_loops):
    """Stepped from the host, iree-compile 3.13 refuses this solve under every flag set
    ("'scf.while' op ... region branch point has 38 operands, but region successor
    needs 40 inputs"); its loops inside dispatches compile, and it stops where diffrax
    on JAX stops."""
    assert has_loops_in_dispatch(own_loops_compiled.flags), own_loops_compiled.stages
    for y0 in (Y0, Y0 * 1.02):
        t_want, y_want = jax.jit(fixed_step_event_solve)(y0, RATES)
        assert 0.1 < float(t_want) < 10.0 and float(y_want[0]) <= 9.0
        t_got, y_got = own_loops.fixed_step_event(y0, RATES)
        np.testing.assert_allclose([t_got, *y_got], [t_want, *y_want], rtol=1e-5, atol=1e-5)


@pytest.mark.iree
def test_event_stopped_solve_on_own_loops_stops_where_diffrax_on_jax_stops(own_loops_compiled,
                                                                             own_loops):
    """`adaptive_event_solve` through diffrax's own loops: its step loop's results,
    all behind one optimization barrier, made with aggressive fusion a module that
    failed on every call ("ref is null ... hal.buffer.subspan"); with the results of
    the carries that start from copies behind barriers of their own
    (`whilst/lowering/_iree_loop_results.py`,
    iree_limits/loop_results_in_one_barrier.py), it runs. The stop time and y agree
    to the solve's tolerance, as `test_event_stops_the_solve_where_diffrax_on_jax_stops`."""
    assert FALLBACK_NOTE not in own_loops_compiled.stages[-1][0], own_loops_compiled.stages
    for y0 in (Y0 * 0.95, Y0 * 0.93):
        t_want, y_want = jax.jit(adaptive_event_solve)(y0, RATES)
        assert 0.1 < float(t_want) < 10.0 and float(y_want[0]) >= 11.0
        t_got, y_got = own_loops.event(y0, RATES)
        np.testing.assert_allclose([t_got, *y_got], [t_want, *y_want], rtol=1e-3)


@pytest.mark.iree
def test_whilst_adjoint_solve_compiles_and_matches():
    """Compiled anew (no cache), by default its loops run inside one dispatch each; with
    every loop stepped from the host it compiles under the first flag set too (kept
    whole, equinox's primitives in it made iree-compile 3.13 crash with const-expr
    hoisting: iree_limits/hoisted_nested_loop.py). Tsit5's stage loop (diffrax's,
    counting to 7) runs unrolled by 7 (whilst.ir._counted_loops)."""
    solve = lambda y, p: lv_solve(y, p, WhilstAdjoint())
    exported = whilst.export(solve, Y0, RATES)
    assert 7 in unroll_factors(exported.text)
    want = jax.jit(lv_solve)(Y0, RATES)
    compiled = whilst.compile(exported, cache=False)
    assert has_loops_in_dispatch(compiled.flags), compiled.stages[-1][0]
    np.testing.assert_allclose(compiled.load()(Y0, RATES), want, rtol=2e-5, atol=2e-5)
    host_driven = whilst.compile(exported, cache=False, loops_in_dispatch=False)
    assert host_driven.stages[-1][0] == "iree-compile for llvm-cpu (host)"
    np.testing.assert_allclose(host_driven.load()(Y0, RATES), want, rtol=2e-5, atol=2e-5)


@pytest.mark.iree
@pytest.mark.parametrize("saveat", ["t1", "ts"])
def test_whilst_adjoint_gradient_compiles_and_matches(saveat):
    """Reverse mode through whilst's gradient While, on IREE (Euler, fixed steps)."""
    kwargs = dict(saveat=diffrax.SaveAt(t1=True) if saveat == "t1"
                  else diffrax.SaveAt(ts=np.linspace(0, 1, 5).astype(np.float32)))
    grad = loss_grad(decay_solve, adjoint=WhilstAdjoint(), **kwargs)
    y0, rate = np.array([1.0, 2.0], np.float32), np.float32(0.7)
    module = whilst.compile(grad, y0, rate).load()
    for r in (rate, np.float32(0.2)):
        np.testing.assert_allclose(module(y0, r), loss_grad(decay_solve, **kwargs)(y0, r),
                                   rtol=1e-5)


# --- Runge-Kutta gradients on IREE (Tsit5: the stage loop nested in the step loop) -----

T1 = diffrax.SaveAt(t1=True)


def lv_fixed_steps(y0, rates, adjoint=diffrax.RecursiveCheckpointAdjoint()):
    """Lotka-Volterra, Tsit5, 100 steps of 0.1, y(10)."""
    return diffrax.diffeqsolve(diffrax.ODETerm(lotka_volterra), diffrax.Tsit5(), 0.0, 10.0,
                               0.1, y0, args=rates, saveat=T1, max_steps=256,
                               adjoint=adjoint).ys


@pytest.fixture(scope="module")
def tsit5_compiled():
    """d/d rates of sum(ys) through `WhilstAdjoint()` (default policy), adaptive steps
    (PID controller), SaveAt t1 and ts, as one module."""
    return whilst.compile([
        whilst.export(loss_grad(lv_solve, adjoint=WhilstAdjoint(), saveat=T1), Y0, RATES,
                      name="t1"),
        whilst.export(loss_grad(lv_solve, adjoint=WhilstAdjoint()), Y0, RATES,
                      name="ts")])


@pytest.fixture(scope="module")
def tsit5_gradients(tsit5_compiled):
    return tsit5_compiled.load()


@pytest.mark.iree
def test_tsit5_gradient_runs_every_loop_in_a_dispatch(tsit5_compiled):
    """The forward While (its stacks of rows, 460 KB at SaveAt ts, written in place)
    and the gradient While of each solve run in dispatches, no loop is left for the
    host to step, and no loop went back to it."""
    assert has_loops_in_dispatch(tsit5_compiled.flags), tsit5_compiled.stages[-1][0]
    assert "left to the host" not in tsit5_compiled.stages[-1][0]
    text = prepare([whilst.export(loss_grad(lv_solve, adjoint=WhilstAdjoint()), Y0, RATES)])
    assert loop_costs(compile_to_stream(text)) == []


@pytest.mark.iree
@pytest.mark.parametrize("saveat", ["t1", "ts"])
def test_tsit5_gradient_matches_diffrax_on_jax(tsit5_gradients, saveat):
    want = loss_grad(lv_solve, saveat=T1 if saveat == "t1" else diffrax.SaveAt(ts=TS))
    for y0 in (Y0, Y0 * 0.5):
        np.testing.assert_allclose(getattr(tsit5_gradients, saveat)(y0, RATES),
                                   jax.jit(want)(y0, RATES), rtol=2e-4)


@pytest.fixture(scope="module")
def more_rk_gradients():
    """Tsit5 gradients under the other policies and forms, as one module: fixed steps,
    `checkpoints=8`, every step stored (a `gradient_memory` holding them all), and
    the neural ODE's gradient with respect to its weights; diffrax's own
    checkpointed loops (`RecursiveCheckpointAdjoint`) passed to whilst unchanged;
    and Dopri5's gradients at t1 and at ts."""
    node = lambda w: jnp.sum(neural_ode(Y0 / 10, w, WhilstAdjoint()) ** 2)
    return whilst.compile([
        whilst.export(loss_grad(lv_fixed_steps, adjoint=WhilstAdjoint()), Y0, RATES,
                      name="fixed"),
        whilst.export(loss_grad(lv_solve, adjoint=WhilstAdjoint(checkpoints=8)), Y0, RATES,
                      name="checkpoints"),
        whilst.export(loss_grad(lv_solve, adjoint=WhilstAdjoint(gradient_memory=1 << 26)),
                      Y0, RATES, name="stored"),
        whilst.export(jax.grad(node), WEIGHTS, name="node"),
        whilst.export(loss_grad(lv_solve), Y0, RATES, name="own_loops"),
        whilst.export(loss_grad(lv_solve, adjoint=WhilstAdjoint(), solver=diffrax.Dopri5(),
                                saveat=T1), Y0, RATES, name="dopri5"),
        whilst.export(loss_grad(lv_solve, adjoint=WhilstAdjoint(), solver=diffrax.Dopri5()),
                      Y0, RATES, name="dopri5_ts")]).load()


@pytest.mark.iree
def test_rk_gradients_of_every_policy_match_diffrax_on_jax(more_rk_gradients):
    np.testing.assert_allclose(more_rk_gradients.fixed(Y0, RATES),
                               jax.jit(loss_grad(lv_fixed_steps))(Y0, RATES), rtol=2e-4)
    want = jax.jit(loss_grad(lv_solve))(Y0, RATES)
    np.testing.assert_allclose(more_rk_gradients.checkpoints(Y0, RATES), want, rtol=2e-4)
    np.testing.assert_allclose(more_rk_gradients.stored(Y0, RATES), want, rtol=2e-4)
    np.testing.assert_allclose(more_rk_gradients.own_loops(Y0, RATES), want, rtol=2e-4)
    node = lambda w: jnp.sum(neural_ode(Y0 / 10, w) ** 2)
    for got, want in zip(more_rk_gradients.node(WEIGHTS), jax.jit(jax.grad(node))(WEIGHTS)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)
    dopri5 = loss_grad(lv_solve, solver=diffrax.Dopri5(), saveat=T1)
    np.testing.assert_allclose(more_rk_gradients.dopri5(Y0, RATES), jax.jit(dopri5)(Y0, RATES),
                               rtol=2e-4)
    dopri5_ts = jax.jit(loss_grad(lv_solve, solver=diffrax.Dopri5()))
    for y0 in (Y0, Y0 * 0.5):
        np.testing.assert_allclose(more_rk_gradients.dopri5_ts(y0, RATES), dopri5_ts(y0, RATES),
                                   rtol=2e-4)


@pytest.mark.iree
def test_checkpoints_gradient_with_loops_stepped_from_the_host_matches_diffrax_on_jax():
    """The Tsit5 gradient under `checkpoints=8` with every loop stepped from the host
    (the form a module falls back to, e.g. where another of its functions has a
    dispatch past the binding limit): its forward While's checkpoint arrays of two
    boolean carries that start all true keep buffers of their own
    (`iree_limits/all_true_boolean_copies.py`)."""
    grad = loss_grad(lv_solve, adjoint=WhilstAdjoint(checkpoints=8))
    compiled = whilst.compile(grad, Y0, RATES, loops_in_dispatch=False)
    assert not has_loops_in_dispatch(compiled.flags)
    np.testing.assert_allclose(compiled.load()(Y0, RATES),
                               jax.jit(loss_grad(lv_solve))(Y0, RATES), rtol=2e-4)


# --- SaveAt(dense=True): the solution read between steps, on IREE ---------------------

DENSE_TIMES = np.array([0.3, 2.5, 7.7, 10.0], np.float32)


def dense_solve(y0, rates, adjoint=diffrax.RecursiveCheckpointAdjoint()):
    """The Lotka-Volterra solve's dense output (`sol.evaluate`) at DENSE_TIMES."""
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lotka_volterra), diffrax.Tsit5(), 0.0, 10.0, 0.1, y0, args=rates,
        stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5),
        saveat=diffrax.SaveAt(dense=True), max_steps=64, adjoint=adjoint)
    return jax.vmap(sol.evaluate)(jnp.asarray(DENSE_TIMES))


@pytest.mark.iree
def test_dense_output_and_its_gradient_match_diffrax_on_jax():
    """Both ways in, and the gradient through WhilstAdjoint, whose reads of the
    dense output scatter into windows they index (IREE 3.13 rejected them:
    `whilst/ir/iree_forms/_batched_scatter.py`). Every loop stepped from the host:
    with loops in dispatches, llvm-cpu's codegen of the gradient's gradient While
    runs away (`iree_limits/remat_in_dispatch.py`), `compile_module` stops it after
    LOOPS_IN_DISPATCH_SECONDS and compiles this same module."""
    module = whilst.compile([
        whilst.export(dense_solve, Y0, RATES, name="own_loops"),
        whilst.export(lambda y, p: dense_solve(y, p, WhilstAdjoint()), Y0, RATES,
                      name="whilst_adjoint"),
        whilst.export(loss_grad(dense_solve, adjoint=WhilstAdjoint()), Y0, RATES,
                      name="grad")], loops_in_dispatch=False).load()
    for y0 in (Y0, Y0 * 0.5):
        want = jax.jit(dense_solve)(y0, RATES)
        np.testing.assert_allclose(module.own_loops(y0, RATES), want, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(module.whilst_adjoint(y0, RATES), want, rtol=2e-5,
                                   atol=2e-5)
        np.testing.assert_allclose(module.grad(y0, RATES),
                                   jax.jit(loss_grad(dense_solve))(y0, RATES), rtol=2e-4)


# --- Dopri5, and a batch of 1024 initial conditions, on IREE (forward) ------------------

BATCH_1024 = Y0 * np.linspace(0.5, 1.5, 1024, dtype=np.float32)[:, None]


def whilst_batch_solve(y0s, rates):
    """`batch_solve` through WhilstAdjoint: each example's step loop stops on its own."""
    return jax.vmap(lambda y: lv_solve(y, rates, WhilstAdjoint(), saveat=T1))(y0s)


@pytest.fixture(scope="module")
def dopri5_and_batch():
    return whilst.compile([
        whilst.export(lambda y, p: lv_solve(y, p, WhilstAdjoint(), solver=diffrax.Dopri5()),
                      Y0, RATES, name="dopri5"),
        whilst.export(whilst_batch_solve, BATCH_1024, RATES, name="batch"),
        whilst.export(lambda y, p: adaptive_event_solve(y, p, WhilstAdjoint()), Y0, RATES,
                      name="adaptive_event"),
        whilst.export(lambda y, p: fixed_step_event_solve(y, p, WhilstAdjoint()), Y0, RATES,
                      name="fixed_step_event")]).load()


@pytest.mark.iree
def test_dopri5_solve_matches_diffrax_on_jax(dopri5_and_batch):
    want = jax.jit(lambda y, p: lv_solve(y, p, solver=diffrax.Dopri5()))
    for y0 in (Y0, Y0 * 0.5):
        np.testing.assert_allclose(dopri5_and_batch.dopri5(y0, RATES), want(y0, RATES),
                                   rtol=2e-5, atol=2e-5)


@pytest.mark.iree
def test_vmapped_batch_of_1024_matches_diffrax_on_jax(dopri5_and_batch):
    np.testing.assert_allclose(dopri5_and_batch.batch(BATCH_1024, RATES),
                               jax.jit(batch_solve)(BATCH_1024, RATES), rtol=2e-5, atol=2e-5)


@pytest.mark.iree
@pytest.mark.parametrize("steps", ["adaptive", "fixed_step"])
def test_event_stops_the_solve_where_diffrax_on_jax_stops(dopri5_and_batch, steps):
    """The stop time and y of `adaptive_event_solve` and `fixed_step_event_solve`.
    (One function holding both solves failed on every call on IREE 3.13, "ref is
    null ... hal.buffer.subspan", while the step loops' results passed through one
    barrier: iree_limits/loop_results_in_one_barrier.py.) Both stop at the same step; the
    values agree to the adaptive solve's own tolerance, 1e-3: IREE runs diffrax's
    Runge-Kutta stages unrolled (`whilst/ir/_counted_loops.py`) and sums them in
    another order than XLA (1.4e-4 apart at the stop)."""
    solve = adaptive_event_solve if steps == "adaptive" else fixed_step_event_solve
    rtol = 1e-3 if steps == "adaptive" else 1e-4
    for y0 in (Y0 * 0.95, Y0 * 0.93):
        t_want, y_want = jax.jit(solve)(y0, RATES)
        assert 0.1 < float(t_want) < 10.0
        assert float(y_want[0]) >= 11.0 if steps == "adaptive" else float(y_want[0]) <= 9.0
        t_got, y_got = getattr(dopri5_and_batch, f"{steps}_event")(y0, RATES)
        np.testing.assert_allclose([t_got, *y_got], [t_want, *y_want], rtol=rtol)


VMAPPED_STAGE_LOOP = """
import os, sys
os.environ["EQX_ON_ERROR"] = "nan"
sys.path[:0] = [{here!r}, {tests!r}]
import diffrax, jax, numpy as np, whilst
from test_diffrax import RATES, Y0, lv_solve
from whilst.integrations.diffrax import WhilstAdjoint
fn = jax.vmap(lambda y: lv_solve(y, RATES, WhilstAdjoint(), saveat=diffrax.SaveAt(t1=True)))
y0s = Y0 * np.linspace(0.5, 1.5, 8, dtype=np.float32)[:, None]
got = whilst.compile(fn, y0s, cache=False, loops_in_dispatch=False).load()(y0s)
np.testing.assert_allclose(got, jax.jit(fn)(y0s), rtol=2e-5, atol=2e-5)
"""


@pytest.mark.iree
def test_vmapped_solve_of_8_with_its_stage_loop_unrolled_runs_on_iree():
    """`jax.vmap` of the Tsit5 solve through `WhilstAdjoint` over 8 initial conditions,
    every loop stepped from the host: its vmapped Runge-Kutta stage loop runs unrolled
    by 7, and its predicated steps past stage 6 write the stage buffer (equinox's
    `maybe_set` primitive) at index 7, out of bounds: dropped, where IREE 3.13 writes
    one row past the buffer and corrupts the heap (`_library_primitives.py`). In a
    process of its own, so that a corrupted heap fails only this test."""
    import pathlib
    import subprocess
    import sys

    here = pathlib.Path(__file__).parent
    script = VMAPPED_STAGE_LOOP.format(here=str(here), tests=str(here.parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.iree
@pytest.mark.parametrize("solver, max_steps", [("Euler", 4), ("Heun", 8)])
def test_default_gradient_of_a_short_solve_runs_on_every_driver(solver, max_steps):
    """diffrax's own checkpointed loops (`RecursiveCheckpointAdjoint`) of a solve that
    stops at `max_steps`: IREE 3.13's VM passed one buffer to several block arguments
    and cleared the register one of them shared, and every call failed on a null buffer
    (`_iree_vm_branches`, `iree_limits/checkpointed_gradient_null_buffer.py`). The VM
    program is the host's, so every driver ran it: local-sync, local-task, vulkan."""
    vulkan_or_skip()
    def short_solve(y0, rate):
        return diffrax.diffeqsolve(diffrax.ODETerm(lambda t, y, r: -r * y),
                                   getattr(diffrax, solver)(), 0.0, 1.0, 0.1, y0, args=rate,
                                   saveat=T1, max_steps=max_steps).ys

    gradient = loss_grad(short_solve)
    rate = np.float32(0.7)
    module = whilst.compile(gradient, Y0, rate, target=["llvm-cpu", "vulkan-spirv"])
    for driver in ("local-sync", "local-task", "vulkan"):
        np.testing.assert_allclose(module.load(driver).main(Y0, rate),
                                   jax.jit(gradient)(Y0, rate), rtol=2e-4, err_msg=driver)

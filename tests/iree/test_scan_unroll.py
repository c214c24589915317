"""`lax.scan`s inside exported loop bodies are unrolled (`whilst.ir.unrolled_scans`):
the factors follow `unroll_factor`'s measure, and on IREE the loops give the
answers of a plain numpy loop and gradients of `jax.grad` of the Python-unrolled
program, for scan lengths that the factor divides and that it does not."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from newton import tridiagonal_solve  # samples/newton.py: two scans
from whilst.ir._unroll import MAX_SCAN_UNROLL, unrolled_scans


def scan_unrolls(closed):
    """The `unroll` of every scan in `closed`, sub-jaxprs included, in order."""
    found = []

    def visit(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "scan":
                found.append(eqn.params["unroll"])
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                visit(sub)
    visit(closed.jaxpr)
    return found


def emitted_ops(stablehlo_text, name):
    """How many `name` ops the public function of a module runs per iteration of
    its loops, each call of a private function counting that function's ops
    (jax 0.10 emits the unrolled steps of a scan as calls of one function)."""
    from whilst.lowering._iree_ir import ir

    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(stablehlo_text)
        funcs = {ir.StringAttr(f.attributes["sym_name"]).value: f
                 for f in module.body.operations if f.operation.name == "func.func"}

        def count(region_holder):
            total = 0
            for region in region_holder.regions:
                for block in region.blocks:
                    for op in block.operations:
                        if op.operation.name == name:
                            total += 1
                        elif op.operation.name in ("func.call", "call"):
                            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                            total += count(funcs[callee].operation)
                        total += count(op.operation)
            return total
        (public,) = [f for n, f in funcs.items() if "sym_visibility" not in f.attributes
                     or str(f.attributes["sym_visibility"]) == '"public"']
        return count(public.operation)


def body_of_loop(fn, *args):
    (eqn,) = [e for e in whilst.trace(fn, *args).eqns if e.primitive.name == "functional_while"]
    return eqn.params["body_jaxpr"]


def test_scans_in_a_body_get_factors_by_size_and_user_factors_stay():
    W = np.ones((200, 200), np.float32)

    def fn(x):
        def body(i, x):
            small, _ = lax.scan(lambda c, r: (c * 0.5 + r, None), 0.0, x[:3])     # 3 steps
            long, _ = lax.scan(lambda c, r: (c + r, None), 0.0, jnp.tile(x, 40))  # 320
            chosen, _ = lax.scan(lambda c, r: (c - r, None), 0.0, x, unroll=2)
            matvec, _ = lax.scan(lambda c, _: (jnp.tanh(W @ c), None), jnp.ones(200), None,
                                 length=3)
            nested = jax.jit(lambda x: lax.scan(lambda c, r: (c + r, None), 0.0, x)[0])(x)
            return i + 1, x + small + long + chosen + matvec[0] + nested
        return whilst.while_loop(lambda i, x: i < 3, body, [0, x])

    body = body_of_loop(fn, np.ones(8, np.float32))
    assert scan_unrolls(body) == [1, 1, 2, 1, 1]
    once = unrolled_scans(body)
    assert scan_unrolls(once) == [3, MAX_SCAN_UNROLL, 2, 1, MAX_SCAN_UNROLL]
    assert unrolled_scans(once) is once
    plain = body_of_loop(lambda x: whilst.while_loop(lambda i, x: i < 3,
                                                     lambda i, x: (i + 1, x * 2), [0, x]),
                         np.ones(8, np.float32))
    assert unrolled_scans(plain) is plain


def relax(u, theta, steps):
    """`steps` relaxation sweeps u <- u - T^-1 (u - theta), T tridiagonal."""
    def body(k, u):
        diag = 4.0 + theta[0] * jnp.cos(u)
        return k + 1, u - 0.5 * tridiagonal_solve(-1.0, diag, u - theta[1] * jnp.sin(u))
    return whilst.while_loop(lambda k, u: k < steps, body, [0, u], maximum_iterations=6,
                             name="relax")[1]


def relax_oracle(u, theta, steps):
    """The same sweeps in plain numpy, Thomas algorithm by Python loops."""
    u = np.asarray(u, np.float64)
    for _ in range(steps):
        diag = 4.0 + theta[0] * np.cos(u)
        rhs = u - theta[1] * np.sin(u)
        c, d = np.zeros_like(u), np.zeros_like(u)
        c_prev = d_prev = 0.0
        for j in range(len(u)):
            m = diag[j] + c_prev
            c[j], d[j] = -1.0 / m, (rhs[j] + d_prev) / m
            c_prev, d_prev = c[j], d[j]
        x, x_next = np.zeros_like(u), 0.0
        for j in reversed(range(len(u))):
            x[j] = x_next = d[j] - c[j] * x_next
        u = u - 0.5 * x
    return u


def relax_loss(u, theta, steps):
    return jnp.sum(relax(u, theta, steps) ** 2)


def relax_loss_unrolled(u, theta, steps):
    """`relax_loss` with the while loop unrolled by Python (no whilst)."""
    for _ in range(steps):
        diag = 4.0 + theta[0] * jnp.cos(u)
        u = u - 0.5 * tridiagonal_solve(-1.0, diag, u - theta[1] * jnp.sin(u))
    return jnp.sum(u ** 2)


@pytest.mark.iree
def test_iree_loops_with_unrolled_scans_match_numpy_and_unrolled_gradients():
    theta = np.array([0.3, 0.7], np.float32)
    # scans of 11 steps (MAX_SCAN_UNROLL at a time and a remainder) and of 16
    for n in (11, 16):
        u = np.linspace(-1.0, 1.0, n).astype(np.float32)
        value_and_grad = jax.value_and_grad(relax_loss, argnums=(0, 1))
        exports = [whilst.export(relax, u, theta, np.int32(0), name="relax"),
                   whilst.export(value_and_grad, u, theta, np.int32(0), name="grad")]
        # the sweep divides twice per step, so twice per unrolled copy of the step
        assert emitted_ops(exports[0].text, "stablehlo.divide") >= 2 * MAX_SCAN_UNROLL
        module = whilst.compile(exports).load()
        for steps in (0, 1, 4):
            np.testing.assert_allclose(module.relax(u, theta, np.int32(steps)),
                                       relax_oracle(u, theta, steps), rtol=1e-5, atol=1e-5)
            value, (gu, gtheta) = module.grad(u, theta, np.int32(steps))
            want = jax.value_and_grad(relax_loss_unrolled, argnums=(0, 1))(u, theta, steps)
            np.testing.assert_allclose(value, want[0], rtol=1e-5)
            np.testing.assert_allclose(gu, want[1][0], rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(gtheta, want[1][1], rtol=1e-4, atol=1e-5)


@pytest.mark.iree
def test_counted_loop_with_a_scan_in_its_body_takes_every_step():
    # iree_limits/counted_loop_with_inner_loop.py: one step per iteration (what jax
    # 0.10.2 chose for the test above), rows pushed, a scan in the body
    from iree_limits.counted_loop_with_inner_loop import THETA, U, losses, python_loss
    np.testing.assert_allclose(losses(counted=False),
                               [python_loss(U, THETA, n) for n in (1, 4)], rtol=1e-5)

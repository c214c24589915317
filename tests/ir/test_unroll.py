"""Unrolling k loop steps per emitted stablehlo.while iteration changes nothing but
speed: counters, outputs and gradients equal those of k = 1 for every trip count."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from whilst.lowering import unroll_factors
from whilst.ir import unroll_factor

UNROLLS = [1, 2, 3, 5, 8]


def loop(k, bound=16):
    def f(x, limit):
        return whilst.while_loop(
            lambda i, x, s: s < limit,
            lambda i, x, s: (i + 1, jnp.sin(x) * 1.3 + 0.2, s + jnp.sum(x * x)),
            [0, x, 0.0], maximum_iterations=bound, unroll=k)
    return f


def loss(k):
    return lambda x, limit: jnp.sum(loop(k)(x, limit)[1])


# Limits that make the loop stop after 0, 1, ..., 16 steps (16: cut by the bound).
LIMITS = [-1.0, 0.5, 2.0, 5.0, 9.0, 14.0, 20.0, 40.0, 1e9]


@pytest.mark.parametrize("k", UNROLLS[1:])
def test_forward_matches_k1_for_every_trip_count(k):
    x = np.array([0.3, -0.2, 0.9], np.float32)
    f1, fk = jax.jit(loop(1)), jax.jit(loop(k))
    trips = set()
    for limit in LIMITS:
        want, got = f1(x, limit), fk(x, limit)
        trips.add(int(want[0]))
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w)
    assert {0, 1, 16} <= trips and len(trips) >= 6


@pytest.mark.parametrize("k", UNROLLS[1:])
def test_gradients_match_k1_for_every_trip_count(k):
    x = np.array([0.3, -0.2, 0.9], np.float32)
    g1, gk = jax.jit(jax.grad(loss(1))), jax.jit(jax.grad(loss(k)))
    for limit in LIMITS:
        np.testing.assert_allclose(gk(x, limit), g1(x, limit), rtol=1e-6, atol=1e-7)


def test_vmap_with_unrolling_keeps_per_example_trip_counts():
    xs = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    limits = np.array([-1.0, 2.0, 9.0, 1e9], np.float32)
    want = jax.vmap(loop(1))(xs, limits)
    got = jax.vmap(loop(4))(xs, limits)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


@pytest.mark.iree
def test_iree_unrolled_forward_and_gradient_match_k1():
    x = np.array([0.3, -0.2, 0.9], np.float32)
    module = whilst.compile(
        [whilst.export(loop(3), x, np.float32(0), name="fwd"),
         whilst.export(jax.grad(loss(3)), x, np.float32(0), name="grad")]).load()
    assert "whilst.unroll = 3" in whilst.export(loop(3), x, np.float32(0)).text
    for limit in LIMITS:
        limit = np.float32(limit)
        for w, g in zip(loop(1)(x, limit), module.fwd(x, limit)):
            np.testing.assert_allclose(g, w, rtol=1e-6)
        np.testing.assert_allclose(module.grad(x, limit), jax.grad(loss(1))(x, limit),
                                   rtol=1e-5, atol=1e-7)


def test_emitted_loop_records_its_unroll_factor():
    text = whilst.export(loop(5), np.ones(3, np.float32), np.float32(1)).text
    assert "whilst.unroll = 5" in text


def test_automatic_unroll_prefers_tiny_bodies():
    def k_of(body, x):
        jaxpr = whilst.trace(lambda x: whilst.while_loop(lambda i, x: i < 10, body, [0, x]), x)
        (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "functional_while"]
        return unroll_factor(eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"], None)

    tiny = k_of(lambda i, x: (i + 1, jnp.sin(x)), np.ones(8, np.float32))
    W = np.ones((256, 256), np.float32)
    matvec = k_of(lambda i, x: (i + 1, jnp.tanh(W @ x)), np.ones(256, np.float32))
    big_carry = k_of(lambda i, x: (i + 1, x * 2.0), np.ones((200, 200), np.float32))
    small_table = k_of(lambda i, x: (i + 1, x.at[i % 8].set(1.0)), np.ones(8, np.float32))
    large_table = k_of(lambda i, x: (i + 1, x.at[i % 8].set(1.0)),
                       np.ones(5000, np.float32))
    nested_scan = k_of(lambda i, x: (i + 1, jax.lax.fori_loop(0, 3, lambda j, y: y * 0.5, x)),
                       np.ones(8, np.float32))
    long_body = k_of(lambda i, x: (i + 1, functools.reduce(lambda y, _: jnp.sin(y) * 0.9,
                                                           range(300), x)),
                     np.ones(2, np.float32))
    branching = k_of(lambda i, x: (i + 1, jax.lax.cond(i < 3, jnp.sin, jnp.cos, x)),
                     np.ones(8, np.float32))
    assert tiny > 8 and matvec == 1 and big_carry == 1 and nested_scan == 1
    assert small_table > 1 and large_table == 1  # small tables: one-hot selects
    assert long_body == 1  # k copies of 600 equations would slow iree-compile
    assert branching == 1  # each copy a host branch: 32 failed iree-compile


def test_random_bits_weigh_what_they_lower_to():
    """One `random_split` and one `random_bits` equation lower to about 200 ops of
    threefry rounds: a key-carrying body unrolls as a body of that many equations
    (before, 17 steps: 70 s of iree-compile for the forward alone)."""
    def k_of(body):
        x = np.ones(3, np.float32)
        jaxpr = whilst.trace(lambda k, x: whilst.while_loop(lambda k, x: jnp.sum(x) < 9.0,
                                                             body, [k, x]),
                             jax.random.key(0), x)
        (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "functional_while"]
        return unroll_factor(eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"], None)

    def noisy(k, x):
        k, sub = jax.random.split(k)
        return k, x * (1.0 + jax.random.uniform(sub, x.shape))

    assert k_of(noisy) <= 2
    assert k_of(lambda k, x: (k, x * 1.5)) > 8


def test_unroll_must_be_a_positive_int():
    with pytest.raises(ValueError, match="unroll must be None"):
        whilst.while_loop(lambda i: i < 2, lambda i: i + 1, [0], unroll=0)


# Reverse mode with unrolling: the forward While pushes the residual rows of k steps
# as one chunk and the gradient While pops one chunk per emitted iteration.

def sin_steps(k, bound, clock="counter"):
    """n steps of a small vector map, bounded by `bound`. The loop tests a counter
    (`i < n`: the lowering bounds the loop by its trip count, and counts it) or
    a float clock (`t < n`: the test is read back, and the steps run on past the
    end and are undone)."""
    def f(x, w, n):
        t0, dt = (0, 1) if clock == "counter" else (jnp.float32(0), jnp.float32(1))
        return whilst.while_loop(lambda t, x: t < n,
                                 lambda t, x: (t + dt, jnp.sin(x) * w + 0.1 * x[::-1]),
                                 [t0, x], maximum_iterations=bound, unroll=k)
    return f


def sin_steps_loss(k, bound, clock="counter"):
    return lambda x, w, n: jnp.sum(sin_steps(k, bound, clock)(x, w, n)[1] ** 2)


def sin_steps_oracle(x, w, n):
    """jax.grad of the same steps unrolled by Python (no whilst)."""
    def loss(x, w):
        for _ in range(n):
            x = jnp.sin(x) * w + 0.1 * x[::-1]
        return jnp.sum(x ** 2)
    return jax.grad(loss, argnums=(0, 1))(x, w)


# bound = 2k: the loop's last emitted iteration fills the stacks to their last row, and
# the forward's steps after its last full iteration start past the stacks' end.
@pytest.mark.iree
@pytest.mark.parametrize("clock", ["counter", "float"])
@pytest.mark.parametrize("k, bound", [(2, 5), (3, 7), (2, 4)])
def test_iree_chunked_stacks_match_k1_for_trip_counts_0_to_2k_plus_1(k, bound, clock):
    x, w = np.array([0.3, -0.2, 0.9, 0.5], np.float32), np.float32(0.8)
    grad = lambda k: jax.grad(sin_steps_loss(k, bound, clock), argnums=(0, 1))  # noqa: E731
    specs = (x, w, np.int32(0))
    grad_k = whilst.export(grad(k), *specs, name="grad_k")
    roles = {role: f"whilst.role = \"{role}\", whilst.unroll = {k}" for role in
             ("forward", "gradient")}
    assert all(r in grad_k.text for r in roles.values()), "both loops unroll k steps"
    module = whilst.compile(
        [whilst.export(sin_steps(1, bound, clock), *specs, name="fwd_1"),
         whilst.export(sin_steps(k, bound, clock), *specs, name="fwd_k"),
         whilst.export(grad(1), *specs, name="grad_1"), grad_k]).load()
    for n in range(0, 2 * k + 2):
        n = np.int32(n)
        (i1, y1), (ik, yk) = module.fwd_1(x, w, n), module.fwd_k(x, w, n)
        assert int(ik) == int(i1) == min(n, bound)
        # (run inside one dispatch, LLVM may contract the unrolled steps' multiply-adds
        # otherwise than the single step's: 1 ulp apart)
        np.testing.assert_array_max_ulp(yk, y1, maxulp=2)
        want = sin_steps_oracle(x, w, min(int(n), bound))
        for g1, gk, o in zip(module.grad_1(x, w, n), module.grad_k(x, w, n), want):
            np.testing.assert_allclose(gk, g1, rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(gk, o, rtol=1e-5, atol=1e-6)


@pytest.mark.iree
def test_iree_vmap_of_unrolled_gradient_keeps_per_example_trip_counts():
    """Batched pushes (one chunk for all lanes) and per-lane pops."""
    xs = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    ns = np.array([0, 1, 4, 7], np.int32)
    w = np.float32(0.7)
    grad = jax.vmap(jax.grad(sin_steps_loss(3, 7), argnums=(0, 1)), in_axes=(0, None, 0))
    module = whilst.compile(grad, xs, w, ns).load()
    gx, gw = module.main(xs, w, ns)
    for lane, n in enumerate(ns):
        want_x, want_w = sin_steps_oracle(xs[lane], w, int(n))
        np.testing.assert_allclose(gx[lane], want_x, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gw[lane], want_w, rtol=1e-5, atol=1e-6)


@pytest.mark.iree
@pytest.mark.parametrize("clock, loads", [("counter", (0, 0)), ("float", (1, 0))])
def test_iree_unrolled_gradient_reads_back_per_emitted_iteration_not_per_step(clock, loads):
    """The push/pop gradient of a tiny body reads back at most one scalar per
    emitted iteration of k steps, never one per step:
    - the forward While of a loop tested `t < n` on a float clock reads back its
      test; its pushed rows are scattered at the counter, which stays on the
      device (a `dynamic_update_slice` read the chunk's row index back too);
    - that of a loop tested `i < n` on a counter stepped by 1 reads back nothing:
      it is bounded by its trip count and tested `i < bound`, a counter IREE keeps
      on the host (it read back the test and the row index);
    - the gradient While reads back nothing: it is tested `i < bound` too, and its
      pop position follows from the counter and the bound (it read back two while
      its test was `i < bound and True` and its pop position an operand of its
      own)."""
    from helpers import host_driven_stream
    from whilst.lowering import loop_counts, prepare

    x = np.ones(64, np.float32)
    grad = jax.grad(lambda x, n: jnp.sum(sin_steps(None, 1000, clock)(x, 0.9, n)[1]))
    exported = whilst.export(grad, x, np.int32(5))
    ks = unroll_factors(exported.text)
    assert len(ks) == 2 and min(ks) >= 16, ks
    loops = loop_counts(host_driven_stream(prepare([exported])))
    assert len(loops) == 2, loops
    for (_, dispatches), k in zip(loops, ks):
        assert dispatches <= 3 * k, loops  # the steps' dispatches, no per-step copies
    assert tuple(n for n, _ in loops) == loads, loops


@pytest.mark.iree
@pytest.mark.parametrize("step, loads", [(1, 0), (3, 1)])
def test_iree_unrolled_steps_fuse_into_few_dispatches(step, loads):
    """The k steps of an emitted iteration run unpredicated, so IREE fuses them:
    the sin loop (k = 64) takes at most 2 dispatches per emitted iteration (1-2
    measured), with no readback when its counter steps by 1 (the loop runs
    `trips // k` full iterations and then its last steps), one (the loop test)
    when it steps by 3. With every step predicated on its own test it took 23,
    and with the test vectorized over the k counters the steps computed, instead
    of over `i + 1 + 3 * arange(k - 1)`, 10."""
    from helpers import host_driven_stream
    from whilst.lowering import loop_counts, prepare

    def f(x, n):
        return whilst.while_loop(lambda i, x: i < n,
                                 lambda i, x: (i + step, jnp.sin(x) * 0.9 + 0.1),
                                 [jnp.int32(0), x])[1]

    exported = whilst.export(f, np.ones(64, np.float32), np.int32(5))
    assert unroll_factors(exported.text) == [64]
    (n_loads, dispatches), = loop_counts(host_driven_stream(prepare([exported])))
    assert n_loads == loads and dispatches <= 2, (n_loads, dispatches)


INT32_MAX = 2 ** 31 - 1


# Counters the vectorized loop test reads as `start + stride * arange`: (name, cond,
# step of the counter, its stride, (first counter, trips) for a trip count n, dtype).
COUNTERS = [
    ("by_three", lambda i, n: i < n, lambda i: i + 3, 3, lambda n: (0, -(-n // 3)), np.int32),
    ("literal_first", lambda i, n: i < n, lambda i: 1 + i, 1, lambda n: (0, n), np.int32),
    ("down", lambda i, n: i > 0, lambda i: i - 1, -1, lambda n: (n, n), np.int32),
    ("wrapping", lambda i, n: i > 0, lambda i: i + 1, 1,
     lambda n: (INT32_MAX - n + 1, n) if n else (-1, 0), np.int32),
    ("uint8_down", lambda i, n: i > 0, lambda i: i - np.uint8(1), -1,
     lambda n: (n % 256, n % 256), np.uint8),
]


@pytest.mark.iree
@pytest.mark.parametrize("shape", [(), (3,)])
def test_iree_counter_strides_run_every_trip_count(shape):
    """Loops whose test reads a counter stepped by a literal (`i + 3`, `1 + i`,
    `i - 1`, int32 wrapping past its maximum as in JAX, uint8) at their automatic
    unroll (64) on IREE, for 0 .. 2k + 1 trips, against Python integers. Those
    stepped by 1 towards their limit are counted (`_trip_count.py`), the others
    run on past their end; with a vector carry both run unpredicated and pick
    the last steps' carry, with a scalar one (a pick among 65 scalars) they run
    their last steps predicated."""
    exports = []
    for name, cond, step, _, _, dtype in COUNTERS:
        def f(i0, n, x, cond=cond, step=step):
            return whilst.while_loop(lambda i, c, x: cond(i, n),
                                     lambda i, c, x: (step(i), c + 1, x + 1.5),
                                     [i0, jnp.int32(0), x])
        exports.append(whilst.export(f, dtype(0), dtype(0), np.zeros(shape, np.float32),
                                     name=name))
    assert [unroll_factors(e.text) for e in exports] == [[64]] * len(COUNTERS)
    module = whilst.compile(exports).load()
    x0 = np.full(shape, 0.25, np.float32)
    for name, _, _, stride, start, dtype in COUNTERS:
        bits = np.iinfo(dtype).bits
        for n in range(0, 2 * 64 + 2):
            i0, trips = start(n)
            i, count, x = getattr(module, name)(dtype(i0), dtype(n), x0)
            want_i = np.array((i0 + stride * trips) % 2 ** bits, np.uint64).astype(dtype)
            assert (int(count), i) == (trips, want_i), (name, n, count, i)
            np.testing.assert_array_equal(x, np.float32(0.25 + 1.5 * trips), err_msg=name)


@pytest.mark.iree
def test_iree_scalar_loop_at_default_unroll_runs_every_trip_count():
    """`while i < n: i += 1; x += 1.5` at its automatic unroll (64): the steps after
    the last full iteration (up to 63 predicated scalar steps) once formed an IREE
    dispatch of more than 32 bindings, which failed on every call."""
    def f(x, n):
        return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x + 1.5),
                                 [0, x])

    exported = whilst.export(f, np.float32(0), np.int32(0))
    assert unroll_factors(exported.text) == [64]
    module = whilst.compile([exported]).load()
    for n in [*range(0, 130), 1000]:
        i, x = module.main(np.float32(0.25), np.int32(n))
        total = np.float32(0.25)
        for _ in range(n):
            total = np.float32(total + np.float32(1.5))
        assert int(i) == n and x == total, (n, i, x)

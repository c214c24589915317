"""IREE conformance corpus: the loop programs of the forward, gradient, vmap, nested,
checkpoint and unroll tests, compiled by IREE (llvm-cpu) and run by the embedded
runtime on local-sync and local-task, against plain-Python / numpy loops or
`jax.grad` of the unrolled loop (tests/iree/test_drivers.py runs them on vulkan).

Programs are grouped into a few modules (one iree-compile each); small sizes keep
the file fast. Every program runs; one that IREE 3.13 cannot compile must be
refused by `whilst.compile` (`test_refused`).
"""
import collections
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from helpers import (
    REPO, nested_sin_loop, nested_sin_oracle, per_example_sin_oracle, tanh_loss_oracle,
    tanh_step, unrolled)

pytestmark = [pytest.mark.iree, pytest.mark.slow]


Pair = collections.namedtuple("Pair", "j, k")
P = collections.namedtuple("P", "a, b")
f32 = np.float32


@dataclasses.dataclass
class Case:
    name: str
    fn: callable
    args: tuple
    want: callable  # the oracle: same args -> expected outputs (no whilst)
    rtol: float = 1e-4
    more_args: tuple = ()  # further argument tuples the compiled program runs with


def wl(cond, body, loop_vars, **kw):
    return whilst.while_loop(cond, body, loop_vars, **kw)


# ---------------------------------------------------------------- forward programs

def counter(n):
    return wl(lambda i: i < n, lambda i: (i + 1,), [0])


def namedtuple_carry(x):
    return wl(lambda i, p: i < 10, lambda i, p: (i + 1, Pair(p.j + p.k, p.j - p.k)),
              (0, Pair(x, 2)))


def namedtuple_carry_ref(x):
    i, (j, k) = unrolled(lambda i, p: i < 10, lambda i, p: (i + 1, (p[0] + p[1], p[0] - p[1])),
                         [0, (int(x), 2)])
    return [i, Pair(j, k)]


def cut_by_maximum_iterations(x):
    return wl(lambda i, x: True, lambda i, x: (i + 1, x * 2.0), [0, x], maximum_iterations=7)


def traced_maximum_iterations(n):
    return wl(lambda i: i < 50, lambda i: i + 1, [0], maximum_iterations=n)


def zero_trip(x):
    return wl(lambda i, x: i < 0, lambda i, x: (i + 1, x + 1), [0, x])


def dict_carry(x):
    return wl(lambda s: s["n"] < 4, lambda s: {"x": s["x"] * 3.0, "n": s["n"] + 1},
              [{"x": x, "n": 0}], return_same_structure=True)


def collatz(n):
    return wl(lambda n, s: n != 1,
              lambda n, s: (jnp.where(n % 2 == 0, n // 2, 3 * n + 1), s + 1), [n, 0])


def collatz_ref(n):
    n, steps = int(n), 0
    while n != 1:
        n, steps = (n // 2 if n % 2 == 0 else 3 * n + 1), steps + 1
    return [1, steps]


def grow(x, limit):
    return wl(lambda i, x: x < limit, lambda i, x: (i + 1, x * 1.5), [0, x])


W2 = np.array([[0.5, 0.1], [0.2, 0.3]], f32)


def tanh_steps(x, n):
    return wl(lambda i, x: True, lambda i, x: (i + 1, jnp.tanh(W2 @ x)), [0, x],
              maximum_iterations=n)[1]


def nested_forward(x):
    def outer(i, x):
        return i + 1, wl(lambda j, y: j < i, lambda j, y: (j + 1, y + 1.0), [0, x])[1]
    return wl(lambda i, x: i < 4, outer, [0, x])[1]


def heron(a):
    return wl(lambda x: jnp.abs(x * x - a) > 1e-5 * a, lambda x: 0.5 * (x + a / x), [a])


def fixed_point(W, x):
    """The README's loop, forward: x <- tanh(W x) until it stops moving."""
    def body(i, x, dx):
        y = jnp.tanh(W @ x)
        return i + 1, y, jnp.max(jnp.abs(y - x))
    i, x, _ = wl(lambda i, x, dx: dx > 1e-4, body, [0, x, jnp.inf], maximum_iterations=100)
    return i, jnp.sum(x ** 2)


def fixed_point_ref(W, x):
    i, x, _ = unrolled(lambda i, x, dx: dx > 1e-4,
                       lambda i, x, dx: (i + 1, np.tanh(W @ x), np.abs(np.tanh(W @ x) - x).max()),
                       [0, x, np.inf], 100)
    return [i, np.sum(x ** 2)]


def newton_sqrt(a):
    """Newton's square root, the step size carried and tested."""
    def body(i, y, dx):
        x = 0.5 * (y + a / y)
        return i + 1, x, jnp.abs(x - y)
    return wl(lambda i, y, dx: dx > 1e-6, body, [0, a, jnp.float32(jnp.inf)])


def sin_steps(x):
    return wl(lambda i, x: i < 5, lambda i, x: (i + 1, jnp.sin(x) * x), [0, x])[1]


def sin_steps_ref(x):
    for _ in range(5):
        x = jnp.sin(x) * x
    return x


def power_w(w):
    return wl(lambda i, x: i < 3, lambda i, x: (i + 1, x * w), [0, 1.0])[1]


def identity_loop(x):
    return wl(lambda i, x: i < 2, lambda i, x: (i + 1, x), [0, x])


def two_zero_buffers(x):
    """Two carries that start from one value (jnp.zeros of one shape)."""
    def body(i, a, b):
        return i + 1, a.at[i].set(x * i), b.at[i].set(x + i)
    return wl(lambda i, a, b: i < 5, body, [0, jnp.zeros(5), jnp.zeros(5)])


def scan_with_equal_inits(x):
    """A lax.scan whose two carries start equal."""
    def step(c, xi):
        a, b = c
        return (a + xi, b * 0.5 + xi), a - b
    (a, b), ys = jax.lax.scan(step, (jnp.zeros(3), jnp.zeros(3)), x)
    return a, b, ys


def scan_with_equal_inits_ref(x):
    a, b, ys = np.zeros(3, f32), np.zeros(3, f32), []
    for xi in x:
        a, b, y = a + xi, b * f32(0.5) + xi, a - b
        ys.append(y)
    return [a, b, np.stack(ys)]


def np_loop(step, n):
    def ref(x):
        for _ in range(n):
            x = step(x)
        return x
    return ref


A4 = (np.eye(4, dtype=f32) * 0.5 + 0.05).astype(f32)
FORWARD = [
    Case("counter_to_ten", counter, (np.int32(10),), lambda n: 10),
    Case("nested_namedtuple", namedtuple_carry, (np.int32(1),), namedtuple_carry_ref),
    Case("maximum_iterations_cuts", cut_by_maximum_iterations, (f32(1.0),),
         lambda x: [7, x * 2.0 ** 7]),
    Case("maximum_iterations_traced", traced_maximum_iterations, (np.int32(5),),
         lambda n: min(int(n), 50)),
    Case("zero_trip", zero_trip, (np.arange(3, dtype=f32),), lambda x: [0, x]),
    Case("dict_carry", dict_carry, (f32(1.0),), lambda x: [{"n": 4, "x": x * 81}]),
    Case("collatz", collatz, (np.int32(27),), collatz_ref),
    Case("vmap_collatz", jax.vmap(collatz), (np.array([1, 6, 27, 97, 7], np.int32),),
         lambda ns: [np.ones(5, np.int32), np.array([collatz_ref(n)[1] for n in ns])]),
    Case("vmap_finished_examples_keep_values", jax.vmap(grow),
         (np.array([1.0, 2.0, 10.0], f32), np.array([5.0, 3.0, 1.0], f32)),
         lambda xs, ls: list(map(np.array, zip(*[unrolled(lambda i, x: x < l,
                                                          lambda i, x: (i + 1, x * f32(1.5)),
                                                          [0, x]) for x, l in zip(xs, ls)])))),
    Case("vmap_batched_maximum_iterations", jax.vmap(tanh_steps),
         (np.ones((3, 2), f32), np.array([0, 2, 5], np.int32)),
         lambda xs, ns: np.stack([np_loop(lambda x: np.tanh(W2 @ x), n)(x)
                                  for x, n in zip(xs, ns)])),
    Case("nested_forward", nested_forward, (f32(0.0),), lambda x: x + 0 + 1 + 2 + 3),
    Case("heron", heron, (f32(2.0),), lambda a: np.sqrt(a), rtol=1e-5),
    Case("readme_fixed_point_forward", fixed_point, (A4, np.ones(4, f32)), fixed_point_ref),
    Case("newton_sqrt", newton_sqrt, (f32(2.0),), lambda a: [5, np.sqrt(a), 0.0]),
    Case("jvp", lambda x, t: jax.jvp(sin_steps, (x,), (t,)), (f32(0.7), f32(1.0)),
         lambda x, t: jax.jvp(sin_steps_ref, (x,), (t,))),
    Case("jvp_closed_over", lambda w: jax.jvp(power_w, (w,), (1.0,)), (f32(2.0),),
         lambda w: [w ** 3, 3 * w ** 2]),
    Case("dtype_f32", identity_loop, (np.ones(3, f32),), lambda x: [2, x]),
    Case("dtype_i32", identity_loop, (np.ones(3, np.int32),), lambda x: [2, x]),
    Case("dtype_bool", identity_loop, (np.ones(3, np.bool_),), lambda x: [2, x]),
    Case("two_zeros_carries", two_zero_buffers, (f32(2.0),),
         lambda x: [5, x * np.arange(5), x + np.arange(5)]),
    Case("scan_with_equal_inits", scan_with_equal_inits,
         (np.linspace(-1, 1, 12, dtype=f32).reshape(4, 3),), scan_with_equal_inits_ref),
]

# ---------------------------------------------------------------- reverse mode


def grad_pair(cond, body, max_iter, out):
    """(whilst loss, unrolled loss) of `out(loop(cond, body, vars))`."""
    def w(*vs):
        return out(wl(cond, body, list(vs), maximum_iterations=max_iter,
                      return_same_structure=True))

    def u(*vs):
        return out(unrolled(cond, body, list(vs), max_iter))
    return w, u


def rfc(x):
    return wl(lambda x: x < 8.0, lambda x: x * x, [x], maximum_iterations=10)


def two_vars():
    return grad_pair(lambda i, x, y: i < 4,
                     lambda i, x, y: (i + 1, jnp.sin(x) * y, x * 0.5 + y * y * 0.1), 8,
                     lambda o: o[1] + 2 * o[2])


def struct_carry():
    def body(i, s):
        p = s["p"]
        return i + 1, {"p": P(p.a * 1.7 + p.b, jnp.cos(p.b) * p.a), "k": s["k"] + 1}
    w, u = grad_pair(lambda i, s: s["p"].a < 20.0, body, 16, lambda o: o[1]["p"].b)
    return (lambda a, b: w(0, {"p": P(a, b), "k": 0}),
            lambda a, b: u(0, {"p": P(a, b), "k": 0}))


rng = np.random.RandomState(0)
W5 = (rng.randn(5, 5) * 0.4).astype(f32)
B5 = (rng.randn(5) * 0.1).astype(f32)
X5 = rng.randn(5).astype(f32)


def closed_over(loop):
    def loss(W, b):
        out = loop(lambda i, x: jnp.sum(x * x) < 40.0 - i,
                   lambda i, x: (i + 1, jnp.tanh(W @ x + b) * 3.0), [0, X5])
        return jnp.sum(out[1] ** 2)
    return loss


def cut_gradient(n):
    return grad_pair(lambda i, x: True, lambda i, x: (i + 1, x * 1.1 + jnp.sin(x)), n,
                     lambda o: o[1])


def int_counter(x):
    i, y = wl(lambda i, x: i < 3, lambda i, x: (i + 1, x * x), [0, x], maximum_iterations=5)
    return y + i.astype(jnp.float32)


def zero_trip_grad(x):
    return wl(lambda x: x > 100.0, lambda x: x * x, [x], maximum_iterations=5)


def stop_gradient_loop(x):
    return wl(lambda i, x: i < 3, lambda i, x: (i + 1, jax.lax.stop_gradient(x) * x), [0, x],
              maximum_iterations=3)[1]


def back_prop_false(x):
    return wl(lambda i, x: i < 3, lambda i, x: (i + 1, x * x), [0, x], back_prop=False)[1] + x


def sin2(x):
    return wl(lambda i, x: i < 4, lambda i, x: (i + 1, jnp.sin(x) * 2.0), [0, x],
              maximum_iterations=6)[1]


def sin2_ref(x):
    for _ in range(4):
        x = jnp.sin(x) * 2.0
    return x


def second(x):
    return wl(lambda i, x: i < 3, lambda i, x: (i + 1, jnp.sin(x) * x + x), [0, x],
              maximum_iterations=4)[1]


def second_ref(x):
    for _ in range(3):
        x = jnp.sin(x) * x + x
    return x


def nested_grad_ref(x):
    return nested_sin_oracle(x, 3)


def inner_grad_loop(loop, d_inner):
    return lambda x: loop(lambda i, z: i < 2, lambda i, z: (i + 1, z - 0.1 * d_inner(z)),
                          [0, x])[1]


def inner(x):
    return wl(lambda i, y: i < 3, lambda i, y: (i + 1, jnp.sin(y) * y), [0, x],
              maximum_iterations=3)[1]


def inner_ref(x):
    for _ in range(3):
        x = jnp.sin(x) * x
    return x


def per_example(x, n):
    return wl(lambda i, x: i < n, lambda i, x: (i + 1, jnp.sin(x) * 1.5 + 0.1), [0, x],
              maximum_iterations=8)[1]


def per_example_ref_grads(xs, ns):
    return np.array([jax.grad(per_example_sin_oracle)(x, int(n)) for x, n in zip(xs, ns)])


def cos_steps(loop):
    """sum(u ** 2) after n steps of u <- u cos(u) + theta[0] (theta closed over)."""
    def loss(u, theta, n):
        return jnp.sum(loop(lambda i, u: i < n, lambda i, u: (i + 1, u * jnp.cos(u) + theta[0]),
                            [0, u])[1] ** 2)
    return loss


def grow_to_ten(x):
    return wl(lambda x: x < 10.0, lambda x: x * 1.7 + 0.2, [x], maximum_iterations=50)


def grow_to_ten_ref(x):
    while x < 10.0:
        x = x * 1.7 + 0.2
    return x


XS4 = np.array([0.1, 0.7, -0.4, 1.2], f32)
NS4 = np.array([0, 1, 3, 8], np.int32)
X3 = np.array([0.1, 0.5, -0.3], f32)
GRAD = [
    Case("grad_rfc", jax.grad(rfc), (f32(2.0),), lambda x: 32.0),
    Case("grad_two_vars", jax.grad(two_vars()[0], argnums=(1, 2)), (0, f32(0.3), f32(0.9)),
         jax.grad(two_vars()[1], argnums=(1, 2))),
    Case("grad_struct_carry", jax.grad(struct_carry()[0], argnums=(0, 1)), (f32(1.1), f32(0.4)),
         jax.grad(struct_carry()[1], argnums=(0, 1))),
    Case("grad_closed_over", jax.grad(closed_over(
        lambda c, b, v: wl(c, b, v, maximum_iterations=30)), argnums=(0, 1)), (W5, B5),
         jax.grad(closed_over(lambda c, b, v: unrolled(c, b, v, 30)), argnums=(0, 1))),
    *[Case(f"grad_cut_at_{n}", jax.grad(lambda x, n=n: cut_gradient(n)[0](0, x)), (f32(0.5),),
           jax.grad(lambda x, n=n: cut_gradient(n)[1](0, x))) for n in (0, 1, 3, 7)],
    Case("grad_int_counter", jax.grad(int_counter), (f32(1.5),), lambda x: 8 * x ** 7),
    Case("grad_zero_trip", jax.grad(zero_trip_grad), (f32(2.0),), lambda x: 1.0),
    Case("jacrev_zero_trip", jax.jacrev(lambda x: wl(lambda i, x: i < 0,
                                                     lambda i, x: (i + 1, x * 2), [0, x],
                                                     maximum_iterations=3)[1]),
         (np.ones(3, f32),), lambda x: np.eye(3)),
    Case("grad_back_prop_false", jax.grad(back_prop_false), (f32(2.0),), lambda x: 1.0),
    Case("grad_stop_gradient", jax.grad(stop_gradient_loop), (f32(2.0),), lambda x: x ** 7),
    Case("jacrev", jax.jacrev(sin2), (X3,), jax.jacrev(sin2_ref)),
    Case("vjp", lambda x, ct: jax.vjp(sin2, x)[1](ct), (X3, np.ones(3, f32)),
         lambda x, ct: jax.vjp(sin2_ref, x)[1](ct)),
    Case("value_and_grad", jax.value_and_grad(lambda x: sin2(x).sum()), (X3,),
         jax.value_and_grad(lambda x: sin2_ref(x).sum())),
    # the loss is computed before the gradient While (result_packed_with_loop_init.mlir)
    Case("value_and_grad_two_argnums", jax.value_and_grad(
        cos_steps(lambda c, b, v: wl(c, b, v, maximum_iterations=6)), argnums=(0, 1)),
         (X3, np.array([0.3, 0.7], f32), np.int32(2)),
         jax.value_and_grad(cos_steps(lambda c, b, v: unrolled(c, b, v, 6)), argnums=(0, 1))),
    Case("grad_of_grad", jax.grad(jax.grad(second)), (f32(0.8),), jax.grad(jax.grad(second_ref))),
    Case("jacfwd_of_grad", jax.jacfwd(jax.grad(second)), (f32(0.8),),
         jax.grad(jax.grad(second_ref))),
    Case("grad_nested", jax.grad(nested_sin_loop), (f32(0.6),), jax.grad(nested_grad_ref)),
    Case("grad_of_grad_nested", jax.grad(jax.grad(nested_sin_loop)), (f32(0.6),),
         jax.grad(jax.grad(nested_grad_ref))),
    Case("grad_body_takes_grad", jax.grad(inner_grad_loop(
        lambda c, b, v: wl(c, b, v, maximum_iterations=2), jax.grad(inner))), (f32(1.2),),
         jax.grad(inner_grad_loop(lambda c, b, v: unrolled(c, b, v, 2), jax.grad(inner_ref)))),
    Case("vmap_of_grad", jax.vmap(jax.grad(per_example)), (XS4, NS4), per_example_ref_grads),
    Case("grad_of_vmap", jax.grad(lambda xs, ns: jax.vmap(per_example)(xs, ns).sum()),
         (XS4, NS4), per_example_ref_grads),
    Case("vmap_grad_data_dependent_stop", jax.vmap(jax.grad(grow_to_ten)),
         (np.array([0.5, 3.0, 9.0, 11.0], f32),),
         lambda xs: np.array([jax.grad(grow_to_ten_ref)(x) for x in xs])),
]

# ---------------------------------------------------------------- checkpoints, unroll

WC = np.array([0.9, -0.7, 1.1], f32)
XC = np.array([0.3, -0.2, 0.5], f32)


def ck_loss(x, n, K=3):
    out = wl(lambda i, x: i < n, lambda i, x: (i + 1, tanh_step(WC, i, x)), [0, x], checkpoints=K)
    return jnp.sum(out[1] ** 2)


def ck_loss_ref(x, n):
    return tanh_loss_oracle(x, WC, n)


def budget_loss(x, n, **options):
    out = wl(lambda i, x: i < n, lambda i, x: (i + 1, tanh_step(WC, i, x)), [0, x], **options)
    return jnp.sum(out[1] ** 2)


def ck_stop(x):
    return wl(lambda x: x < 10.0, lambda x: x * 1.7 + 0.2, [x], checkpoints=2)


def ck_sin(x):
    return wl(lambda i, x: i < 3, lambda i, x: (i + 1, jnp.sin(x) * x + x), [0, x],
              checkpoints=2)[1]


def ck_nested(x, a):
    def outer(i, x):
        y = wl(lambda j, y: j < i + 1, lambda j, y: (j + 1, jnp.sin(y) * a + x), [0, x],
               checkpoints=2)[1]
        return i + 1, y * 0.9
    return wl(lambda i, x: i < 4, outer, [0, x], checkpoints=2)[1]


def ck_nested_ref(x, a):
    return nested_sin_oracle(x, 4, a)


def ck_per_example(x, n):
    return wl(lambda i, x: i < n, lambda i, x: (i + 1, jnp.sin(x) * 1.5 + 0.1), [0, x],
              checkpoints=2)[1]


def converge(x):
    return wl(lambda i, x: jnp.abs(x).sum() < 12.0,
              lambda i, x: (i + 1, x * 1.2 + jnp.sin(x)), [0, x], checkpoints=3)[1].sum()


def converge_ref(x):
    while jnp.abs(x).sum() < 12.0:
        x = x * 1.2 + jnp.sin(x)
    return x.sum()


def unroll_loop(k):
    def f(x, limit):
        return wl(lambda i, x, s: s < limit,
                  lambda i, x, s: (i + 1, jnp.sin(x) * 1.3 + 0.2, s + jnp.sum(x * x)),
                  [0, x, 0.0], maximum_iterations=16, unroll=k)
    return f


def unroll_ref(x, limit):
    return unrolled(lambda i, x, s: s < limit,
                    lambda i, x, s: (i + 1, jnp.sin(x) * 1.3 + 0.2, s + jnp.sum(x * x)),
                    [0, x, 0.0], 16)


CHECKPOINT = [
    Case("checkpoint_grad_n5", jax.grad(lambda x: ck_loss(x, np.int32(5))), (XC,),
         jax.grad(lambda x: ck_loss_ref(x, 5))),
    Case("checkpoint_grad_traced_n", jax.grad(ck_loss), (XC, np.int32(7)),
         lambda x, n: jax.grad(ck_loss_ref)(x, n),
         more_args=((XC, np.int32(0)), (XC, np.int32(12)))),
    # No bound: the default budget stores every step of these; 200 bytes store 6
    # steps and checkpoint the rest (K=3).
    Case("budget_grad_unbounded", jax.grad(budget_loss), (XC, np.int32(9)),
         lambda x, n: jax.grad(ck_loss_ref)(x, n)),
    Case("budget_switch", jax.grad(lambda x, n: budget_loss(x, n, gradient_memory=200)),
         (XC, np.int32(4)), lambda x, n: jax.grad(ck_loss_ref)(x, n),
         more_args=((XC, np.int32(13)),)),
    Case("budget_vmap_of_grad",
         jax.vmap(jax.grad(lambda x, n: budget_loss(x, n, gradient_memory=200))),
         (np.stack([XC, -XC, XC * 2, XC * 0.5]), np.array([0, 3, 7, 13], np.int32)),
         lambda xs, ns: np.stack([jax.grad(ck_loss_ref)(x, n) for x, n in zip(xs, ns)])),
    Case("checkpoint_data_dependent_stop", jax.grad(ck_stop), (f32(0.5),),
         jax.grad(grow_to_ten_ref)),
    Case("checkpoint_jvp_and_grad_of_grad",
         lambda x: (jax.jvp(ck_sin, (x,), (1.0,)), jax.grad(jax.grad(ck_sin))(x)), (f32(0.8),),
         lambda x: (jax.jvp(second_ref, (x,), (1.0,)), jax.grad(jax.grad(second_ref))(x))),
    Case("checkpoint_nested", jax.grad(ck_nested, (0, 1)), (f32(0.6), f32(0.7)),
         jax.grad(ck_nested_ref, (0, 1))),
    Case("checkpoint_vmap_of_grad", jax.vmap(jax.grad(ck_per_example)),
         (XS4, np.array([0, 1, 5, 9], np.int32)), per_example_ref_grads),
    Case("checkpoint_float_cond", jax.grad(converge), (np.full(4, 0.3, f32),),
         jax.grad(converge_ref)),
    Case("unroll3_forward", unroll_loop(3), (XC, f32(9.0)), unroll_ref),
    Case("unroll3_grad", jax.grad(lambda x, l: jnp.sum(unroll_loop(3)(x, l)[1])),
         (XC, f32(9.0)), jax.grad(lambda x, l: jnp.sum(unroll_ref(x, l)[1]))),
    Case("unroll4_vmap", jax.vmap(unroll_loop(4)),
         (np.linspace(-1, 1, 12, dtype=f32).reshape(4, 3), np.array([-1, 2, 9, 1e9], f32)),
         lambda xs, ls: [np.stack(v) for v in zip(*[unroll_ref(x, l) for x, l in zip(xs, ls)])]),
]

def sin_past_budget(x, a, n, loop=wl):
    return jnp.sum(loop(lambda i, x: i < n, lambda i, x: (i + 1, jnp.sin(a * x) * 0.9 + 0.1),
                        [0, x], **({} if loop is unrolled else dict(gradient_memory=200)))[1])


def cos_past_budget(x, n, loop=wl):
    """n steps of `cos` counted by a float: no bound known."""
    return loop(lambda t, _: t < n, lambda t, y: (t + 1.0, jnp.cos(y)), [0.0, x],
                **({} if loop is unrolled else dict(gradient_memory=4096)))[1]


# Past the budget: a step keeping its inputs, its rows recomputed by the gradient
# (`reverse/_carried_rows.py`: 200 bytes hold 7 steps' x, 3 steps' sin rows), and a
# second derivative storing a head of 24 steps, the rest in chunks under a branch
# (`reverse/_headed.py`), within the head and past it.
PAST_BUDGET = [
    Case("budget_carried_rows", jax.grad(sin_past_budget, (0, 1)), (XC, f32(1.1), np.int32(9)),
         lambda x, a, n: jax.grad(functools.partial(sin_past_budget, loop=unrolled), (0, 1))(
             x, a, int(n)),
         more_args=((XC, f32(1.1), np.int32(3)), (XC, f32(0.7), np.int32(20)))),
    Case("budget_head_grad_of_grad", jax.grad(jax.grad(cos_past_budget)), (f32(0.9), f32(10.0)),
         lambda x, n: jax.grad(jax.grad(functools.partial(cos_past_budget, loop=unrolled)))(
             x, float(n)),
         more_args=((f32(0.9), f32(24.0)), (f32(0.4), f32(60.0)))),
]

GROUPS = {"forward": FORWARD, "grad": GRAD, "checkpoint_unroll": CHECKPOINT,
          "past_budget": PAST_BUDGET}

# Programs iree-compile 3.13 rejects with aggressive fusion ("operand #N does not
# dominate this use"; iree_limits/reproduce.py aggressive_fusion_dominance):
# whilst.compile falls back to the default fusion for them. They are compiled in
# modules of their own, so the others run with aggressive fusion (budget_grad_unbounded
# and budget_switch among them since their checkpoint slot writes are unflagged,
# iree_limits/rereading_scatter.mlir; checkpoint_jvp_and_grad_of_grad, which failed
# with "failed to solve for timepoint coverage", compiles with it too since then). Of
# these, five compile with it since the picks of their last steps are select chains
# (`_onehot.pick`), and grad_of_grad_nested since reverse mode inlines its outer
# loop's three steps (`reverse/_inlined.py`); checkpoint_nested and, as jax 0.12
# traces it, budget_vmap_of_grad still fail, and so does budget_head_grad_of_grad.
WITHOUT_AGGRESSIVE_FUSION = {
    "budget_head_grad_of_grad", "budget_vmap_of_grad", "checkpoint_data_dependent_stop",
    "checkpoint_float_cond", "checkpoint_grad_n5",
    "checkpoint_grad_traced_n", "checkpoint_nested", "grad_of_grad_nested", "two_zeros_carries",
}


# Programs that jax 0.10.2 traces to other StableHLO than jax 0.12 (constants and ops
# placed otherwise). They are compiled in modules of their own, so that CI's run on jax
# 0.10.2, which shares the compile cache of its run on jax 0.12 (.ci/run), finds the
# other modules there and compiles only these again.
OTHER_TEXT_ON_OLDEST_JAX = {
    "scan_with_equal_inits", "grad_closed_over", "jacrev", "jacrev_zero_trip",
    "jacfwd_of_grad", "checkpoint_grad_n5", "checkpoint_grad_traced_n",
    "budget_grad_unbounded", "budget_switch", "budget_vmap_of_grad",
    "checkpoint_jvp_and_grad_of_grad",
}


# Programs whose loops IREE 3.13 does not compile inside dispatches: in the flag set
# that runs them so, which has aggressive fusion, it fails as above. Their modules
# are host-driven; every other module of the corpus runs its small loops inside
# dispatches (`whilst.lowering._iree_loops_in_dispatch`).
NOT_IN_DISPATCH = {"budget_head_grad_of_grad", "checkpoint_nested"}


def module_of(group: str, name: str) -> tuple:
    """The module a corpus program is compiled into: its group's, one per fusion
    setting and per `OTHER_TEXT_ON_OLDEST_JAX` membership."""
    return group, name not in WITHOUT_AGGRESSIVE_FUSION, name in OTHER_TEXT_ON_OLDEST_JAX


DRIVERS = ("local-sync", "local-task")


@pytest.fixture(scope="module")
def modules():
    """The corpus compiled as `module_of` groups it, loaded on each driver
    (`{(module_of(...), driver): module}`); each module's flag set is checked on the
    way: loops in dispatches unless it holds a `NOT_IN_DISPATCH` program, else the
    fusion its key names. They compile without `LOOPS_IN_DISPATCH_SECONDS`: on a
    loaded 2-core machine the in-dispatch form of the ('checkpoint_unroll', True,
    True) module took 58 s alone, and past the limit it falls back to the host."""
    from whilst._compile import FALLBACK_NOTE
    from whilst.lowering import _iree, has_loops_in_dispatch

    members = collections.defaultdict(list)
    for group, cases in GROUPS.items():
        for c in cases:
            members[module_of(group, c.name)].append(c)
    compiled = {}
    for key, cases in members.items():
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_iree, "LOOPS_IN_DISPATCH_SECONDS", None)
            module = whilst.compile([whilst.export(c.fn, *c.args, name=c.name)
                                     for c in cases])
        host_driven = any(c.name in NOT_IN_DISPATCH for c in cases)
        assert has_loops_in_dispatch(module.flags) != host_driven, (key, module.stages[-1])
        aggressive = key[1]
        assert not host_driven or (FALLBACK_NOTE in module.stages[-1][0]) != aggressive, (
            key, module.stages[-1])
        for driver in DRIVERS:
            compiled[key, driver] = module.load(driver)
    return compiled


def assert_tree_close(got, want, rtol):
    got_leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves), (got, want)
    for g, w in zip(got_leaves, want_leaves):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=rtol, atol=1e-5)


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("group, case", [(g, c) for g, cs in GROUPS.items() for c in cs],
                         ids=[c.name for cs in GROUPS.values() for c in cs])
def test_runs_on_iree_like_the_oracle(modules, group, case, driver):
    run = modules[module_of(group, case.name), driver][case.name]
    for args in [case.args, *case.more_args]:
        assert_tree_close(run(*args), case.want(*args), case.rtol)


def test_refused():
    """A program IREE 3.13 cannot compile never becomes a module: whilst.compile
    raises whilst.CompileError with IREE's diagnostics. Here a loop body scatters
    2 x 2 windows (iree_limits/reproduce.py wide_window_scatter)."""
    dims = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                      scatter_dims_to_operand_dims=(0, 1))

    def add_windows(x, starts, n):
        return wl(lambda i, x: i < n, lambda i, x: (
            i + 1, lax.scatter_add(x, starts + i, jnp.ones((2, 2, 2), x.dtype), dims)),
            [0, x])[1]

    with pytest.raises(whilst.CompileError, match="iree-compile failed"):
        whilst.compile(add_windows, np.zeros((5, 3), f32), np.array([[0, 1], [2, 0]], np.int32),
                       np.int32(1))


def test_runtime_failure_is_one_clear_error():
    """A module that fails inside the IREE runtime (the loop form whilst emitted
    before the fix, iree_limits/barrier_on_constant_init.mlir, compiled by
    iree-compile alone: without whilst's edit of its VM branches, every call reads a
    null buffer) raises whilst.runtime.RunError naming the function."""
    from iree.compiler import tools

    from whilst.lowering import flag_sets
    from whilst.runtime.seal import seal

    text = (REPO / "iree_limits" / "barrier_on_constant_init.mlir").read_text()
    # stepped from the host, where the failure is (in one dispatch the loop runs)
    flags = flag_sets(["llvm-cpu"], loops_in_dispatch=False)[0]
    module = whilst.runtime.load(seal(tools.compile_str(text, extra_args=list(flags))))
    with pytest.raises(whilst.runtime.RunError, match="main: the IREE runtime failed"):
        module.main(A4, np.ones(4, f32))

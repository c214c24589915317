"""whilst loops inside `jax.shard_map` (check_vma on) and `jax.pmap` on 4 CPU devices,
against the single-device program with the loops unrolled in plain Python.

Run as a script (`tests/sharding/test_shard_map.py` does, in a subprocess: XLA_FLAGS
must be set before jax is imported); prints one JSON object, case name ->
`[got, expected]` (nested lists of floats), and `psums_in_loops`: how many
`psum`s the gradients' loop bodies hold (a collective per step deadlocks devices
whose trip counts differ).
"""
import json
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

import whilst  # noqa: E402
import whilst.lax  # noqa: E402

MESH = Mesh(np.array(jax.devices()[:4]), ("b",))
W = np.float32(1.3)
XS = (np.arange(16, dtype=np.float32).reshape(8, 2) / 10)  # trip counts 1 to 7


def stop(x):
    return jnp.sum(x) < 10.0


def step(w, x):
    return x * w + 0.5


def python_loop(w, x):
    """The oracle: the loop in plain Python (x concrete, w differentiated)."""
    while bool(stop(x)):
        x = step(w, x)
    return jnp.sum(x ** 2)


def tf_loop(w, x):
    _, y = whilst.while_loop(lambda i, x: stop(x), lambda i, x: (i + 1, step(w, x)),
                             [0, x], maximum_iterations=20)
    return jnp.sum(y ** 2)


def lax_loop(**options):
    def loss(w, x):
        return jnp.sum(whilst.lax.while_loop(stop, lambda x: step(w, x), x, **options) ** 2)
    return loss


def counted(w, x):
    """Three steps known at trace time: reverse mode inlines them."""
    return jnp.sum(whilst.lax.fori_loop(0, 3, lambda i, x: step(w, x), x) ** 2)


def python_counted(w, x):
    for _ in range(3):
        x = step(w, x)
    return jnp.sum(x ** 2)


def nested(w, x):
    """An outer loop whose body runs an inner loop (trip counts differ per device)."""
    def body(x):
        return whilst.lax.while_loop(lambda y: jnp.sum(y) < jnp.sum(x) + 1.0,
                                     lambda y: y * w + 0.25, x)
    return jnp.sum(whilst.lax.while_loop(stop, body, x) ** 2)


def python_nested(w, x):
    while bool(stop(x)):
        y = x
        while bool(jnp.sum(y) < jnp.sum(x) + 1.0):
            y = y * w + 0.25
        x = y
    return jnp.sum(x ** 2)


def sharded(loss, vmapped):
    """`sum(loss(w, x) for x in XS)` with XS split over 4 devices."""
    def per_device(w, xs):
        total = (jnp.sum(jax.vmap(lambda x: loss(w, x))(xs)) if vmapped
                 else sum(loss(w, xs[k]) for k in range(xs.shape[0])))
        return jax.lax.psum(total, "b")
    return jax.shard_map(per_device, mesh=MESH, in_specs=(P(), P("b")), out_specs=P())


def oracle_grad(python_loss):
    return float(jax.grad(lambda w: sum(python_loss(w, x) for x in XS))(W))


def psums_in_loops(closed_jaxpr):
    """The psums inside the bodies of whilst's loops, however deep."""
    count = 0

    def walk(jaxpr, in_loop):
        nonlocal count
        for eqn in jaxpr.eqns:
            if in_loop and "psum" in eqn.primitive.name:
                count += 1
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub, in_loop or "while" in eqn.primitive.name)

    walk(closed_jaxpr.jaxpr, False)
    return count


def main():
    results = {}
    # (loss, its oracle, vmapped): each gradient policy once, vmapped or not.
    grads = {
        "stored": (tf_loop, python_loop, False),
        "stored_vmap": (tf_loop, python_loop, True),
        "budget_chunks_vmap": (lax_loop(gradient_memory=24), python_loop, True),
        "checkpoints_vmap": (lax_loop(checkpoints=2), python_loop, True),
        "unbounded_default": (lax_loop(), python_loop, False),
        "nested": (nested, python_nested, False),
        "inlined_vmap": (counted, python_counted, True),
    }
    psums = 0
    expected = oracle_grad(python_loop)
    for name, (loss, python_loss, vmapped) in grads.items():
        fn = jax.jit(jax.grad(sharded(loss, vmapped)))
        results[f"grad_{name}"] = [
            float(fn(W, XS)), expected if python_loss is python_loop else oracle_grad(python_loss)]
        psums += psums_in_loops(jax.make_jaxpr(fn)(W, XS))
    results["forward_vmap"] = [float(jax.jit(sharded(tf_loop, True))(W, XS)),
                               float(sum(python_loop(W, x) for x in XS))]
    _, tangent = jax.jvp(jax.jit(sharded(lax_loop(), True)), (W, XS),
                         (np.float32(1.0), np.zeros_like(XS)))
    results["jvp_vmap"] = [float(tangent), expected]
    # jax.pmap: one example per device, each with its own trip count.
    pmapped = jax.pmap(jax.grad(tf_loop), in_axes=(None, 0))(W, XS[:4])
    results["pmap_grad"] = [[float(g) for g in pmapped],
                            [float(jax.grad(python_loop)(W, x)) for x in XS[:4]]]
    results["psums_in_loops"] = psums
    print(json.dumps(results))


if __name__ == "__main__":
    main()

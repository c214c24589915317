"""What the tests of several folders share: the repository's root, whether a runtime
driver finds a device (and the skip, or failure, where Vulkan finds none), the
host-driven stream phase, the ops of a module text, and
oracles that do not use whilst (the loop in plain Python, which `jax.grad`
differentiates as straight-line code)."""
import os
import pathlib

import jax.numpy as jnp

REPO = pathlib.Path(__file__).resolve().parent.parent


def no_device(driver: str) -> str | None:
    """Why IREE's runtime finds no device for `driver`, or None where it finds one.
    It creates none: `iree.runtime.get_device` keeps the device it makes for the
    process, and on lavapipe a Vulkan device spins two threads for as long as it
    lives (iree_limits/vulkan_idle_spin.py)."""
    import iree.runtime as rt
    try:
        found = rt.get_driver(driver).query_available_devices()
    except Exception as e:  # no loader or no driver: IREE raises several types
        return str(e)
    return None if found else f"the {driver} driver lists no device"


def vulkan_or_skip():
    """Skip without a Vulkan device, unless WHILST_REQUIRE_VULKAN is set (.ci/run sets
    it where it has lavapipe): then fail."""
    import pytest

    why = no_device("vulkan")
    if why is None:
        return
    if os.environ.get("WHILST_REQUIRE_VULKAN"):
        pytest.fail(f"WHILST_REQUIRE_VULKAN is set, but there is no vulkan device: {why}")
    pytest.skip(f"no vulkan device here (.ci/run installs Mesa's lavapipe): {why[:80]}")


def host_driven_stream(text: str) -> str:
    """`compile_to_stream(text, loops_in_dispatch=False)`: the llvm-cpu module with
    every loop stepped from the host, as on GPUs and for loops too wide to run inside
    one dispatch; the form whose per-iteration readbacks, dispatches and copies the
    tests count."""
    from whilst.lowering import compile_to_stream
    return compile_to_stream(text, loops_in_dispatch=False)


def op_names(text):
    """The names of all ops of an MLIR module text, nested ops included."""
    from whilst.lowering._iree_ir import ir

    names = []
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        ir.Module.parse(text).operation.walk(
            lambda op: names.append(op.operation.name) or ir.WalkResult.ADVANCE)
    return names


def unrolled(cond, body, loop_vars, maximum_iterations=None):
    """The loop in plain Python. numpy values give a numpy oracle, JAX values one that
    `jax.grad` differentiates as straight-line code (no whilst involved)."""
    i = 0
    while (maximum_iterations is None or i < maximum_iterations) and bool(cond(*loop_vars)):
        loop_vars = body(*loop_vars)
        loop_vars = list(loop_vars) if isinstance(loop_vars, (list, tuple)) else [loop_vars]
        i += 1
    return loop_vars


def pushing_loop(f, loop):
    """TensorFlow's `_WrapInWhile(f)` (while_v2_test.py): two steps of `y <- f(cos(y))`
    counted by `i < 2`, pushing each step's `y` onto a list (a dynamic TensorArray,
    whose room is the trip count known at trace time), and `y + sum(list)`. `loop`
    False: the same in plain Python, with a Python list."""
    import whilst

    def wrapped(x):
        if not loop:
            ys, y = [], x
            for _ in range(2):
                ys.append(y)
                y = f(jnp.cos(y))
            return y + sum(ys)

        def body(i, y, pushed):
            return i + 1, f(jnp.cos(y)), pushed.write(i, y)

        _, z, pushed = whilst.while_loop(
            lambda i, y, pushed: i < 2, body,
            [0, x, whilst.TensorArray(jnp.float32, size=0, dynamic_size=True)])
        return z + jnp.sum(pushed.stack())
    return wrapped


def nested_sin_loop(x):
    """Three steps of the outer loop of `nested_sin_oracle` (a = 1) as whilst loops,
    each with a `maximum_iterations`."""
    import whilst

    def outer(i, x):
        y = whilst.while_loop(lambda j, y: j < i + 1, lambda j, y: (j + 1, jnp.sin(y) + x),
                              [0, x], maximum_iterations=5)[1]
        return i + 1, y * 0.9
    return whilst.while_loop(lambda i, x: i < 3, outer, [0, x], maximum_iterations=4)[1]


def nested_sin_oracle(x, outer, a=1.0):
    """The nested loops of the nested-gradient tests, unrolled in plain Python: step
    i of the outer loop runs i + 1 inner steps `y = sin(y) * a + x`."""
    for i in range(outer):
        y = x
        for _ in range(i + 1):
            y = jnp.sin(y) * a + x
        x = y * 0.9
    return x


def nested_in_chunks(x, a, n, gradient_memory):
    """sum(x) after n outer steps: step i runs i % 3 + 1 inner steps `y = sin(y) * a +
    x` (a loop with maximum_iterations=3), then `x = y * 0.9`; the outer loop in chunks
    that fit `gradient_memory`."""
    import whilst

    def outer_body(i, x):
        _, y = whilst.while_loop(lambda j, y: j <= i % 3,
                                 lambda j, y: (j + 1, jnp.sin(y) * a + x), [0, x],
                                 maximum_iterations=3)
        return i + 1, y * 0.9
    return jnp.sum(whilst.while_loop(lambda i, x: i < n, outer_body, [0, x],
                                     gradient_memory=gradient_memory)[1])


def decaying_in_steps(x, n, loop=None):
    """`y <- sin(inner(y, 3 + t))` while a float counter `t < n`, where `inner(y, m)`
    runs `y <- y * 0.99` while a float counter `s < m`: an outer loop whose steps keep
    rows, each running an inner loop whose steps keep none, neither with a bound.
    `loop=unrolled`: the same in plain Python."""
    import whilst

    loop = loop or whilst.while_loop

    def inner(y, m):
        return loop(lambda s, y: s < m, lambda s, y: (s + 1.0, y * 0.99), [0.0, y])[1]
    return loop(lambda t, y: t < n, lambda t, y: (t + 1.0, jnp.sin(inner(y, 3.0 + t))),
                [0.0, x])[1]


def nested_in_chunks_oracle(x, a, n):
    """`nested_in_chunks` in plain Python."""
    for i in range(n):
        y = x
        for _ in range(i % 3 + 1):
            y = jnp.sin(y) * a + x
        x = y * 0.9
    return jnp.sum(x)


def per_example_sin_oracle(x, n):
    """n steps of `x = sin(x) * 1.5 + 0.1` in plain Python: the oracle of the loops
    vmapped with a trip count per example."""
    for _ in range(n):
        x = jnp.sin(x) * 1.5 + 0.1
    return x


def tanh_step(w, i, x):
    """Step i of the checkpointed loops' body (i an int32 array)."""
    return jnp.tanh(w * x + 0.05 * i.astype(jnp.float32)) * 1.2


def tanh_loss_oracle(x, w, n):
    """sum(x ** 2) after n steps `x = tanh_step(w, i, x)`, in plain Python."""
    for i in range(int(n)):
        x = tanh_step(w, jnp.int32(i), x)
    return jnp.sum(x ** 2)


def sin_steps_loss(loop, n=40, **options):
    """`y -> sum(y_n ** 3)` after n steps `y = y + 0.1 sin(3 y)`: whilst's loop with
    `maximum_iterations=n` (and `options`) if `loop`, else the loop in plain Python."""
    import whilst

    def loss(y):
        step = lambda i, y: (i + 1, y + 0.1 * jnp.sin(3.0 * y))
        if loop:
            y = whilst.while_loop(lambda i, _: i < n, step, [0, y], maximum_iterations=n,
                                  **options)[1]
        else:
            y = unrolled(lambda i, _: i < n, step, [0, y])[1]
        return jnp.sum(y ** 3)
    return loss


def gradient_of_squared_gradient(f):
    """`y -> jax.grad(sum(jax.grad(f)(y) ** 2))`: a second derivative of `f`."""
    import jax

    return jax.grad(lambda y: jnp.sum(jax.grad(f)(y) ** 2))


def chunk_steps(f, *args) -> set:
    """The steps per chunk of each While over a budget's chunks in `f`'s jaxpr."""
    import jax

    from whilst.ir import iter_loops

    jaxpr = jax.make_jaxpr(f)(*args).jaxpr
    return {e.params["gradient"].chunk_steps for e in iter_loops(jaxpr)
            if hasattr(e.params["gradient"], "chunk_steps")}

"""Higher derivatives of an unbounded loop under the default policy (TensorFlow's
testIteratedGradients): values against JAX's derivatives of the loop unrolled in
Python, memory from XLA's compiled memory analysis."""
import jax
import jax.numpy as jnp
import numpy as np

import whilst
from whilst.ir import DEFAULT_GRADIENT_MEMORY


def cos_twice(x):
    return whilst.while_loop(lambda i, _: i < 2, lambda i, y: (i + 1, jnp.cos(y)), [0, x])[1]


def cos_twice_unrolled(x):
    return jnp.cos(jnp.cos(x))


def test_second_derivative_of_an_unbounded_loop_eagerly_and_under_jit():
    grad2 = jax.grad(jax.grad(cos_twice))
    want = jax.grad(jax.grad(cos_twice_unrolled))(1.0)
    np.testing.assert_allclose(grad2(1.0), want, rtol=1e-6)
    compiled = jax.jit(grad2).lower(1.0).compile()
    np.testing.assert_allclose(compiled(1.0), want, rtol=1e-6)
    # The loops of the first derivative carry a chunk's stacks (the 1 MiB budget):
    # the second keeps a few copies of them (the budget's loops keep only the
    # copies of their carry that fit it), not 64.
    assert compiled.memory_analysis().temp_size_in_bytes < 32 * DEFAULT_GRADIENT_MEMORY

"""Import structure: every rule of whilst's primitives is registered by whatever
import makes a loop possible, and no more than the runtime needs JAX."""
import os
import subprocess
import sys
import textwrap

from helpers import REPO


def test_frontend_alone_registers_lowering_and_reverse_mode():
    """`from whilst.frontend import while_loop` (nothing else from whilst), then jit,
    export and grad of loops, in a fresh process."""
    script = textwrap.dedent("""
        import jax
        import jax.numpy as jnp
        import numpy as np
        from whilst.frontend import while_loop

        def f(x):
            return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2.0), [0, x],
                              maximum_iterations=5)[1]

        def g(x):
            return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2.0), [0, x],
                              checkpoints=2)[1]

        x = np.ones(3, np.float32)
        np.testing.assert_array_equal(jax.jit(f)(x), x * 8)
        text = jax.export.export(jax.jit(f))(x).mlir_module()
        assert "stablehlo.while" in text, text
        np.testing.assert_array_equal(jax.jit(jax.grad(lambda x: f(x).sum()))(x), x * 8)
        np.testing.assert_array_equal(jax.jit(jax.grad(lambda x: g(x).sum()))(x), x * 8)
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == "ok"

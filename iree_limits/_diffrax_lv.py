"""The Lotka-Volterra solve of the diffrax reproducers (`equal_barrier_copies.py`,
`fenced_gathers_default_fusion.py`): Tsit5 from y0 = (10, 10) over [0, 10], dt0 = 0.1.
Importing it sets `EQX_ON_ERROR=nan` unless set (equinox's checks are host callbacks,
which an export cannot hold), so import it before equinox."""
import os

os.environ.setdefault("EQX_ON_ERROR", "nan")

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

Y0 = np.array([10.0, 10.0], np.float32)
RATES = np.array([0.1, 0.02, 0.4, 0.02], np.float32)


def loss(rates, adjoint, **solve_options):
    """sum of the solve's saved states (`solve_options`: diffeqsolve's saveat,
    stepsize_controller)."""
    field = lambda t, y, p: jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1],
                                       -p[2] * y[1] + p[3] * y[0] * y[1]])
    return jnp.sum(diffrax.diffeqsolve(
        diffrax.ODETerm(field), diffrax.Tsit5(), 0.0, 10.0, 0.1, Y0, args=rates,
        max_steps=256, adjoint=adjoint, **solve_options).ys)

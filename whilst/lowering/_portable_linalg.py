"""JAX's linear algebra lowered without LAPACK, for exports that IREE compiles.

On CPU, JAX lowers `lu` (`jnp.linalg.solve`, `jax.scipy.linalg.lu_factor`, lineax's
LU, an optimistix Newton step) and `triangular_solve` to LAPACK custom calls, which
IREE has no kernels for (and whose `#sdy` sharding-rule attributes IREE's parser
rejects). Within `portable_linear_algebra()`, `lu` takes JAX's own rule for
platforms without LAPACK (`_lu_python`, blocked elimination in lax ops), and
`triangular_solve` is substitution row by row in jax.numpy (IREE 3.13 does not
legalize `stablehlo.triangular_solve` either)::

    x = zeros_like(b)
    for i in (range(n) if lower else reversed(range(n))):   # left side, a n x n
        x[i] = (b[i] - a[i, strictly below or above i] @ x) / (1 if unit else a[i, i])
"""
from __future__ import annotations

import contextlib

import jax.numpy as jnp
from jax import lax
from jax._src.lax import linalg as _linalg
from jax.interpreters import mlir

from whilst._jax_compat import _platform_specific_lowerings

# Rows substituted in unrolled Python steps up to this size; a `fori_loop` above it.
UNROLLED_ROWS = 32


@contextlib.contextmanager
def portable_linear_algebra():
    """Within the block, `lu` and `triangular_solve` lower for CPU without LAPACK."""
    cpu = _platform_specific_lowerings["cpu"]
    saved = {p: cpu.get(p) for p in (_linalg.lu_p, _linalg.triangular_solve_p)}
    cpu.pop(_linalg.lu_p, None)     # JAX's default rule: _lu_python
    mlir.register_lowering(_linalg.triangular_solve_p,
                           mlir.lower_fun(triangular_solve, multiple_results=False),
                           platform="cpu")
    try:
        yield
    finally:
        for primitive, entry in saved.items():
            if entry is None:
                cpu.pop(primitive, None)
            else:
                cpu[primitive] = entry


def triangular_solve(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    """`lax.linalg.triangular_solve` (batch dims leading) by substitution."""
    if conjugate_a:
        a = jnp.conj(a)
    if transpose_a:
        a, lower = jnp.swapaxes(a, -1, -2), not lower
    if not left_side:   # x a = b  <=>  a^T x^T = b^T
        return jnp.swapaxes(_left_solve(jnp.swapaxes(a, -1, -2), jnp.swapaxes(b, -1, -2),
                                        not lower, unit_diagonal), -1, -2)
    return _left_solve(a, b, lower, unit_diagonal)


def _left_solve(a, b, lower, unit_diagonal):
    """`x` with `a x = b`, `a` lower (or upper) triangular `[..., n, n]`, `b [..., n, k]`."""
    n = a.shape[-1]
    columns = jnp.arange(n)

    def row(i, x):
        k = i if lower else n - 1 - i
        coefficients = lax.dynamic_index_in_dim(a, k, axis=a.ndim - 2, keepdims=False)
        outside = (columns < k) if lower else (columns > k)
        coefficients = jnp.where(outside, coefficients, jnp.zeros_like(coefficients))
        rhs = lax.dynamic_index_in_dim(b, k, axis=b.ndim - 2, keepdims=False)
        value = rhs - jnp.einsum("...j,...jm->...m", coefficients, x)
        if not unit_diagonal:
            pivot = lax.dynamic_index_in_dim(jnp.diagonal(a, axis1=-2, axis2=-1), k,
                                             axis=a.ndim - 2, keepdims=False)
            value = value / pivot[..., None]
        return lax.dynamic_update_index_in_dim(x, value, k, axis=x.ndim - 2)

    x = jnp.zeros(jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:], b.dtype)
    if n <= UNROLLED_ROWS:
        for i in range(n):
            x = row(i, x)
        return x
    return lax.fori_loop(0, n, row, x)


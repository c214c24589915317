"""JAX's linear algebra lowered without LAPACK, for exports that IREE compiles.

On CPU, JAX lowers `lu` (`jnp.linalg.solve`, `jax.scipy.linalg.lu_factor`, lineax's
LU, an optimistix Newton step), `triangular_solve`, `cholesky`
(`jnp.linalg.cholesky`, `jax.scipy.linalg.cho_factor`, lineax's Cholesky) and QR's
`geqrf`, `householder_product` and `ormqr` to LAPACK custom calls, which IREE has no
kernels for (and whose `#sdy` sharding-rule attributes IREE's parser rejects).
Within `portable_linear_algebra()`, `lu` takes JAX's own rule for platforms
without LAPACK (`_lu_python`, blocked elimination in lax ops), and the others are
written in jax.numpy (IREE 3.13 legalizes neither `stablehlo.triangular_solve` nor
`stablehlo.cholesky`; JAX's other rules for QR are custom calls, or a `fori_loop`
where a few unrolled steps do)::

    x = zeros_like(b)                     # triangular_solve: substitution row by row
    for i in (range(n) if lower else reversed(range(n))):   # left side, a n x n
        x[i] = (b[i] - a[i, strictly below or above i] @ x) / (1 if unit else a[i, i])
                                          # (column by column past UNROLLED_ROWS)

    l = zeros_like(a)                     # cholesky: column by column, LAPACK's potrf
    for j in range(n):                    # reading the lower triangle of a only
        l[j, j] = sqrt(a[j, j] - l[j, :j] @ conj(l[j, :j]))
        l[j+1:, j] = (a[j+1:, j] - l[j+1:, :j] @ conj(l[j, :j])) / l[j, j]
    l = l if every pivot a[j, j] - ... > 0 else full_like(a, nan)   # as JAX on CPU

    for j in range(min(m, n)):            # geqrf: Householder QR, LAPACK's geqr2
        alpha, x = a[j, j], a[j+1:, j]
        if x == 0 and imag(alpha) == 0:   # nothing to reflect: H = I
            tau = 0
        else:
            beta = -copysign(hypot(abs(alpha), norm(x)), real(alpha))
            tau, v = (beta - alpha) / beta, concat([1], x / (alpha - beta))
            a[j, j], a[j+1:, j] = beta, v[1:]
            a[j:, j+1:] -= conj(tau) * outer(v, conj(v) @ a[j:, j+1:])   # H^H a
    return a, taus

    for j in (reversed(range(k)) if left != transpose else range(k)):   # ormqr
        c = H_j^(H if transpose) c   if left else   c H_j^(H if transpose)

`householder_product` (LAPACK's orgqr: the first n columns of Q = H_0 ... H_k-1) is
`ormqr` of the identity. `qr` (`jnp.linalg.qr`, lineax's QR, optimistix's
Levenberg-Marquardt, lineax's GMRES) is `geqrf` followed by `householder_product`;
lineax's QR solves with `ormqr`. Loops over rows, columns or reflectors are
unrolled up to UNROLLED_ROWS, `fori_loop`s past it.
"""
from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax._src.lax import linalg as _linalg
from jax.interpreters import mlir

from whilst._jax_compat import _platform_specific_lowerings

# Rows substituted in unrolled Python steps up to this size; a `fori_loop` above it.
UNROLLED_ROWS = 32


@functools.cache
def _rules():
    """{primitive: the jax.numpy function its portable lowering runs}."""
    return {_linalg.lu_p: _linalg._lu_python, _linalg.triangular_solve_p: triangular_solve,
            _linalg.cholesky_p: cholesky, _linalg.geqrf_p: geqrf,
            _linalg.householder_product_p: householder_product, _linalg.ormqr_p: ormqr,
            _linalg.qr_p: _linalg._qr_lowering}


def expansion(eqn):
    """The jaxpr that `eqn`'s portable lowering emits, for weighing what an unrolled
    loop body holds (`whilst.ir._unroll`); None for other primitives."""
    rule = _rules().get(eqn.primitive)
    if rule is None:
        return None
    return _traced(rule, tuple(v.aval for v in eqn.invars), tuple(sorted(eqn.params.items())))


@functools.lru_cache(maxsize=256)
def _traced(rule, avals, params):
    return jax.make_jaxpr(functools.partial(rule, **dict(params)))(*avals).jaxpr


@contextlib.contextmanager
def portable_linear_algebra():
    """Within the block, `lu`, `triangular_solve`, `cholesky`, `geqrf`,
    `householder_product` and `ormqr` lower for CPU without LAPACK."""
    cpu = _platform_specific_lowerings["cpu"]
    # lu's and qr's default rules are JAX's own (_lu_python; geqrf and householder_product)
    ours = [p for p in _rules() if p not in (_linalg.lu_p, _linalg.qr_p)]
    saved = {p: cpu.get(p) for p in (_linalg.lu_p, *ours)}
    cpu.pop(_linalg.lu_p, None)
    for primitive in ours:
        mlir.register_lowering(primitive, mlir.lower_fun(
            _rules()[primitive], multiple_results=primitive.multiple_results), platform="cpu")
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
    """`x` with `a x = b`, `a` lower (or upper) triangular `[..., n, n]`, `b [..., n, k]`:
    rows unrolled, or past UNROLLED_ROWS `_left_solve_by_columns`."""
    n = a.shape[-1]
    shape = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:]
    if n > UNROLLED_ROWS:
        return _left_solve_by_columns(a, jnp.broadcast_to(b, shape), lower, unit_diagonal)
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

    x = jnp.zeros(shape, b.dtype)
    for i in range(n):
        x = row(i, x)
    return x


def _left_solve_by_columns(a, b, lower, unit_diagonal):
    """`_left_solve` in a `fori_loop` over columns, each solved row taken out of the
    rows still to solve (iree-compile 3.13 crashes in `VectorType::get` on the row
    loop's dot of a row with the solved rows)::

        for k in (range(n) if lower else reversed(range(n))):
            x[k] = b[k] / (1 if unit else a[k, k])
            b[rows after k] -= a[rows after k, k] * x[k]
    """
    n = a.shape[-1]
    rows = jnp.arange(n)

    def column(i, carry):
        x, rest = carry
        k = i if lower else n - 1 - i
        a_k = lax.dynamic_index_in_dim(a, k, axis=a.ndim - 1, keepdims=False)   # a[..., :, k]
        value = lax.dynamic_index_in_dim(rest, k, axis=rest.ndim - 2, keepdims=False)
        if not unit_diagonal:
            value = value / lax.dynamic_index_in_dim(a_k, k, axis=a_k.ndim - 1)
        after = (rows > k) if lower else (rows < k)
        rest = rest - jnp.where(after[:, None], a_k[..., :, None] * value[..., None, :],
                                jnp.zeros_like(rest))
        return lax.dynamic_update_index_in_dim(x, value, k, axis=x.ndim - 2), rest

    return lax.fori_loop(0, n, column, (jnp.zeros_like(b), b))[0]


def cholesky(a):
    """`cholesky_p`: the lower Cholesky factor of each `[..., n, n]` matrix (zeros above
    the diagonal) from its lower triangle, or NaNs where a pivot is not positive."""
    n = a.shape[-1]
    rows = jnp.arange(n)
    ok = jnp.ones(a.shape[:-2], bool)

    def column(j, carry):
        l, ok = carry
        a_j = lax.dynamic_index_in_dim(a, j, axis=a.ndim - 1, keepdims=False)   # a[..., :, j]
        l_j = lax.dynamic_index_in_dim(l, j, axis=l.ndim - 2, keepdims=False)   # l[..., j, :]
        s = a_j - jnp.einsum("...ik,...k->...i", l, jnp.conj(l_j))   # columns >= j are 0
        pivot = jnp.real(lax.dynamic_index_in_dim(s, j, axis=s.ndim - 1, keepdims=False))
        ok = ok & (pivot > 0)
        diagonal = jnp.sqrt(pivot).astype(a.dtype)
        value = jnp.where(rows > j, s / diagonal[..., None],
                          jnp.where(rows == j, diagonal[..., None], jnp.zeros_like(s)))
        return lax.dynamic_update_index_in_dim(l, value[..., None], j, axis=l.ndim - 1), ok

    l, ok = _steps(n, column, (jnp.zeros_like(a), ok))
    return jnp.where(ok[..., None, None], l, jnp.full_like(l, jnp.nan))


def geqrf(a):
    """`geqrf_p`: each `[..., m, n]` matrix's Householder QR as LAPACK stores it: R on
    and above the diagonal, the reflectors' vectors below it (their leading 1 implied),
    and their `taus [..., min(m, n)]`."""
    m, n = a.shape[-2:]
    k = min(m, n)
    rows, columns = jnp.arange(m), jnp.arange(n)
    real = jnp.finfo(a.dtype).dtype

    def reflect(j, carry):
        a, taus = carry
        column = lax.dynamic_index_in_dim(a, j, axis=a.ndim - 1, keepdims=False)
        alpha = lax.dynamic_index_in_dim(column, j, axis=column.ndim - 1, keepdims=False)
        below = rows > j
        x_norm2 = jnp.sum(jnp.where(below, jnp.abs(column) ** 2, jnp.zeros((), real)), -1)
        identity = (x_norm2 == 0) & (jnp.imag(alpha) == 0)
        beta = -jnp.copysign(jnp.sqrt(jnp.abs(alpha) ** 2 + x_norm2), jnp.real(alpha))
        beta = jnp.where(identity, jnp.ones_like(beta), beta)   # no 0 / 0 where unused
        tau = jnp.where(identity, jnp.zeros_like(alpha), (beta - alpha) / beta)
        scale = jnp.where(identity, jnp.zeros_like(alpha), 1 / (alpha - beta))
        v = _reflector(column * scale[..., None], j, rows)
        reflected = jnp.einsum("...i,...ij->...j", jnp.conj(v), a)    # v^H a
        a = a - jnp.where(columns > j, jnp.conj(tau)[..., None, None] * v[..., :, None]
                          * reflected[..., None, :], jnp.zeros_like(a))
        column = jnp.where(below, v, jnp.where(rows == j, jnp.where(
            identity, alpha, beta.astype(a.dtype))[..., None], column))
        a = lax.dynamic_update_index_in_dim(a, column[..., None], j, axis=a.ndim - 1)
        return a, lax.dynamic_update_index_in_dim(taus, tau[..., None], j, axis=taus.ndim - 1)

    return list(_steps(k, reflect, (a, jnp.zeros(a.shape[:-2] + (k,), a.dtype))))


def householder_product(a, taus):
    """`householder_product_p`: the first n columns of `H_0 H_1 ... H_k-1`, the
    reflectors `I - taus[j] v_j v_j^H` that `geqrf` stores in `a [..., m, n]`."""
    m, n = a.shape[-2:]
    identity = jnp.broadcast_to(jnp.eye(m, n, dtype=a.dtype), a.shape)
    return ormqr(a, taus, identity, left=True, transpose=False)


def ormqr(a, taus, c, *, left, transpose):
    """`ormqr_p`: `c` multiplied by `Q = H_0 ... H_k-1` of `geqrf`'s `a [..., m, n]` and
    `taus [..., k]`, or by `Q^H` (`transpose`), on the left or on the right."""
    k = taus.shape[-1]
    rows = jnp.arange(a.shape[-2])

    def reflect(i, c):
        j = k - 1 - i if left != transpose else i
        v = _reflector(lax.dynamic_index_in_dim(a, j, axis=a.ndim - 1, keepdims=False), j,
                       rows)
        tau = lax.dynamic_index_in_dim(taus, j, axis=taus.ndim - 1, keepdims=False)
        tau = (jnp.conj(tau) if transpose else tau)[..., None, None]
        if left:    # c - tau v (v^H c)
            return c - tau * v[..., :, None] * jnp.einsum("...i,...ij->...j", jnp.conj(v), c)[
                ..., None, :]
        return c - tau * jnp.einsum("...ij,...j->...i", c, v)[..., :, None] * jnp.conj(v)[
            ..., None, :]

    return _steps(k, reflect, c)


def _reflector(x, j, rows):
    """`x` below row `j`, 1 at it, 0 above: the vector of a Householder reflector."""
    return jnp.where(rows > j, x, (rows == j).astype(x.dtype))


def _steps(n, step, carry):
    """`for i in range(n): carry = step(i, carry)`, unrolled up to UNROLLED_ROWS steps,
    a `fori_loop` past them."""
    if n > UNROLLED_ROWS:
        return lax.fori_loop(0, n, step, carry)
    for i in range(n):
        carry = step(i, carry)
    return carry

"""`x ** y` and `atan2(y, x)` with XLA's (IEEE 754) special cases on IREE 3.13.

IREE 3.13 computes `pow(x, y)` for a `y` it cannot see as `exp(y * log(x))`-like
code: a negative base gives NaN even for an integral exponent (`(-2.0) ** y` at
`y = 3.0`), and `pow(0, 0)`, `pow(-2, 0)` give NaN where XLA gives 1. (A constant
exponent is specialized by IREE and right.) Its `atan2` gives NaN for two zeros
or two infinities and +pi for a negative `y` (or -0.0) with `x = -inf` (or a
zero `y` with negative `x`), where XLA gives -pi. `ieee_math(jaxpr)` rewrites
each floating `pow` whose exponent is not a literal, and each `atan2`::

    x ** y  ==  where(y == 0 | x == 1 | (x == -1 & y is infinite), 1,
                      where(x < 0 & isfinite(x) & isfinite(y) & (y != floor(y)), nan,
                            where(signbit(x) & y is an odd integer, -p, p)))
    with p = |x| ** y

    atan2(y, x)  ==  nan if either is nan, else copysign(pi - a if signbit(x) else a, y)
    with a = atan2(|y|, |x|) in [0, pi/2]: 0 for y == 0, pi/4 for two infinities,
             pi/2 for infinite y, 0 for infinite x
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jax.extend.core import ClosedJaxpr, Literal

from whilst.ir._rewrite import into_control_flow, rewrite_equations


def ieee_math(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with its `pow`s of array exponents and its `atan2`s in the forms of
    the module docstring; the same object when it has none."""
    return rewrite_equations(jaxpr, _RULE, "ieee_math")


def _rule(eqn):
    if (eqn.primitive.name == "pow" and not any(isinstance(v, Literal) for v in eqn.invars)
            and jnp.issubdtype(eqn.invars[0].aval.dtype, jnp.floating)
            and jnp.issubdtype(eqn.invars[1].aval.dtype, jnp.floating)):
        return _pow
    if eqn.primitive.name == "atan2" and jnp.issubdtype(eqn.invars[0].aval.dtype, jnp.floating):
        return _atan2
    return None


def _pow(x, y, **params):
    p = lax.pow_p.bind(lax.abs(x), y, **params)
    finite_y = lax.is_finite(y)
    integral = lax.bitwise_and(finite_y, lax.eq(lax.floor(y), y))
    odd = lax.bitwise_and(integral, lax.ne(lax.rem(y, lax.full_like(y, 2)), lax.full_like(y, 0)))
    signed = lax.select(lax.bitwise_and(_signbit(x), odd), lax.neg(p), p)
    no_real_root = lax.bitwise_and(
        lax.bitwise_and(lax.lt(x, lax.full_like(x, 0)), lax.is_finite(x)),
        lax.bitwise_and(finite_y, lax.bitwise_not(integral)))
    result = lax.select(no_real_root, lax.full_like(p, jnp.nan), signed)
    minus_one_to_inf = lax.bitwise_and(lax.eq(x, lax.full_like(x, -1)),
                                       lax.eq(lax.abs(y), lax.full_like(y, jnp.inf)))
    one = lax.bitwise_or(
        lax.bitwise_or(lax.eq(y, lax.full_like(y, 0)), lax.eq(x, lax.full_like(x, 1))),
        minus_one_to_inf)
    return lax.select(one, lax.full_like(p, 1), result)


def _signbit(x):
    """Whether `x`'s sign bit is set (-0.0 and NaNs with the bit included)."""
    bits = jnp.dtype(f"int{jnp.dtype(x.dtype).itemsize * 8}")
    return lax.lt(lax.bitcast_convert_type(x, bits), lax.full(x.shape, 0, bits))


def _atan2(y, x, **params):
    ay, ax = lax.abs(y), lax.abs(x)
    inf_y, inf_x = lax.eq(ay, lax.full_like(ay, jnp.inf)), lax.eq(ax, lax.full_like(ax, jnp.inf))
    a = lax.atan2_p.bind(ay, ax, **params)
    a = lax.select(inf_x, lax.full_like(a, 0), a)
    a = lax.select(inf_y, lax.full_like(a, jnp.pi / 2), a)
    a = lax.select(lax.bitwise_and(inf_y, inf_x), lax.full_like(a, jnp.pi / 4), a)
    a = lax.select(lax.eq(ay, lax.full_like(ay, 0)), lax.full_like(a, 0), a)
    a = lax.select(_signbit(x), lax.sub(lax.full_like(a, jnp.pi), a), a)
    signed = lax.select(_signbit(y), lax.neg(a), a)
    either_nan = lax.bitwise_or(lax.ne(x, x), lax.ne(y, y))
    return lax.select(either_nan, lax.full_like(signed, jnp.nan), signed)


_RULE = into_control_flow(_rule)

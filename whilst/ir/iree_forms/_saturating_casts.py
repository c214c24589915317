"""Float-to-integer conversions that saturate, as XLA's do, for IREE 3.13.

XLA converts a float to an integer type by truncation toward zero, saturating
at the type's bounds and taking NaN to 0 (`jnp.float32(jnp.inf).astype(jnp.int32)`
is 2147483647). IREE 3.13 lets the hardware decide: on x86 every NaN, infinity
or out-of-range value becomes the bit pattern 0x80000000 (-2147483648 for int32,
0 for uint8). `saturating_casts(jaxpr)` rewrites each such conversion::

    x.astype(int_t)  ==  where(x > hi, max(int_t), where(x < lo, min(int_t),
                               convert(clip(where(isnan(x), 0, x), lo, hi))))

with `lo`, `hi` the floats nearest the bounds of `int_t` from inside (int32's
max 2**31 - 1 is not a float32: hi = 2**31 - 128).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr

from whilst.ir._rewrite import into_control_flow, rewrite_equations


def saturating_casts(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with its float-to-integer conversions in the form of the module
    docstring; the same object when it has none."""
    return rewrite_equations(jaxpr, _RULE, "saturating_casts")


def _rule(eqn):
    if eqn.primitive.name != "convert_element_type":
        return None
    source, target = eqn.invars[0].aval.dtype, eqn.params["new_dtype"]
    if jnp.issubdtype(source, jnp.floating) and jnp.issubdtype(target, jnp.integer):
        return _saturating
    return None


def _saturating(x, *, new_dtype, **params):
    info = np.iinfo(np.dtype(new_dtype))
    lo, hi = _inside(x.dtype, info.min, -1), _inside(x.dtype, info.max, 1)
    zeroed = lax.select(lax.ne(x, x), lax.full_like(x, 0), x)
    clipped = lax.clamp(lax.full_like(x, lo), zeroed, lax.full_like(x, hi))
    converted = lax.convert_element_type_p.bind(clipped, new_dtype=new_dtype, **params)
    return lax.select(lax.gt(zeroed, lax.full_like(x, hi)), lax.full_like(converted, info.max),
                      lax.select(lax.lt(zeroed, lax.full_like(x, lo)),
                                 lax.full_like(converted, info.min), converted))


def _inside(float_dtype, bound: int, sign: int):
    """The float of `float_dtype` nearest `bound` that lies between 0 and `bound`
    (or the largest finite float of that sign, when `bound` is beyond them all)."""
    float_dtype = np.dtype(float_dtype)
    finite = jnp.finfo(float_dtype).max
    with np.errstate(over="ignore"):
        value = np.array(bound, np.float64).astype(float_dtype)
    if not np.isfinite(value):
        return np.array(sign * finite, float_dtype)
    if abs(int(value)) > abs(bound):  # rounded away from zero: one step back
        bits = np.dtype(f"u{float_dtype.itemsize}")
        value = (value.view(bits) - np.array(1, bits)).view(float_dtype)
    return value


_RULE = into_control_flow(_rule)

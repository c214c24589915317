"""Stacks and concatenations of single lines, as elementwise selects.

IREE 3.13 writes each operand of a concatenation into its slice of the result, so
the elementwise code computing each operand becomes a dispatch of its own: a vector
field `jnp.stack([f0(y), f1(y)])` under `jax.vmap` (diffrax's Lotka-Volterra, per
Runge-Kutta stage of a batch of 1024 solves) ran as one dispatch per component,
each reading the lanes' state strided (`iree_limits/stacked_lines.mlir`).
`stacked_lines(jaxpr)` writes a `jnp.stack` of at most SELECTED_LINES operands (the
`stack` primitive), and a concatenation of as many that are one line thick along
its axis, of at most ONE_HOT_ELEMENTS elements in all, as selects of their
broadcasts, which IREE fuses with the code around them::

    stack([x_0, ..., x_{n-1}], axis)             # or a concatenate of x_k of size 1
        == select(iota(axis) == 0, broadcast(x_0),  # along axis
                  select(iota(axis) == 1, broadcast(x_1), ... broadcast(x_{n-1})))

(the same values, bit for bit). Ops inside the bodies of jax's cond, scan and while
are rewritten too; whilst's loops get these forms when they are lowered.
"""
from __future__ import annotations

import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr

from whilst._jax_compat import is_constant_shape
from whilst.ir._rewrite import into_control_flow, rewrite_equations
from whilst.ir._gpu_export import scaled
from whilst.ir.iree_forms._onehot import ONE_HOT_ELEMENTS, SELECTED_LINES


def stacked_lines(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with its stacks and concatenations of single lines as selects
    (module docstring); the same object when it has none."""
    return rewrite_equations(jaxpr, _RULE, "stacked_lines")


def _rule(eqn):
    name, lines = eqn.primitive.name, [v.aval for v in eqn.invars]
    if (name not in ("stack", "concatenate") or not 2 <= len(lines) <= SELECTED_LINES
            or not all(is_constant_shape(a.shape) for a in lines)
            or sum(a.size for a in lines) > scaled(ONE_HOT_ELEMENTS)):
        return None   # (large stacks stay copies: a select reads every line per element)
    if name == "stack":   # jnp.stack: lines inserted along `axis`
        axis = eqn.params["axis"]
    elif all(a.shape[eqn.params["dimension"]] == 1 for a in lines):
        axis = eqn.params["dimension"]
    else:
        return None
    return lambda *xs, **_: _selected(xs, axis, inserted=name == "stack")


def _selected(lines, axis, inserted):
    """The lines stacked along `axis` (`inserted`: a new axis, else an axis of size
    1 they have) by selects of their broadcasts."""
    shape = list(lines[0].shape)
    if inserted:
        shape.insert(axis, len(lines))
        dims = tuple(d for d in range(len(shape)) if d != axis)
    else:
        shape[axis] = len(lines)
        dims = tuple(range(len(shape)))
    line = lax.broadcasted_iota(np.int32, shape, axis)
    stacked = lax.broadcast_in_dim(lines[-1], shape, dims)
    for k in range(len(lines) - 2, -1, -1):
        stacked = lax.select(lax.eq(line, np.int32(k)),
                             lax.broadcast_in_dim(lines[k], shape, dims), stacked)
    return stacked


_RULE = into_control_flow(_rule)

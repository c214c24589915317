"""Primitives of other libraries that lower as a traced Python function, evaluated
as that function, so that the other export rewrites see the ops they lower to.

equinox's loop buffers, `select_if_vmap`, `unvmap_any` and others are primitives
whose lowering is `mlir.lower_fun(f)`: a jaxpr shows one opaque equation where the
module gets `f`'s ops. Its writes are scatters JAX leaves out of bounds in `drop`
mode (diffrax's Runge-Kutta stage buffer, `ks.at[stage].set(...)`), which IREE
3.13 runs past the buffer's end unless `_index_bounds` rewrites them; an unrolled
loop's predicated steps reach such indices::

    library_primitives_in_line(jaxpr)    # each such equation, of a module
        == jaxpr with  outs = prim.bind(*xs, **params)  ->  outs = f(*xs, **params)

JAX's and whilst's own primitives keep their equations (their lowerings and rules
are the ones the other rewrites expect).
"""
from __future__ import annotations

from jax.extend.core import ClosedJaxpr

from whilst._jax_compat import lowered_as_function
from whilst.ir._rewrite import into_control_flow, rewrite_equations

_KEPT = frozenset({"jax", "jaxlib", "whilst"})  # packages whose primitives stay whole


def library_primitives_in_line(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` in the form of the module docstring, repeated until no such
    equation is left (a function may bind another); the same object when it has none."""
    rewritten = rewrite_equations(jaxpr, _RULE, "library_primitives")
    return jaxpr if rewritten is jaxpr else library_primitives_in_line(rewritten)


def _rule(eqn):
    function = lowered_as_function(eqn.primitive)
    package = getattr(function, "__module__", None)  # None where unknown: kept whole
    return None if package is None or package.partition(".")[0] in _KEPT else function


_RULE = into_control_flow(_rule)

"""How many StableHLO ops one equation lowers to, for the primitives whose single
jaxpr equation becomes a long chain of ops: JAX writes the 20 rounds of threefry out,
about 100 ops for each `random_bits`, `random_split` or `random_fold_in` of a key.
The unrolling measure (`_unroll`) weighs them so: counted as one equation each, a
loop that splits a key and draws from it unrolled 17 steps, about 6000 ops."""
from __future__ import annotations

import functools

import jax

# Primitives weighed by what they lower to.
EXPANDING = frozenset({"random_bits", "random_split", "random_fold_in", "threefry2x32"})


def lowered_ops(eqn) -> int | None:
    """The ops of the module that `eqn` alone lowers to (its private functions
    included), for an EXPANDING primitive; None for any other."""
    if eqn.primitive.name not in EXPANDING:
        return None
    return _count(eqn.primitive, tuple(sorted(eqn.params.items())),
                  tuple(v.aval for v in eqn.invars))


@functools.cache
def _count(primitive, params, avals) -> int:
    from jax.extend.mlir import ir

    def bind(*args):
        return primitive.bind(*args, **dict(params))

    module = jax.jit(bind).lower(*[jax.ShapeDtypeStruct(a.shape, a.dtype)
                                   for a in avals]).compiler_ir("stablehlo")
    count = 0

    def visit(op):
        nonlocal count
        count += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return count

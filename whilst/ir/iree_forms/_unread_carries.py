"""Loop bodies that read every carry they overwrite.

IREE 3.13 crashes (ScfWhileOpConversion) on a loop that produces a carry the body
never reads, once the cond tests it (e.g. a residual norm recomputed from scratch
every step; `iree_limits/unread_loop_predicate.mlir` is the same crash for the
loop test)."""
from __future__ import annotations

from jax.extend.mlir import ir
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import partial_eval as pe

from whilst.ir._emit_ops import broadcast_scalar, const

# Tags the barrier that hides the counter (whilst's IREE preparation moves it out of
# the loop: `whilst.lowering._iree_carry_guards`).
GUARD_ATTR = "whilst.carry_guard"


def read_every_carry(body_jaxpr, n_inputs_before_counter, i, xs, new_xs):
    """Make the emitted body read each carry that `body` overwrites without reading:
    `new if opaque_i >= 0 else old`, with the loop counter `i` (never negative)
    hidden from folding by an optimization barrier tagged GUARD_ATTR.

    The barrier must not hold a constant: IREE 3.13 packs the loop's constant
    initial values into one allocation, and a barrier on one of them inside the
    loop makes it bind one buffer to several loop results, a module that fails on
    every call (`iree_limits/barrier_on_constant_init.mlir`)."""
    _, used = pe.dce_jaxpr(body_jaxpr.jaxpr, [True] * len(body_jaxpr.out_avals))
    unread = [not u for u in used[n_inputs_before_counter + 1:]]
    if not any(unread):
        return new_xs
    barrier = hlo.OptimizationBarrierOp([i])
    barrier.attributes[GUARD_ATTR] = ir.UnitAttr.get()
    (opaque,) = barrier.results
    keep_new = hlo.compare(opaque, const(0),
                           hlo.ComparisonDirectionAttr.get("GE"),
                           compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
    return [hlo.select(broadcast_scalar(keep_new, new.type), new, old) if u else new
            for u, new, old in zip(unread, new_xs, xs)]

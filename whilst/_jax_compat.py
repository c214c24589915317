"""The JAX internals whilst builds on, each with why no public hook serves.

Every `jax._src` import of the package is here; the rest of whilst imports
these names, or public `jax`, `jax.extend.*` and `jax.interpreters.*`.
Checked against jax 0.10.2 unless a line says otherwise.
"""
# The effects of a loop are those of its cond and body: no public join of effect sets.
from jax._src.core import join_effects
# Unrolling needs sizes known at trace time: no public test for symbolic dimensions.
from jax._src.core import is_constant_shape
# `def_impl` of a primitive with sub-jaxprs: no public "compile and run one primitive".
from jax._src.dispatch import apply_primitive
# List helpers every rule uses to split flat operand lists: not exported by jax.
from jax._src.util import merge_lists, partition_list, split_list
# jvp / linearize / transpose of sub-jaxprs and the linearize-rule registry:
# jax.interpreters.ad exports only the rule tables for jvp and transpose.
from jax._src.interpreters.ad import (
    backward_pass, jvp_jaxpr, linearize_jaxpr, primitive_linearizations)
# Batching a sub-jaxpr and moving a batch axis: not in jax.interpreters.batching.
from jax._src.interpreters.batching import batch_jaxpr, moveaxis
# Rewriting sub-jaxprs (forwarded outputs, binder order, pruning, closing):
# not in jax.interpreters.partial_eval.
from jax._src.interpreters.partial_eval import (
    _jaxpr_forwarding as jaxpr_forwarding, close_jaxpr, convert_constvars_jaxpr,
    move_binders_to_front, prune_closed_jaxpr_outputs)
# Lowering helpers for a sub-jaxpr's constants and a broadcast: not in
# jax.interpreters.mlir.
from jax._src.interpreters.mlir import broadcast_in_dim, ir_consts
# Debug info for jaxprs traced by rules (required by lu.wrap_init): no public builder.
from jax._src.api_util import debug_info
# Hoisting loop-invariant residuals, shared with lax.scan's partial evaluation:
# no public equivalent.
from jax._src.lax.control_flow.loops import _scan_known_hoisting as scan_known_hoisting

__all__ = [
    "apply_primitive", "backward_pass", "batch_jaxpr", "broadcast_in_dim", "close_jaxpr",
    "convert_constvars_jaxpr", "debug_info", "ir_consts", "is_constant_shape",
    "jaxpr_forwarding", "join_effects", "jvp_jaxpr", "linearize_jaxpr", "merge_lists",
    "move_binders_to_front", "moveaxis", "partition_list", "primitive_linearizations",
    "prune_closed_jaxpr_outputs", "scan_known_hoisting", "split_list",
]

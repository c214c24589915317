"""Reverse mode of `functional_while_p`: the one place that chooses how a loop's
steps are kept for its gradient While::

    if the loop pushes or pops rows itself (reverse mode of a gradient, or of a
    forward While with accumulators):
        the same, on its explicit form (_stacks.py)
    elif checkpoints is None:  # every step's residuals, in stacks of static_bound rows
        stored_linearize(...)          # _reverse.py
    else:                      # K copies of the carry, steps recomputed between them
        checkpointed_linearize(...)    # _checkpoint.py
"""
from __future__ import annotations

import jax
from jax.interpreters.ad import Zero

from whilst._jax_compat import def_linearization
from whilst.ir._checkpoint import checkpointed_linearize
from whilst.ir._functional_while import functional_while_p
from whilst.ir._reverse import stored_linearize
from whilst.ir._stacks import NO_STACKS, StackParams, explicit_form


def _linearize_rule(is_vjp, nzs, *primals, **params):
    if StackParams.of(params).any:
        operands, params = explicit_form(primals, params)
        new_stacks = operands[len(primals):]
        out, out_nz, residuals, linearized = _linearize_rule(
            is_vjp, [*nzs, *[False] * len(new_stacks)], *operands, **params)
        stack_zeros = [Zero(jax.typeof(s).to_tangent_aval()) for s in new_stacks]
        return out, out_nz, residuals, lambda res, *t: linearized(res, *t, *stack_zeros)
    params = {k: v for k, v in params.items() if k not in NO_STACKS}
    if params["checkpoints"] is None:
        del params["checkpoints"]
        return stored_linearize(is_vjp, nzs, *primals, **params)
    return checkpointed_linearize(nzs, *primals, **params)


def_linearization(functional_while_p, _linearize_rule)

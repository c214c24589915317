"""Reverse mode of `functional_while_p`: the one dispatch on a loop's gradient
policy (`_policy.py`)::

    if the loop pushes or pops rows itself (reverse mode of a gradient, or of a
    forward While with accumulators):
        the same, on its explicit form (_stacks.py), with EveryStep() for a loop
        that pushes and has a static bound: it stored every step's rows, which its
        next rows are in proportion to, and chunks of it would checkpoint its stacks
    elif policy is Inlined(steps) (a few steps, known at trace time):
        inlined_linearize(...)               # _inlined.py: straight-line steps
    elif policy stores every step (`stores_every_step`: EveryStep(), Checkpointed(K) with
            K >= static_bound, or static_bound rows of residuals fit in Budget(nbytes)):
        stored_linearize(...)                # _stored.py: every step's residuals
    elif policy is Checkpointed(K):
        checkpointed_linearize(...)          # _checkpointed.py, policy.copies(carry) copies
    else:                          # chunks of as many steps as fit, checkpoints between them
        budget_linearize(...)                # _budget.py, in a budget that shrinks
                                             # under each further linearization
"""
from __future__ import annotations

import jax
from jax.interpreters.ad import Zero

from whilst._jax_compat import linearization_depth
from whilst.ir._unroll import total_nbytes
from whilst.ir.reverse._budget import budget_linearize, budget_split
from whilst.ir.reverse._checkpointed import checkpointed_linearize
from whilst.ir.reverse._inlined import inlined_linearize
from whilst.ir.reverse._stored import step_residuals, stored_linearize
from whilst.ir.reverse._policy import Checkpointed, EveryStep, Inlined, stores_every_step
from whilst.ir._stacks import NO_STACKS, StackParams, explicit_form, explicit_layout
from whilst.ir._tracing import tracing_for


def functional_while_linearization(is_vjp, nzs, *primals, **params):
    """The rule, for a loop differentiated in reverse mode as many more times as
    linearizations trace its primals or the code around it (`tracing_for`)."""
    with tracing_for(max(map(linearization_depth, primals), default=0)) as to_come:
        return _linearization(to_come, is_vjp, nzs, *primals, **params)


def _linearization(to_come, is_vjp, nzs, *primals, **params):
    """The rule, for a loop differentiated `to_come` more times in reverse mode."""
    if StackParams.of(params).any:
        operands, new_params = explicit_form(primals, params)
        if params["accumulators"] and params["static_bound"] is not None:
            new_params["gradient"] = EveryStep()
        new_stacks = operands[len(operands) - params["accumulators"]:]
        out, out_nz, residuals, linearized = _linearization(
            to_come, is_vjp, explicit_layout(params, nzs, [False] * len(new_stacks)),
            *operands, **new_params)
        stack_zeros = [Zero(jax.typeof(s).to_tangent_aval()) for s in new_stacks]
        return out, out_nz, residuals, lambda res, *t: linearized(
            res, *explicit_layout(params, t, stack_zeros))
    params = {k: v for k, v in params.items() if k not in NO_STACKS}
    policy, static_bound = params["gradient"], params["static_bound"]
    if isinstance(policy, Inlined):
        return inlined_linearize(is_vjp, nzs, *primals, **params)
    if isinstance(policy, Checkpointed) and not stores_every_step(policy, static_bound):
        del params["gradient"]
        carry_avals = params["body_jaxpr"].in_avals[params["body_nconsts"] + 1:]
        return checkpointed_linearize(nzs, *primals, **params,
                                      checkpoints=policy.copies(total_nbytes(carry_avals)),
                                      nbytes=policy.nbytes)
    steps = step_residuals(is_vjp, nzs, *primals, **params)
    if stores_every_step(policy, static_bound, steps.row_bytes):
        return stored_linearize(steps, *primals, **params)
    carry_avals = params["body_jaxpr"].in_avals[params["body_nconsts"] + 1:]
    chunk_rows, K = budget_split(policy.nbytes, carry_avals, steps, to_come, static_bound)
    return budget_linearize(nzs, steps, chunk_rows, K, *primals, **params)

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
    elif the operands are values (eagerly, `_by_value`) and the policy is the user's:
        if it ends within the steps inlined (not under jax.vmap):
            inlined_linearize_by_value(...)  # _inlined.py: the steps on the values,
                                             # counted as they run
        else:
            n = the loop's trip count from them  # it runs once more, as a value
                                                 # (under jax.vmap: its lanes' most)
            if inlined_policy(policy, n, ...) inlines (and every lane takes n):
                inlined_linearize_by_value(...)
            else: the same, with bound = static_bound = n
    elif policy is Budget(nbytes) and a step keeps no rows (no bound):
        stored_linearize(...)                # _stored.py, no stacks: nothing to chunk
    elif policy is Checkpointed(K):
        checkpointed_linearize(...)          # _checkpointed.py, policy.copies(carry) copies
    else:
        if no further derivative is to come and keeping the step's inputs in place of
                its rows pays (`carried_rows`, _carried_rows.py: rows that cost
                computation of their own, recomputed in the gradient's step):
            steps = carried_rows(steps)      # stored_linearize if their rows fit
        if more derivatives are to come, a chunk holds rows (S > 0) and the loop has
                no effects (its test at the head's end would run once more):
            headed_linearize(...)            # _headed.py: a stored head, the rest in
                                             # the budget's chunks under a lax.cond
        else:
            budget_linearize(...)            # _budget.py: chunks of as many steps as
                                             # fit, checkpoints between them, in a budget
                                             # that shrinks under each further linearization
"""
from __future__ import annotations

from contextlib import nullcontext

import jax
import numpy as np
from jax import lax
from jax.interpreters.ad import Zero

from whilst._jax_compat import concrete_batch, linearization_depth
from whilst.ir._functional_while import functional_while_p, loops_stepped_first, split_operands
from whilst.ir._unroll import total_nbytes
from whilst.ir.reverse._budget import budget_linearize, budget_split
from whilst.ir.reverse._carried_rows import carried_rows
from whilst.ir.reverse._checkpointed import checkpointed_linearize
from whilst.ir.reverse._headed import head_steps, headed_linearize
from whilst.ir.reverse._inlined import (
    inlined_linearize, inlined_linearize_by_value, inlined_policy, most_inlined_steps)
from whilst.ir.reverse._stored import step_residuals, stored_linearize
from whilst.ir.reverse._policy import (
    Budget, Checkpointed, EveryStep, Inlined, stores_every_step)
from whilst.ir._stacks import NO_STACKS, StackParams, explicit_form, explicit_layout
from whilst.ir._tracing import tracing_for


def functional_while_linearization(is_vjp, nzs, *primals, **params):
    """The rule, for a loop differentiated in reverse mode as many more times as
    linearizations trace its primals or the code around it (`tracing_for`)."""
    with tracing_for(max(map(linearization_depth, primals), default=0)) as to_come:
        return _linearization(to_come, is_vjp, nzs, *primals, **params)


def _linearization(to_come, is_vjp, nzs, *primals, by_value=True, **params):
    """The rule, for a loop differentiated `to_come` more times in reverse mode
    (`by_value`: whether it may take the loop's trip count from values)."""
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
    loop = params
    params = {k: v for k, v in params.items() if k not in NO_STACKS}
    policy, static_bound = params["gradient"], params["static_bound"]
    if isinstance(policy, Inlined):
        return inlined_linearize(is_vjp, nzs, *primals, **params)
    if isinstance(policy, Checkpointed) and not stores_every_step(policy, static_bound):
        if by_value and (batch := _by_value(primals, params)):
            return _bounded_linearization(to_come, is_vjp, nzs, primals, batch, loop)
        del params["gradient"]
        carry_avals = params["body_jaxpr"].in_avals[params["body_nconsts"] + 1:]
        return checkpointed_linearize(nzs, *primals, **params,
                                      checkpoints=policy.copies(total_nbytes(carry_avals)),
                                      nbytes=policy.nbytes)
    steps = None   # traced where needed: a loop bounded by its values does not use them
    if static_bound is not None:
        steps = step_residuals(is_vjp, nzs, *primals, **params)
        if stores_every_step(policy, static_bound, steps.row_bytes):
            return stored_linearize(steps, *primals, **params)
    if by_value and (batch := _by_value(primals, params)):
        return _bounded_linearization(to_come, is_vjp, nzs, primals, batch, loop)
    if steps is None:
        steps = step_residuals(is_vjp, nzs, *primals, **params)
        if stores_every_step(policy, static_bound, steps.row_bytes):   # steps keep no rows
            return stored_linearize(steps, *primals, **params)
    carry_avals = params["body_jaxpr"].in_avals[params["body_nconsts"] + 1:]
    if not to_come and (carried := carried_rows(steps, len(carry_avals))):
        steps = carried
        if stores_every_step(policy, static_bound, steps.row_bytes):
            return stored_linearize(steps, *primals, **params)
    chunk_rows, K = budget_split(policy.nbytes, carry_avals, steps, to_come)
    if (to_come and chunk_rows and not policy.tail
            and not (params["cond_jaxpr"].effects or params["body_jaxpr"].effects)):
        return headed_linearize(is_vjp, nzs, head_steps(chunk_rows, steps.row_bytes), *primals,
                                **params)
    return budget_linearize(nzs, steps, chunk_rows, K, *primals, **params)


def _by_value(primals, params) -> tuple[list, list] | None:
    """`concrete_batch(primals)` where the loop's trip count can be taken from its
    operands, else None: they are values (eagerly, seen through the tracers of further
    derivatives, `jax.grad(jax.grad(f))`, and of one `jax.vmap`), its policy is the
    user's (`Budget` or `Checkpointed(K)`, not those of the loops reverse mode builds)
    and its cond and body have no effects (the loop runs once more)."""
    policy = params["gradient"]
    users = isinstance(policy, Budget) or (
        type(policy) is Checkpointed and policy.nbytes is None and not policy.over_chunks)
    if not users or params["cond_jaxpr"].effects or params["body_jaxpr"].effects:
        return None
    return concrete_batch(primals)


def _bounded_linearization(to_come, is_vjp, nzs, primals, batch, params):
    """The rule for the same loop bounded by the n steps it takes from `primals`
    (values: `batch`, `_by_value`'s; under `jax.vmap`, the most steps of a lane): inlined and
    counted as its steps are linearized where it ends within the steps inlined (not
    batched), else counted first::

        n = functional_while(*primals)[0]
        bound = min(bound, n); static_bound = n
        gradient = inlined_policy(gradient, n, cond, body)   # Inlined(n) where small,
                                                             # and every lane takes n

    so reverse mode linearizes n steps: inlined (linearized on the values, so that
    loops in the body see values too), or stored where their rows fit the budget (a
    `Checkpointed(K)` with K >= n stores), and chunks of one length otherwise, as for a
    loop bounded at trace time, with no schedule for steps past them."""
    cond_jaxpr, body_jaxpr = params["cond_jaxpr"], params["body_jaxpr"]
    _, dims = batch
    counted = all(d is None for d in dims) and isinstance(
        inlined_policy(params["gradient"], most_inlined_steps(body_jaxpr), cond_jaxpr,
                       body_jaxpr), Inlined)
    if counted:
        inlined = inlined_linearize_by_value(nzs, *primals, **params)
        if inlined is not None:   # it ended within the steps inlined
            return inlined
    trips, every_lane = _trips(batch, params, stepped_first=not counted)
    cond_consts, body_consts, bound, carry = split_operands(
        primals, params["cond_nconsts"], params["body_nconsts"])
    gradient = params["gradient"]
    if every_lane:
        gradient = inlined_policy(gradient, trips, cond_jaxpr, body_jaxpr)
    if isinstance(gradient, Inlined):
        return inlined_linearize_by_value(nzs, *primals, **dict(params, gradient=gradient))
    bound = np.int32(trips) if every_lane else lax.min(bound, np.int32(trips))
    return _linearization(to_come, is_vjp, nzs, *cond_consts, *body_consts, bound,
                          *carry, by_value=False,
                          **dict(params, static_bound=trips, gradient=gradient))


def _trips(batch, params, stepped_first=True) -> tuple[int, bool]:
    """`(n, every_lane)`: the steps the loop takes from its operands' values and batch
    axes (`batch`: `concrete_batch`'s), the most
    of any lane under `jax.vmap`, and whether every lane takes n. `stepped_first`
    (the loop is not known to run past them): within `loops_stepped_first`, the loop
    and those in its body are stepped op by op while they may still end within the
    steps `inlined_policy` inlines, so that no program is compiled where they do,
    else run as one program."""
    values, dims = batch

    def trips(*operands):
        return functional_while_p.bind(*operands, **params)[0]

    stepped = loops_stepped_first(most_inlined_steps) if stepped_first else nullcontext()
    with jax.ensure_compile_time_eval(), stepped:
        batched = any(d is not None for d in dims)
        lanes = np.asarray(jax.vmap(trips, in_axes=dims)(*values) if batched else trips(*values))
    n = int(lanes.max(initial=0))
    return n, bool((lanes == n).all())

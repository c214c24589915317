"""`jax.experimental.checkify` of the functional While: run-time errors from loops.

The error state (`checkify.Error`'s arrays) becomes extra carries of a new
functional While, and the cond's errors count only where whilst evaluates the
cond (`while i < bound and cond(...)`), as plain Python::

    error = error with a placeholder for every error the cond or body may raise
    if 0 < bound:
        error, go = checked_cond(error, *cond_consts, 0, *carry)
    i = 0
    while i < bound and cond(*cond_consts, i, *carry):
        error, carry = checked_body(error, *body_consts, i, *carry)
        if i + 1 < bound:
            error, _ = checked_cond(error, *cond_consts, i + 1, *carry)
        i += 1
    return error, (i, *carry)

A loop in which nothing can fail (no check of the enabled kinds) stays as it is.

Loops with residual stacks are checked in their `explicit_form`. A loop that
`jax.vmap` batched with per-example trip counts (and the loops of its derivatives)
runs its body on finished examples too, whose errors would be false: such loops
are refused where their cond or body can raise an error (JAX refuses
`checkify(vmap(while_loop))` too); `vmap(checkify(f))` gives per-example errors.
"""
from __future__ import annotations

import jax
import numpy as np
from jax import lax
from jax.experimental import checkify

from whilst._jax_compat import (
    checkify_context, checkify_jaxpr, error_effects, split_list, with_error_effects)
from whilst.ir._functional_while import (
    PerLaneName, functional_while, functional_while_p, split_operands)
from whilst.ir._stacks import StackParams, explicit_form
from whilst.ir._tracing import COUNTER_AVAL, trace_closed


def functional_while_error_check(ctx, error, enabled_errors, *operands, **params):
    """The checkify rule of `functional_while_p` (module docstring)."""
    unchecked = operands, params
    if StackParams.of(params).any:
        operands, params = explicit_form(operands, params)
    cond_jaxpr, body_jaxpr = params["cond_jaxpr"], params["body_jaxpr"]
    ncc, nbc = params["cond_nconsts"], params["body_nconsts"]
    cond_consts, body_consts, bound, carry = split_operands(operands, ncc, nbc)
    carry_avals = [jax.typeof(x) for x in carry]
    const_avals = [jax.typeof(x) for x in [*cond_consts, *body_consts, bound]]

    def checked_step(ctx, error, cconsts, bconsts, bound, i, xs):
        error, xs = checkify_jaxpr(ctx, body_jaxpr, enabled_errors, error, *bconsts, i, *xs)
        after, _ = checkify_jaxpr(ctx, cond_jaxpr, enabled_errors, error, *cconsts, i + 1, *xs)
        return _select_error(i + 1 < bound, after, error), xs

    # Every error the loop may raise, from a throwaway context (no codes used).
    effects = set()

    def collect_effects(*args):
        cconsts, bconsts, (bound, i), xs = split_list(args, [ncc, nbc, 2])
        step_error, xs = checked_step(checkify_context(), checkify.init_error, cconsts, bconsts,
                                      bound, i, xs)
        effects.update(error_effects(step_error))
        return xs

    trace_closed(collect_effects, [*const_avals, COUNTER_AVAL, *carry_avals],
                 "functional_while_error_effects")
    if effects and isinstance(params["name"], PerLaneName):
        raise ValueError(
            f"checkify of whilst loop {params['name']!r} under jax.vmap with a trip count "
            f"per example: the batched body also runs on the examples that have finished, "
            f"whose errors would be false. Move the vmap to the outer level: "
            f"jax.vmap(checkify.checkify(f)) gives one error per example.")
    if not effects:  # nothing in the loop can fail
        operands, params = unchecked
        return error, functional_while_p.bind(*operands, **params)
    error = with_error_effects(error, effects)
    first, _ = checkify_jaxpr(ctx, cond_jaxpr, enabled_errors, error, *cond_consts,
                              np.int32(0), *carry)
    error = _select_error(0 < bound, first, error)
    err_vals, err_tree = jax.tree_util.tree_flatten(error)
    nerr = len(err_vals)
    out_trees = []

    def body(*args):
        cconsts, bconsts, (bound, i), errs, xs = split_list(args, [ncc, nbc, 2, nerr])
        step_error, xs = checked_step(ctx, jax.tree_util.tree_unflatten(err_tree, errs),
                                      cconsts, bconsts, bound, i, xs)
        errs, tree = jax.tree_util.tree_flatten(step_error)
        out_trees.append(tree)
        return [*errs, *xs]

    def cond(*args):
        cconsts, (i,), errs, xs = split_list(args, [ncc, 1, nerr])
        _, go = checkify_jaxpr(checkify_context(), cond_jaxpr, enabled_errors,
                               jax.tree_util.tree_unflatten(err_tree, errs), *cconsts, i, *xs)
        return go

    err_avals = [jax.typeof(e) for e in err_vals]
    new_body = trace_closed(body, [*const_avals, COUNTER_AVAL, *err_avals, *carry_avals],
                            "functional_while_checked_body")
    new_cond = trace_closed(cond, [*cond_jaxpr.in_avals[:ncc], COUNTER_AVAL, *err_avals,
                                   *carry_avals], "functional_while_checked_cond")
    loop_params = {k: v for k, v in params.items()
                   if k not in ("cond_jaxpr", "body_jaxpr", "cond_nconsts", "body_nconsts")}
    counter, *outs = functional_while(
        cond_consts, [*cond_consts, *body_consts, bound], bound, [*err_vals, *carry],
        cond_jaxpr=new_cond, body_jaxpr=new_body, **loop_params)
    errs, carry_out = split_list(outs, [nerr])
    return jax.tree_util.tree_unflatten(out_trees[0], errs), [counter, *carry_out]


def _select_error(pred, on_true, on_false):
    """`on_true if pred else on_false`, where `on_true` was computed from `on_false`
    (it has its effects and knows its codes' messages, perhaps more)."""
    true_vals, tree = jax.tree_util.tree_flatten(on_true)
    false_vals = jax.tree_util.tree_leaves(with_error_effects(on_false, error_effects(on_true)))
    return jax.tree_util.tree_unflatten(
        tree, [lax.select(pred, t, f) for t, f in zip(true_vals, false_vals)])

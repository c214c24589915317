"""Partial evaluation of `functional_while_p`: what `jax.checkpoint` (`jax.remat`) needs.

Differentiating `jax.checkpoint(f)` takes f's jvp apart into a known (primal) and
an unknown (tangent) part, and its transpose takes the staged part apart again,
with JAX's two partial evaluators. A loop whose operands are partly unknown is
split as `jax.lax.while_loop` splits it::

    # known: the loop cut down to the carries that depend on known operands only
    known_out = while_(known_cond, known_body, known_operands)
    # staged: the whole loop, recomputed from its operands (the known ones
    # become residuals); its unknown outputs are the loop's unknown outputs
    unknown_out = while_(cond, body, operands)

No per-step residuals are saved, whatever the checkpoint policy: the staged loop
recomputes the known carries, which is what remat asks for. When the predicate
or the bound is unknown, the whole loop is staged; remat stages a loop with known
operands only as well (recomputed where its staged jaxpr reads it).

The staged loop is linear in its unknown (tangent) operands, so transposing it
is the vjp of that linear map: reverse mode of the loop (`reverse/_linearization.py`), as
it is without remat.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.core import ClosedJaxpr, Var, new_jaxpr_eqn
from jax.interpreters import ad
from jax.interpreters import partial_eval as pe
from jax.interpreters.ad import Zero

from whilst._jax_compat import (
    join_effects, merge_lists, partial_eval_jaxpr_nounits, partition_list, split_list)
from whilst.ir._functional_while import functional_while_p
from whilst.ir._stacks import StackParams


def _known_jaxpr(jaxpr, unknowns, instantiate):
    """`(known, out_unknowns)`: `known` computes the outputs of `jaxpr` that
    depend on known inputs only (and are not in `instantiate`), from those inputs."""
    known, _, out_unknowns, _ = partial_eval_jaxpr_nounits(jaxpr, unknowns, instantiate)
    n_known = out_unknowns.count(False)
    used = [k < n_known for k in range(len(known.out_avals))]  # residuals dropped
    pruned, _ = pe.dce_jaxpr(known.jaxpr, used, instantiate=True)
    return ClosedJaxpr(pruned, known.consts), out_unknowns


def _known_loop(unknowns, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, **params):
    """`(operand_unknowns, out_unknowns, known_params)` of the loop over the known
    operands that computes the known outputs, or None when none can be split off
    (predicate or bound unknown, residual stacks). A carry is unknown when its
    initial value is, or when the body makes it depend on an unknown value."""
    cc_uk, bc_uk, (bound_uk,), carry_uk = split_list(
        list(unknowns), [cond_nconsts, body_nconsts, 1])
    if bound_uk or StackParams.of(params).any:
        return None
    for _ in range(len(carry_uk) + 1):
        body_known, carry_out_uk = _known_jaxpr(
            body_jaxpr, [*bc_uk, False, *carry_uk], instantiate=carry_uk)
        if carry_out_uk == carry_uk:
            break
        carry_uk = carry_out_uk
    else:
        raise AssertionError("no fixed point of the unknown carries")
    cond_known, (pred_uk,) = _known_jaxpr(cond_jaxpr, [*cc_uk, False, *carry_uk], False)
    if pred_uk:
        return None
    known_params = dict(params, cond_jaxpr=cond_known, body_jaxpr=body_known,
                        cond_nconsts=cc_uk.count(False), body_nconsts=bc_uk.count(False))
    return [*cc_uk, *bc_uk, False, *carry_uk], [False, *carry_uk], known_params


def functional_while_partial_eval(trace, *tracers, **params):
    """Partial evaluation by `JaxprTrace` (remat's transpose splits its staged jaxpr
    with it)."""
    unknowns = [not t.pval.is_known() for t in tracers]
    split = _known_loop(unknowns, **params) if any(unknowns) else None
    if split is None:
        return trace.default_process_primitive(functional_while_p, tracers, params)
    in_uk, out_uk, known_params = split
    known_out = functional_while_p.bind(
        *[t.pval.get_known() for t, uk in zip(tracers, in_uk) if not uk], **known_params)
    staged = trace.default_process_primitive(functional_while_p, tracers, params)
    return merge_lists(out_uk, known_out, [t for t, uk in zip(staged, out_uk) if uk])


def functional_while_partial_eval_custom(saveable, unks_in, inst_in, eqn):
    """Partial evaluation of a jaxpr's equation (remat splits f's jvp with it):
    `(known eqn, staged eqn, out_unknowns, out_instantiated, new residuals)`."""
    del saveable  # no step's values are saved (see the module docstring)
    n_out = len(eqn.outvars)
    new_inst = [x for x, inst in zip(eqn.invars, inst_in) if type(x) is Var and not inst]
    if not any(unks_in):
        return eqn, eqn, [False] * n_out, [True] * n_out, new_inst
    split = _known_loop(unks_in, **eqn.params)
    if split is None:
        return None, eqn, [True] * n_out, [True] * n_out, new_inst
    in_uk, out_uk, known_params = split
    eqn_known = new_jaxpr_eqn(
        [x for x, uk in zip(eqn.invars, in_uk) if not uk],
        [v for v, uk in zip(eqn.outvars, out_uk) if not uk],
        functional_while_p, known_params,
        join_effects(known_params["cond_jaxpr"].effects, known_params["body_jaxpr"].effects),
        eqn.source_info, eqn.ctx)
    return eqn_known, eqn, out_uk, [True] * n_out, new_inst


def functional_while_transpose(cts, *operands, **params):
    """The transpose of a loop that is linear in its undefined operands (the
    staged loop above, in remat's backward pass): the vjp of that linear map,
    taken at zero."""
    linear = [ad.is_undefined_primal(x) for x in operands]
    given = [type(ct) is not Zero for ct in cts]
    fixed, lin = partition_list(linear, list(operands))
    if not any(given):
        return merge_lists(linear, [None] * len(fixed), [Zero(x.aval) for x in lin])

    def linear_map(*lin_operands):
        outs = functional_while_p.bind(*merge_lists(linear, fixed, list(lin_operands)),
                                       **params)
        return [o for o, g in zip(outs, given) if g]

    _, vjp = jax.vjp(linear_map, *[jnp.zeros(x.aval.shape, x.aval.dtype) for x in lin])
    ct_lin = vjp([ct for ct, g in zip(cts, given) if g])
    return merge_lists(linear, [None] * len(fixed), list(ct_lin))


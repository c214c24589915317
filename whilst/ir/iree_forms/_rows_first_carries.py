"""Loop carries written along an inner dimension, carried with that dimension first.

IREE 3.13 scatters along an operand's leading dimensions only: it transposes a
scatter's operand to put the scattered dimension first and the result back. In a
loop body that writes rows of a carry along an inner dimension (`jax.vmap` of
`ks.at[stage].set(k)`, diffrax's Runge-Kutta stage buffer: a [batch, stages,
state] carry written at [:, stage]), those two transposes of the whole carry
cannot leave the loop: a batch of 1024 Tsit5 solves spent a third of its
dispatch time in them (`iree_limits/inner_axis_scatter_in_loop.mlir`).
`rows_first_carries(jaxpr)` carries such a carry with the written dimension
first instead, and writes it there::

    functional_while(cond, body, xs)            # body: x_j = scatter(x_j, (d,), ...)
        == [..., moveaxis(x_j, 0, d), ...] of
           functional_while(cond', body', [..., moveaxis(x_j, d, 0), ...])
           # body': x_j = scatter(x_j, (0,), ...); other reads see moveaxis(x_j, 0, d)

A carry qualifies when its body output is its input through a chain of scatters
(and copies) that all write one inner dimension d (`scatter_dims_to_operand_dims
== inserted_window_dims == (d,)`, no batching dimensions); the dimensions other
than d keep their order, so the scatters' windows and updates stay as they are.
Only loops without residual stacks are rewritten (exports run after
differentiation; reverse mode's loops index their stacks by row already).
"""
from __future__ import annotations

import jax
from jax import lax
from jax.extend.core import ClosedJaxpr
from jax.interpreters import partial_eval as pe

from whilst._jax_compat import split_list
from whilst.ir._rewrite import evaluate, rewrite_equations
from whilst.ir.iree_forms._library_primitives import library_primitives_in_line
from whilst.ir._tracing import trace_closed

# Scatters whose windows a permutation of the operand's other dimensions keeps.
_SCATTERS = frozenset({"scatter", "scatter-add", "scatter_add", "scatter-mul", "scatter_mul",
                       "scatter-min", "scatter_min", "scatter-max", "scatter_max"})
_COPIES = frozenset({"copy", "copy_p"})


def rows_first_carries(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with its functional Whiles' carries written along an inner dimension
    in the form of the module docstring; the same object when it has none."""
    return rewrite_equations(jaxpr, _rule, "rows_first_carries")


def _rule(eqn):
    params = eqn.params
    if (eqn.primitive.name != "functional_while" or params["accumulators"]
            or params["pops"] or all(a.ndim < 2 for a in params["body_jaxpr"].out_avals)):
        return None   # (an inner dimension needs two)
    body = _in_line(params["body_jaxpr"])
    ncarry = len(body.out_avals)
    dims = _written_dims(body.jaxpr, len(body.in_avals) - ncarry)
    if not dims:
        return None
    return lambda *operands, **_: _permuted_loop(eqn.primitive, operands, params, body, dims)


def _in_line(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with its jit and custom-rule calls and other libraries' primitives
    (equinox's loop buffers) evaluated in line, as the export sees them."""
    jaxpr = library_primitives_in_line(jaxpr)
    return trace_closed(lambda *args: evaluate(jaxpr, lambda eqn: None, *args),
                        jaxpr.in_avals, "in_line")


def _scattered_dim(eqn) -> int | None:
    """The inner dimension d > 0 a scatter writes (`(d,)` scattered and inserted,
    no batching dimensions), or None."""
    if eqn.primitive.name not in _SCATTERS:
        return None
    dn = eqn.params["dimension_numbers"]
    dims = tuple(dn.scatter_dims_to_operand_dims)
    if (len(dims) != 1 or dims[0] == 0 or tuple(dn.inserted_window_dims) != dims
            or dn.operand_batching_dims):
        return None
    return int(dims[0])


def _written_dims(body, first_carry: int) -> dict[int, int]:
    """`{j: d}`: the carries whose body output is their input through scatters
    writing dimension d > 0 (at least one) and copies."""
    written = {}
    for j, (v, out) in enumerate(zip(body.invars[first_carry:], body.outvars)):
        d, reached = None, {id(v)}
        for eqn in body.eqns:
            if not eqn.invars or id(eqn.invars[0]) not in reached:
                continue
            if eqn.primitive.name in _COPIES:
                reached.add(id(eqn.outvars[0]))
                continue
            dim = _scattered_dim(eqn)
            if dim is not None and d in (None, dim):
                d = dim
                reached.add(id(eqn.outvars[0]))
        if d is not None and id(out) in reached:
            written[j] = d
    return written


def _to_front(d: int, ndim: int) -> tuple[int, ...]:
    return (d, *(a for a in range(ndim) if a != d))


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(range(len(perm)), key=perm.__getitem__))


def _permuted_loop(primitive, operands, params, body, dims):
    """The loop's results, computed by the loop of the module docstring."""
    cond = params["cond_jaxpr"]
    ncc, nbc = params["cond_nconsts"], params["body_nconsts"]
    ncarry = len(body.out_avals)
    perms = {j: _to_front(d, body.out_avals[j].ndim) for j, d in dims.items()}
    head, carry = split_list(list(operands), [len(operands) - ncarry])
    carry = [lax.transpose(x, perms[j]) if j in perms else x for j, x in enumerate(carry)]
    carry_avals = [jax.typeof(x) for x in carry]
    new_cond = _dce(trace_closed(
        lambda *args: _call_permuted(cond, args, ncc + 1, perms),
        [*cond.in_avals[:ncc + 1], *carry_avals], "rows_first_cond"))
    new_body = _dce(trace_closed(
        lambda *args: _call_permuted(body, args, nbc + 1, perms, permuted_outputs=True),
        [*body.in_avals[:nbc + 1], *carry_avals], "rows_first_body"))
    counter, *outs = primitive.bind(*head, *carry, **dict(params, cond_jaxpr=new_cond,
                                                          body_jaxpr=new_body))
    return [counter, *(lax.transpose(x, _inverse(perms[j])) if j in perms else x
                       for j, x in enumerate(outs))]


def _call_permuted(jaxpr, args, first_carry, perms, permuted_outputs=False):
    """`jaxpr` on carries given with `perms` applied: scatters of a carry in that
    layout write it there (`_scattered_dim`), other reads see it as `jaxpr` does;
    with `permuted_outputs`, output j is returned with `perms[j]` applied."""
    head, carry = split_list(list(args), [first_carry])
    layout = {}  # id(value as jaxpr sees it) -> (that value, it in a permuted layout, perm)

    def seen_as(x_permuted, perm):
        x = lax.transpose(x_permuted, _inverse(perm))
        layout[id(x)] = (x, x_permuted, perm)
        return x

    def rule(eqn):
        if eqn.primitive.name in _COPIES:
            def copy(x, **params):
                if id(x) not in layout:
                    return eqn.primitive.bind(x, **params)
                _, x_permuted, perm = layout[id(x)]
                return seen_as(eqn.primitive.bind(x_permuted, **params), perm)
            return copy
        d = _scattered_dim(eqn)
        if d is None:
            return None

        def scatter(operand, indices, updates, **params):
            _, x_permuted, perm = layout.get(id(operand), (None, None, None))
            if perm is None or perm[0] != d:
                return eqn.primitive.bind(operand, indices, updates, **params)
            dn = params["dimension_numbers"]._replace(inserted_window_dims=(0,),
                                                      scatter_dims_to_operand_dims=(0,))
            written = eqn.primitive.bind(x_permuted, indices, updates,
                                         **dict(params, dimension_numbers=dn))
            return seen_as(written, perm)
        return scatter

    inputs = [seen_as(x, perms[j]) if j in perms else x for j, x in enumerate(carry)]
    outs = evaluate(jaxpr, rule, *head, *inputs)
    if not permuted_outputs:
        return outs
    return [_permuted(x, perms[j], layout) if j in perms else x for j, x in enumerate(outs)]


def _permuted(x, perm, layout):
    seen, x_permuted, had = layout.get(id(x), (None, None, None))
    return x_permuted if had == perm and seen is x else lax.transpose(x, perm)


def _dce(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` without the equations its outputs do not need (the unread views)."""
    pruned, _ = pe.dce_jaxpr(jaxpr.jaxpr, [True] * len(jaxpr.out_avals), instantiate=True)
    return ClosedJaxpr(pruned, jaxpr.consts)

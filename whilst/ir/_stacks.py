"""Residual stacks owned by the functional While: row pushes and row pops.

A functional While may push rows (its body returns them after the carry; the
loop's results end with their stacks) and pop rows (stacks passed as its last
body operands; the body receives one row of each per step, counting down to
row `pop_pad` at the last step the bound allows)::

    stacks = [empty((stack_rows + spare_j, *row.shape)) for each pushed row j]
    i = 0
    while i < bound and cond(*cond_consts, i, *carry):
        rows_in = [p[bound - 1 + pop_pad - i] for p in popped]
        carry, rows_out = body(*consts, *rows_in, i, *carry)
        for s, r in zip(stacks, rows_out):
            s[row_offset + i] = r
        i += 1
    return (i, *carry, *stacks)

Because the loop, not its body, does the indexing, the lowering can unroll k
steps and move k rows at once: one write of a k-row chunk per emitted iteration
for pushes (a `dynamic_update_slice`, or a scatter where IREE keeps the counter
on the device), one `dynamic_slice` of a k-row chunk for pops
(rows `bound - 1 + pop_pad - i - (k-1) ..`, so `pop_pad >= k - 1` rows must lie
below the row of the last step). The pop position follows from the bound, not
from an operand of its own, so that IREE, which reads the bound of a counted
loop to the host once, computes it on the host too (an operand would be read
back every iteration). Unrolled bodies that index at a computed position, by
contrast, fail in iree-compile 3.13.

`explicit_form` rewrites such a loop into the equivalent one whose body
indexes the stacks itself (stacks as carries); the rules that have no
stack-aware version (jvp, linearize, batching with per-lane pops) use it. Its
body pushes with `push_row`, a `dynamic_update_slice` onto a row that holds no
value yet, whose transpose reads the row's cotangent and leaves the stack's as
it is: a gradient While then takes the cotangents of a loop's pushes as a
constant rather than carrying and rewriting them (XLA copied such a carry whole
every step). Where the body runs a loop, it pops rows of zeros at a step past
the bound, as a lane that is done takes under `jax.vmap`: rows below a loop's
first step were never written, and a trip count read from one would size that loop.
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from whilst._jax_compat import split_list

from whilst.ir._buffers import uninitialized
from whilst.ir._rewrite import into_control_flow, rewrite_equations
from whilst.ir._tracing import COUNTER_AVAL, call, holds_a_loop, trace_closed
from whilst.ir._vma import varying, vary, with_varying


@dataclasses.dataclass(frozen=True)
class StackParams:
    """The stack parameters of a functional While (all 0 for a plain loop)."""
    accumulators: int = 0  # rows pushed per step
    stack_rows: int = 0    # rows of each pushed stack, before spare rows
    row_offset: int = 0    # the stack row that step 0 pushes
    pops: int = 0          # stacks popped, one row each per step
    pop_pad: int = 0       # rows of each popped stack below the row of the last step

    @classmethod
    def of(cls, params: dict) -> "StackParams":
        return cls(**{f.name: params[f.name] for f in dataclasses.fields(cls)})

    def as_params(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def any(self) -> bool:
        return bool(self.accumulators or self.pops)


NO_STACKS = StackParams().as_params()


def stack_avals(row_avals, rows: int):
    """One `[rows + spare, *row.shape]` stack per pushed row. The j-th stack of rows of
    one shape and dtype gets j spare rows, so every stack of a loop has a type of its
    own (IREE 3.13 gives two loop carries that start equal one buffer; see
    `whilst.ir._buffers.uninitialized`)."""
    seen = {}
    avals = []
    for a in row_avals:
        key = (tuple(a.shape), np.dtype(a.dtype))
        spare = seen[key] = seen.get(key, -1) + 1
        avals.append(with_varying(ShapedArray((rows + spare, *a.shape), a.dtype), varying(a)))
    return avals


def pushed_rows(static_bound: int, unroll: int, pad: int) -> int:
    """Stack rows for pushes of up to `static_bound` steps, `unroll` rows written per
    emitted iteration (the last chunk may run past the bound), after `pad` rows, and
    more rows than one chunk: iree-compile 3.13 crashes on a loop whose every
    iteration writes its whole stack (`iree_limits/whole_stack_chunk.mlir`)."""
    return max(pad + -(-max(static_bound, 1) // unroll) * unroll, unroll + 1)


# Stacks are indexed with the primitives themselves: `0 <= index < len(stack)`
# holds by construction, and lax.dynamic_slice's wrapping of negative indices
# (a select on the index) costs IREE a device round trip per step.

def _row_index(index, stack):
    """The start indices of row `index` of `stack`, varying over its manual axes."""
    zero = lax.full((), 0, np.int32)
    return [vary(j, varying(stack)) for j in (index, *[zero] * (stack.ndim - 1))]


def read_rows(stacks, index):
    """`[s[index] for s in stacks]`."""
    return [lax.dynamic_slice_p.bind(s, *_row_index(index, s),
                                         slice_sizes=(1, *s.shape[1:]))[0]
            for s in stacks]


def write_rows(stacks, rows, index):
    """`s[index] = r` for each stack, as one in-place `dynamic_update_slice` each."""
    return _rows_written(lax.dynamic_update_slice_p, stacks, rows, index)


def _rows_written(primitive, stacks, rows, index):
    """`primitive` (`dynamic_update_slice` or `push_row`) writing row `index` of each
    stack."""
    return [primitive.bind(s, vary(r.astype(s.dtype)[None], varying(s)), *_row_index(index, s))
            for s, r in zip(stacks, rows)]


push_row_p = Primitive("push_row")


def push_rows(stacks, rows, index):
    """`s[index] = r` for each stack whose row `index` holds no value yet (each step
    of a loop pushes rows of its own onto stacks that start `uninitialized`): one
    in-place `dynamic_update_slice` each. Transposed, `ct_r = ct_s[index]` and the
    stack's cotangent passes on unchanged: row `index` held no value that has one."""
    return _rows_written(push_row_p, stacks, rows, index)


def _as_update(stack, row, *index):
    """`push_row` as the `dynamic_update_slice` it computes."""
    return lax.dynamic_update_slice_p.bind(stack, row, *index)


def _push_row_jvp(primals, tangents):
    stack, row, *index = primals
    dstack, drow = tangents[:2]
    out = push_row_p.bind(stack, row, *index)
    if type(dstack) is ad.Zero and type(drow) is ad.Zero:
        return out, ad.Zero(jax.typeof(out).to_tangent_aval())
    dstack, drow = (ad.instantiate_zeros(t) for t in (dstack, drow))
    return out, push_row_p.bind(dstack, drow, *index)


def _push_row_transpose(ct, stack, row, *index):
    row_aval = row.aval if ad.is_undefined_primal(row) else jax.typeof(row)
    if type(ct) is ad.Zero:
        ct_row = ad.Zero(row_aval.to_tangent_aval())
    else:
        ct_row = lax.dynamic_slice_p.bind(ct, *index, slice_sizes=row_aval.shape)
    return [ct if ad.is_undefined_primal(stack) else None,
            ct_row if ad.is_undefined_primal(row) else None, *[None] * len(index)]


def _push_row_batched(args, dims):
    stack, row, *index = args
    sdim, rdim, *idims = dims
    if any(d is not None for d in idims):
        return batching.primitive_batchers[lax.dynamic_update_slice_p](args, dims)
    size = stack.shape[sdim] if sdim is not None else row.shape[rdim]
    stack = batching.bdim_at_front(stack, sdim, size)
    row = batching.bdim_at_front(row, rdim, size)
    zero = vary(lax.full((), 0, np.int32), varying(stack))
    return push_row_p.bind(stack, row, zero, *index), 0


push_row_p.def_impl(_as_update)
push_row_p.def_abstract_eval(lambda stack, row, *index: stack)
ad.primitive_jvps[push_row_p] = _push_row_jvp
ad.primitive_transposes[push_row_p] = _push_row_transpose
batching.primitive_batchers[push_row_p] = _push_row_batched
mlir.register_lowering(push_row_p, mlir.lower_fun(_as_update, multiple_results=False))


def pushes_as_updates(jaxpr):
    """`jaxpr` with every `push_row` a `dynamic_update_slice` (also inside cond,
    scan and while), for the export rewrites, which know the latter; the same
    object when it has none."""
    def rule(eqn):
        return _as_update if eqn.primitive is push_row_p else None
    return rewrite_equations(jaxpr, into_control_flow(rule), "pushes_as_updates")


def split_pops(body_consts, pops: int):
    """`body_consts -> (consts, popped)`."""
    return split_list(list(body_consts), [len(body_consts) - pops])


def explicit_form(operands, params: dict):
    """`(operands, params)` of the equivalent functional While with no stack
    parameters: pushed stacks become trailing carries (starting uninitialized)
    written by the body, popped stacks constants read by the body, which also
    gets the bound (for the pop position) as its last constant. The results are
    the same list: `[i, *carry, *stacks]`. `explicit_layout` lays out any list
    given per operand (tangents, flags) the same way."""
    sp = StackParams.of(params)
    cond_jaxpr, body_jaxpr = params["cond_jaxpr"], params["body_jaxpr"]
    ncc, nbc = params["cond_nconsts"], params["body_nconsts"]
    _, body_consts, (bound,), carry = split_list(list(operands), [ncc, nbc, 1])
    ncarry = len(carry)
    row_avals = body_jaxpr.out_avals[ncarry:]
    stacks0 = uninitialized(stack_avals(row_avals, sp.stack_rows))
    nbound = 1 if sp.pops else 0
    loop_in_body = sp.pops and holds_a_loop(body_jaxpr.jaxpr)

    def body(*args):
        bcs, bound_in, (i,), xs, stacks = split_list(args, [nbc, nbound, 1, ncarry])
        cs, popped = split_pops(bcs, sp.pops)
        rows_in = read_rows(popped, bound_in[0] - 1 + sp.pop_pad - i) if sp.pops else []
        if loop_in_body:
            rows_in = _zeros_past_bound(rows_in, i, bound_in[0])
        outs = call(body_jaxpr, *cs, *rows_in, i, *xs)
        new_xs, rows_out = split_list(outs, [ncarry])
        return [*new_xs, *push_rows(stacks, rows_out, i + sp.row_offset)]

    def cond(*args):
        cs, (i,), xs, _ = split_list(args, [ncc, 1, ncarry])
        return call(cond_jaxpr, *cs, i, *xs)

    const_avals = [jax.typeof(x) for x in [*body_consts, *[bound] * nbound]]
    carry_avals = [jax.typeof(x) for x in [*carry, *stacks0]]
    new_body = trace_closed(body, [*const_avals, COUNTER_AVAL, *carry_avals],
                            "functional_while_explicit_body")
    new_cond = trace_closed(cond, [*cond_jaxpr.in_avals, *carry_avals[ncarry:]],
                            "functional_while_explicit_cond")
    new_params = dict(params, cond_jaxpr=new_cond, body_jaxpr=new_body, unroll=None,
                      body_nconsts=nbc + nbound, **NO_STACKS)
    return explicit_layout(params, operands, stacks0), new_params


def _zeros_past_bound(rows, i, bound):
    """`[r if i < bound else zeros for r in rows]`: under `jax.vmap` a lane past its
    own bound runs the body too, and the rows it pops were never written; where the
    body runs a loop, a trip count read from one would size it (billions of steps)."""
    within = lax.lt(i, bound)
    return [lax.select(within, r, lax.full_like(r, 0)) for r in rows]


def explicit_layout(params: dict, per_operand: list, per_stack: list) -> list:
    """`per_operand` (one item per operand of a loop with stack parameters) laid
    out as the operands of its `explicit_form`: the bound's item again for the
    body's copy of the bound (loops that pop), `per_stack` after the carry."""
    head, (bound,), carry = split_list(
        list(per_operand), [params["cond_nconsts"] + params["body_nconsts"], 1])
    return [*head, *([bound] if params["pops"] else []), bound, *carry, *per_stack]

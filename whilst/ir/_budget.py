"""Reverse mode within a memory budget: stored steps first, checkpointed steps after.

A loop whose stored residuals could outgrow `gradient_memory` bytes (no bound,
or a bound of more rows than fit) is linearized as two loops that together take
the same steps::

    # the head: the first `head_rows` steps, every step's residuals stored
    n_head, carry = stored_while(cond, body, carry, bound=min(bound, head_rows))
    # the tail: the steps after them, K carries kept (`_checkpoint.py`)
    n_tail, carry = checkpointed_while(cond(n_head + i, ...), body(n_head + i, ...),
                                       carry, bound=bound - n_head, checkpoints=K)
    return n_head + n_tail, carry

The tail tests `cond` once more where the head stopped, so it takes no step
when the loop ended within the head; on XLA:CPU its forward While is then not
entered at all (`checkpointed_linearize`'s `runs`: its setup cost n = 10 steps
of bench/grad_tanh.py part 2 a fifth more). Its gradient runs first, then the head's,
which starts its constants' cotangents from the tail's (one accumulator each,
not two summed after the loops).
`head_rows` and `K` share the budget: K copies of the carry take at most a
quarter of it (2 <= K <= MAX_TAIL_CHECKPOINTS) and the stacks the rest; a
head of fewer than 2 steps is left out (a loop of its own for one stored step
does not pay). Both minimums are choices: stacks of any bound and K=1 tails
compile and run on IREE.
"""
from __future__ import annotations

import numpy as np
from jax import lax
from jax.interpreters.ad import Zero

from whilst._jax_compat import is_constant_shape, split_list
from whilst.ir._checkpoint import checkpointed_linearize
from whilst.ir._functional_while import COUNTER_AVAL, split_operands
from whilst.ir._reverse import StepResiduals, stored_linearize
from whilst.ir._tracing import call, trace_closed
from whilst.ir._unroll import nbytes

MIN_TAIL_CHECKPOINTS, MAX_TAIL_CHECKPOINTS = 2, 64
MIN_HEAD_ROWS = 2


def budget_split(budget: int, carry_avals, steps: StepResiduals) -> tuple[int, int]:
    """`(head_rows, K)`: stored steps and tail checkpoints that fit in `budget` bytes
    (K copies of the carry take at least MIN_TAIL_CHECKPOINTS copies, even beyond
    the budget)."""
    if not all(is_constant_shape(a.shape) for a in carry_avals) or steps.row_bytes is None:
        return 0, MAX_TAIL_CHECKPOINTS // 4  # sizes unknown: checkpoints only
    carry_bytes = max(sum(nbytes(a) for a in carry_avals), 1)
    K = int(np.clip(budget // 4 // carry_bytes, MIN_TAIL_CHECKPOINTS, MAX_TAIL_CHECKPOINTS))
    head_rows = max(budget - K * carry_bytes, 0) // max(steps.row_bytes, 1)
    return (int(head_rows) if head_rows >= MIN_HEAD_ROWS else 0), K


def _shifted(jaxpr, nconsts, name):
    """`jaxpr(*consts, i, *xs)` as `f(*consts, offset, i, *xs) = jaxpr(*consts,
    offset + i, *xs)`."""
    avals = jaxpr.in_avals

    def shifted(*args):
        consts, (offset, i), xs = split_list(args, [nconsts, 2])
        return call(jaxpr, *consts, offset + i, *xs)

    return trace_closed(shifted, [*avals[:nconsts], COUNTER_AVAL, *avals[nconsts:]], name)


def budget_linearize(nzs, steps: StepResiduals, head_rows, K, *primals, cond_jaxpr,
                     body_jaxpr, cond_nconsts, body_nconsts, static_bound, name, role, unroll,
                     gradient_memory):
    """The linearize rule of `functional_while_p` as a stored head of `head_rows`
    steps and a checkpointed tail with K checkpoints (see the module docstring)."""
    cond_consts, body_consts, bound, carry = split_operands(primals, cond_nconsts, body_nconsts)
    cond_nz, const_nz, _, carry_nz = split_operands(nzs, cond_nconsts, body_nconsts)
    loop = dict(cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr, cond_nconsts=cond_nconsts,
                body_nconsts=body_nconsts, name=name, role=role, unroll=unroll)
    n_head, head_res = np.int32(0), []
    if head_rows:
        (n_head, *carry), (_, *carry_nz), head_res, head_linearized = stored_linearize(
            steps, *cond_consts, *body_consts, lax.min(bound, np.int32(head_rows)), *carry,
            static_bound=head_rows, gradient_memory=gradient_memory, passes_dconsts=True,
            **loop)

    tail_out, tail_nz, tail_res, tail_linearized = checkpointed_linearize(
        [*cond_nz, False, *const_nz, False, False, *carry_nz],
        *cond_consts, n_head, *body_consts, n_head, bound - n_head, *carry,
        cond_jaxpr=_shifted(cond_jaxpr, cond_nconsts, f"{name}_tail_cond"),
        body_jaxpr=_shifted(body_jaxpr, body_nconsts, f"{name}_tail_body"),
        cond_nconsts=cond_nconsts + 1, body_nconsts=body_nconsts + 1,
        static_bound=None if static_bound is None else max(static_bound - head_rows, 0),
        name=name, role=role, unroll=unroll, checkpoints=K,
        runs=lax.eq(n_head, np.int32(head_rows)) if head_rows else None)
    n_tail, *carry_out = tail_out
    offset_zero = Zero(COUNTER_AVAL.to_tangent_aval())

    def linearized(residuals, *tangents):
        res_head, res_tail = split_list(residuals, [len(head_res)])
        cond_t, const_t, (bound_t,), carry_t = split_list(
            list(tangents), [cond_nconsts, body_nconsts, 1])
        if head_rows:
            # The constants' tangents pass through the head's linear While, so the
            # head's gradient While continues the tail's constant cotangents.
            carry_t, const_t = split_list(head_linearized(res_head, *tangents)[1:],
                                          [len(carry_t)])
        return tail_linearized(res_tail, *cond_t, offset_zero, *const_t, offset_zero,
                               bound_t, *carry_t)

    return [n_head + n_tail, *carry_out], tail_nz, [*head_res, *tail_res], linearized


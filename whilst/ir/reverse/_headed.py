"""Reverse mode of a loop past its budget under further derivatives: a stored head,
and the rest under a branch.

Linearized again (`jax.grad(jax.grad(f))` under `jax.jit`), the budget's Whiles over
chunks (`_budget.py`) become checkpointed loops of their own, with copies, schedules
and chunk loops, which run at every call, even where the loop ends within its first
chunk (a 2-step loop's second derivative: 30 Whiles). Where more reverse-mode
derivatives are to come, a loop past its budget is linearized as::

    n, *carry = while_loop(cond, body, carry, bound=min(bound, H))   # the head: stored
    if n == H and n < bound and cond(n, *carry):                      # a lax.cond
        m, *carry = while_loop(cond(n + i, ...), body(n + i, ...), carry, bound - n)
        n += m                                # the rest: chunks, `Budget(tail=True)`

(H the steps a chunk holds, or fewer: at most MAX_HEAD_BYTES of rows, `head_steps`),
linearized by JAX as one function (`linearize_jaxpr`): the head's steps stored, the
rest in the budget's chunks inside a `lax.cond`, whose linearization and transpose at
each further order run the rest's Whiles only where the loop runs past its head. A
loop that ends within H steps costs what a loop bounded at H costs, at every order.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from jax import lax

from whilst.ir._functional_while import functional_while, split_operands
from whilst.ir._tracing import call
from whilst.ir.reverse._budget import shifted
from whilst.ir.reverse._inlined import linearize_traced
from whilst.ir.reverse._policy import Budget, EveryStep


# The head's rows take at most this many bytes: it is there for loops that end
# early, and each further derivative stores rows in proportion to it (IREE runs a
# loop over a few numbers in one dispatch, its rows in the kernel's stack, 32 KiB on
# llvm-cpu: a head of 8064 one-float steps needed 96 KiB at order 2; heads of 2048
# and 4096 compile, `tests/iree/test_loops_in_dispatch.py`).
MAX_HEAD_BYTES = 8192


def head_steps(S: int, row_bytes: int) -> int:
    """The steps of a head for chunks of S steps of `row_bytes` bytes each::

        min(S, max(MAX_HEAD_BYTES // row_bytes, 1))
    """
    return min(S, max(MAX_HEAD_BYTES // max(row_bytes, 1), 1))


def headed_linearize(is_vjp, nzs, H, *primals, cond_jaxpr, body_jaxpr, cond_nconsts,
                     body_nconsts, static_bound, name, role, unroll, gradient: Budget):
    """The linearize rule of `functional_while_p` for a loop past its budget, under
    more derivatives, with a head of H steps (see the module docstring)."""
    loop = dict(name=name, role=role, unroll=unroll)
    rest_cond = shifted(cond_jaxpr, cond_nconsts, f"{name}_rest_cond")
    rest_body = shifted(body_jaxpr, body_nconsts, f"{name}_rest_body")
    rest_bound = None if static_bound is None else static_bound - H

    def headed(*operands):
        cond_consts, body_consts, bound, carry = split_operands(
            operands, cond_nconsts, body_nconsts)
        n, *carry = functional_while(
            cond_consts, body_consts, lax.min(bound, np.int32(H)), carry,
            cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr, static_bound=H,
            gradient=EveryStep(), **loop)
        (more,) = call(cond_jaxpr, *cond_consts, n, *carry)

        def rest(n, *carry):
            m, *carry = functional_while(
                [*cond_consts, n], [*body_consts, n], bound - n, carry,
                cond_jaxpr=rest_cond, body_jaxpr=rest_body, static_bound=rest_bound,
                gradient=dataclasses.replace(gradient, tail=True), **loop)
            return [n + m, *carry]

        return lax.cond(more & (n == H) & (n < bound), rest, lambda *outs: list(outs),
                        n, *carry)

    return linearize_traced(headed, is_vjp, nzs, primals, f"{name}_headed")

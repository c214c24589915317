"""`WhilstAdjoint`: diffrax's solve loops as whilst loops.

`diffrax.diffeqsolve(..., adjoint=WhilstAdjoint())` runs the step loop and the SaveAt
loop as `whilst.lax.while_loop`s (diffrax's adjoints choose their loops the same
way, through `equinox.internal.while_loop(..., kind=...)`), so `jax.grad` through
the solve is whilst's gradient While: every step's residuals stored when
`max_steps` rows fit in `gradient_memory` (else whilst's chunks), or `checkpoints=K`
copies and a binomial schedule; and `whilst.compile` exports it for IREE.
"""
from __future__ import annotations

import functools

import diffrax
from equinox.internal._loop.common import common_rewrite

from whilst.lax import while_loop


class WhilstAdjoint(diffrax.AbstractAdjoint):
    """Solve loops on whilst's functional While; reverse mode by whilst's rules.

    Args (fields):
      checkpoints: None (store residuals within `gradient_memory`), or K to keep K
        copies of the solver state and recompute steps (`whilst.while_loop`), for
        the step loop (the SaveAt loop, at most len(ts) steps, stores its steps).
      gradient_memory: bytes of residuals per loop (None: whilst's default).
    """
    checkpoints: int | None = None
    gradient_memory: int | None = None

    def loop(self, *, throw, passed_solver_state, passed_controller_state, **kwargs):
        del throw, passed_solver_state, passed_controller_state
        step_loop = functools.partial(whilst_while_loop, whilst_checkpoints=self.checkpoints,
                                      gradient_memory=self.gradient_memory)
        saveat_loop = functools.partial(whilst_while_loop, gradient_memory=self.gradient_memory)
        return self._loop(**kwargs, inner_while_loop=saveat_loop, outer_while_loop=step_loop)


def whilst_while_loop(cond_fun, body_fun, init_val, *, max_steps=None, buffers=None,
                      whilst_checkpoints=None, gradient_memory=None, **_):
    """`equinox.internal.while_loop` (its "lax" kind: buffers written in place, at most
    `max_steps` steps) as a `whilst.lax.while_loop` bounded by `max_steps`, with
    `checkpoints=whilst_checkpoints` (the `checkpoints` diffrax passes for its own
    checkpointed kind is ignored, as are the other arguments of other kinds). The carry
    is rewritten by equinox's own `common_rewrite`, as its "lax" kind does (a private
    module: the pinned equinox range in pyproject's `test` extra is the tested one)."""
    cond, body, init, _ = common_rewrite(cond_fun, body_fun, init_val, max_steps, buffers,
                                         makes_false_steps=False)
    *_, final = while_loop(cond, body, init, maximum_iterations=max_steps,
                           checkpoints=whilst_checkpoints, gradient_memory=gradient_memory,
                           name="diffrax")
    return final

"""The checkpoint schedule's branches computed and selected, for gradients of
gradient Whiles.

The checkpointed gradient While (`reverse/_checkpointed.py`) picks its action with a
`lax.switch`, and its re-plans compute the binomial split under a `lax.cond`.
They lower to `stablehlo.case`, which IREE 3.13 runs as branches on the host.
Differentiating that While again multiplies them, and iree-compile 3.13 fails
on a loop body with that many host branches over that many carries ("failed to
solve for timepoint coverage": the fixed-point solver of its
`iree-stream-elide-timepoints` pass stops after 32 iterations;
`iree_limits/branches_in_loop.py`). So before a gradient While is
linearized, the conds made by `schedule_branch` become::

    branches[index](*operands)
      == [select_n(clamp(index, 0, n - 1), *outs)
          for outs in zip(*[b(*operands) for b in branches])]

as `jax.vmap` makes them for a batched index: every action runs each step,
which the schedule allows (each branch steps from valid state). Conds of the
user's body, in the reverse step's vjp, stay conds (an untaken branch of theirs
need not be safe to run). First-order gradients keep the branches: on IREE a
host branch costs one read back, less than running the body's vjp in every step
(`iree_limits/README.md`, "Branches in a loop").
"""
from __future__ import annotations

import jax
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr

from whilst.ir._rewrite import INLINED, rewrite_equations
from whilst.ir._tracing import call
from whilst.ir._xla_cpu_choice import xla_cpu_choice_p

SCHEDULE_BRANCH = "whilst_schedule_branch"  # the name of the calls `schedule_branch` makes


def schedule_branch(fn):
    """`fn` as a `jax.jit` call that `selected_schedule` recognises: the conds it
    makes directly are the schedule's."""
    def whilst_schedule_branch(*args):
        return fn(*args)
    return jax.jit(whilst_schedule_branch)


def selected_schedule(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with the conds of its `schedule_branch` calls in the selected form of
    the module docstring, also in both forms of its `xla_cpu_choice`s; the same
    jaxpr object when it has none."""
    return rewrite_equations(jaxpr, _schedule_call, "selected_schedule")


def _schedule_call(eqn):
    if eqn.primitive is xla_cpu_choice_p:
        forms = dict(xla_cpu=selected_schedule(eqn.params["xla_cpu"]),
                     portable=eqn.params["portable"].map(selected_schedule))
        if all(forms[k] is v for k, v in eqn.params.items()):
            return None
        return lambda *args, **params: xla_cpu_choice_p.bind(*args, **forms)
    sub = INLINED.get(eqn.primitive.name)
    if sub is None or eqn.params.get("name") != SCHEDULE_BRANCH:
        return None
    inner = eqn.params[sub]
    return lambda *args, **params: call(
        rewrite_equations(inner, _schedule_cond, SCHEDULE_BRANCH), *args)


def _schedule_cond(eqn):
    return _selected if eqn.primitive.name == "cond" else _schedule_call(eqn)


def _selected(index, *operands, branches, **params):
    """The cond `branches[index](*operands)` in the selected form of the module
    docstring (schedule calls inside its branches selected too)."""
    last = np.int32(len(branches) - 1)
    index = lax.clamp(np.int32(0), index.astype(np.int32), last)
    outs = [call(selected_schedule(b), *operands) for b in branches]
    return [lax.select_n(index, *values) for values in zip(*outs)]

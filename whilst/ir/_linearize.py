"""Reverse mode of `functional_while_p`: the one place that chooses how a loop's
steps are kept for its gradient While::

    if checkpoints is None:  # every step's residuals, in stacks of static_bound rows
        stored_linearize(...)        # _reverse.py
    else:                    # K copies of the carry, steps recomputed between them
        checkpointed_linearize(...)  # _checkpoint.py
"""
from __future__ import annotations

from whilst._jax_compat import def_linearization
from whilst.ir._checkpoint import checkpointed_linearize
from whilst.ir._functional_while import functional_while_p
from whilst.ir._reverse import stored_linearize


def _linearize_rule(is_vjp, nzs, *primals, checkpoints, **params):
    if checkpoints is None:
        return stored_linearize(is_vjp, nzs, *primals, **params)
    return checkpointed_linearize(nzs, *primals, checkpoints=checkpoints, **params)


def_linearization(functional_while_p, _linearize_rule)

"""Gradient policies: how reverse mode keeps a loop's steps for its gradient While.

A loop's policy is one frozen value, the `gradient` parameter of
`functional_while_p`; `_linearization.py` dispatches on it::

    Budget(nbytes)            # the default (nbytes = DEFAULT_GRADIENT_MEMORY):
        if maximum_iterations rows of residuals fit in nbytes, or a step keeps
                no rows (any bound, or none):
            store every step's residuals                         (_stored.py)
        else:
            chunks of as many stored steps as fit, copies of the
            carry at chunk starts, each chunk recomputed once    (_budget.py)
            (in nbytes / 32**d under d more reverse-mode derivatives),
            a step keeping its inputs where its rows cost
            computation of their own                         (_carried_rows.py)
            (stored where those rows fit); under more reverse-mode
            derivatives, a stored head of one chunk's steps and the
            chunks only where the loop runs past it           (_headed.py)
    Checkpointed(K)           # `checkpoints=K`:
        if K >= maximum_iterations (the loop's static bound):
            store every step's residuals                         (_stored.py)
        else:
            K copies of the carry, every step recomputed by the
            binomial schedule                                    (_checkpointed.py)

    EveryStep()               # the loops reverse mode builds with a static bound
        store every step's residuals                             (_stored.py)
    Inlined(steps)            # a few steps, their count known at trace time
        the steps inlined, linearized as straight-line code      (_inlined.py)

Eagerly, where a loop's operands are values, a `Budget` or `Checkpointed(K)` loop is
first bounded by the trip count they give, and so inlined or stored where that count
allows (`_linearization.py`).

(`stores_every_step` says which loops store every step.) `EveryStep` is the policy of
a chunk's loops and of stored gradient and linear Whiles, and that of a stored
forward While (one that pushes its rows) when differentiated again: their bound is a
number of steps whose rows their loop already stores, so differentiating them again
(higher orders) stores rows in proportion to those, with no schedule and no chunks of
its own.

The budget's loop over chunks is `ChunkedLoop(K, ...)`: checkpointed, and saying which
of its results are the stacks of a chunk's stored rows (what `residual_report` lists).
It and the budget's gradient While carry those stacks; differentiated again (higher
orders), they keep only the copies of their carry that fit the budget
(`Checkpointed.nbytes`), at least 2. The Whiles of `_checkpointed.py` carry K copies
of their loop's carry; differentiated again, they keep the copies that fit their
loop's `nbytes`, or K copies of their own carry where it has none, and the Whiles
built for that derivative inherit the same bound: K^2 copies of the loop's carry at
order 2, and twice as many at each order after (not K^order).
"""
from __future__ import annotations

import dataclasses

DEFAULT_GRADIENT_MEMORY = 1 << 20  # bytes of stored residuals and checkpoints per loop

# The most copies of the carry the checkpoint schedule keeps: its forward policy
# changes algorithm at step (K + 1)(K + 2) / 2 - 1, an int32 (`_schedule.py`).
MAX_SCHEDULED_CHECKPOINTS = 65534


@dataclasses.dataclass(frozen=True)
class Budget:
    """Store what fits in `nbytes`, checkpoint the rest (see the module docstring).
    `tail`: the steps of a loop past the head `_headed.py` stored (chunked, never
    headed again)."""
    nbytes: int = DEFAULT_GRADIENT_MEMORY
    tail: bool = False


@dataclasses.dataclass(frozen=True)
class Checkpointed:
    """Keep `checkpoints` copies of the carry and recompute every step; with
    `nbytes` (the loops reverse mode builds: `_budget.py`'s, whose carries hold a
    chunk's stacks, and `_checkpointed.py`'s, whose carries hold copies), only as
    many copies as fit in `nbytes`, and at least 2 (`copies`). `over_chunks`:
    `_budget.py`'s Whiles over chunks."""
    checkpoints: int
    nbytes: int | None = None
    over_chunks: bool = False

    def copies(self, carry_bytes: int | None) -> int:
        """The copies of a carry of `carry_bytes` bytes (None: symbolic) to keep::

            min(checkpoints, max(2, nbytes // carry_bytes))   # checkpoints if no nbytes
        """
        if self.nbytes is None or carry_bytes is None:
            return self.checkpoints
        return min(self.checkpoints, max(2, self.nbytes // max(carry_bytes, 1)))


@dataclasses.dataclass(frozen=True)
class EveryStep:
    """Store every step's residuals (see the module docstring)."""


@dataclasses.dataclass(frozen=True)
class Inlined:
    """The loop runs exactly `steps` steps (its trip count, known at trace time or,
    eagerly, taken from its values): reverse mode inlines them (`_inlined.py`)."""
    steps: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChunkedLoop(Checkpointed):
    """The loop over chunks of `_budget.py`: reverse mode treats it as
    `Checkpointed(checkpoints)`; each iteration runs at most `chunk_steps` steps,
    whose residual rows (of the last chunk) fill stacks of `chunk_stacks`
    `(shape, dtype name)`."""
    chunk_steps: int
    chunk_stacks: tuple[tuple[tuple[int, ...], str], ...]
    over_chunks: bool = True


def stores_every_step(policy: Budget | Checkpointed | EveryStep | Inlined,
                      static_bound: int | None, row_bytes: int | None = None) -> bool:
    """Whether reverse mode stores the residuals of every step of a loop of at most
    `static_bound` steps (None: unbounded) whose steps store `row_bytes` bytes each
    (None: symbolic sizes; not needed for `Checkpointed`)::

        EveryStep(), Inlined(steps): always
        Checkpointed(K):  K >= static_bound         (not the budget's ChunkedLoop)
        Budget(nbytes):   static_bound * row_bytes <= nbytes, or row_bytes symbolic;
                          row_bytes == 0 with any bound or none (rows of no bytes)
    """
    if isinstance(policy, Budget) and row_bytes == 0:
        return True
    if static_bound is None:
        return False
    if isinstance(policy, (EveryStep, Inlined)):
        return True
    if isinstance(policy, ChunkedLoop):
        return False
    if isinstance(policy, Checkpointed):
        return policy.checkpoints >= static_bound
    return row_bytes is None or static_bound * row_bytes <= policy.nbytes


def over_chunks(policy: Budget | Checkpointed | EveryStep) -> bool:
    """Whether `policy` is that of a While over a budget's chunks (`_budget.py`'s
    forward and gradient Whiles), whose iterations each run a chunk's loops."""
    return isinstance(policy, Checkpointed) and policy.over_chunks


def gradient_policy(checkpoints: int | None = None,
                    gradient_memory: int | None = None) -> Budget | Checkpointed:
    """The policy of `while_loop(..., checkpoints=, gradient_memory=)`: `checkpoints`
    wins; `gradient_memory=None` is the default budget."""
    if checkpoints is not None:
        return Checkpointed(checkpoints)
    return Budget(DEFAULT_GRADIENT_MEMORY if gradient_memory is None else gradient_memory)

"""Checkpoint schedules for the checkpointed gradient While: which steps the forward
While stores, and how the gradient While recomputes the others.

Two halves, each written twice (plain Python for predictions, jax.numpy integer code
for the loops; tests check they agree):

**Online storing during the forward While** (n not known yet). `K` slots; slot 0
holds step 0. For steps below `(K+1)(K+2)/2 - 1` the policy is Algorithm I of
Stumm and Walther, "New algorithms for optimal online checkpointing", SIAM J. Sci.
Comput. 32(2), 2010; after it, the level-based dynamic checkpointing of Wang, Moin
and Iaccarino, "Minimal repetition dynamic checkpointing algorithm for unsteady
adjoint calculation", SIAM J. Sci. Comput. 31(4), 2009 (the same controller as
equinox's checkpointed while loop, so both start the reversal from the same slots).
Up to `(K+1)(K+2)/2 - 1` steps this leaves every step to be recomputed at most once,
which is optimal: a forward that does not know n stores at most K of the n states
the reversal needs, so at least `n - K` states must be recomputed.

**Offline reversal once n is known** (re-planning). The gradient While holds the
forward's slots and reverses the steps last first. The segment it works on runs
from the latest held checkpoint `top` to `fine` (every step from `fine` on is
reversed); it has `s = free slots + 1` snapshots and is reversed with the binomial
schedule of Griewank, "Achieving logarithmic growth of temporal and spatial
complexity in reverse automatic differentiation", Optim. Methods Softw. 1, 1992,
and Griewank and Walther, "Algorithm 799: revolve", ACM TOMS 26(1), 2000: advance
from `top` to `top + split(fine - top, s)`, store there, recurse. With
`beta(s, r) = C(s + r, s)` and `r` the least integer with `beta(s, r) >= L`,
`split(L, s) = max(1, beta(s, r - 2), L - beta(s - 1, r))` attains revolve's
minimal number of advances `r L - beta(s + 1, r - 1)` for one segment. Slots freed
as `fine` passes their step are reused by the segments further left.

The gradient While is a state machine; one iteration, as plain Python::

    held = [q < fine for q in pos]          # pos: the step each slot holds
    top = max(q for q, h in zip(pos, held) if h)
    if cur >= fine: x, cur = slot_of(top), top           # restore
    if cur == top + split(fine - top, free + 1) and free and cur < fine - 1:
        store x (step cur) into a free slot                # takeshot
    if cur == fine - 1: reverse step cur; fine -= 1      # turn
    else: x = body(x); cur += 1                          # advance
    # until fine == 0

`schedule_cost(n, K)` is the number of advances (extra body evaluations beyond
the n forward and n reversed steps) that runs.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import jax.numpy as jnp

EMPTY = int(np.iinfo(np.int32).max)   # the step of a slot that holds nothing
SPLIT_EXACT_UP_TO = 1 << 24           # segments longer than this get valid, non-optimal splits


# ----------------------------------------------------------------- binomial table

@functools.lru_cache(maxsize=None)
def beta_table(K: int) -> tuple[np.ndarray, np.ndarray]:
    """`(values, offsets)`: row s (2 <= s <= K) is `beta(s, r)` for r = 0, 1, ... up
    to the first value >= SPLIT_EXACT_UP_TO, at `values[offsets[s]:offsets[s + 1]]`.
    Rows 0 and 1 are empty (beta(0, r) = 1 and beta(1, r) = r + 1 in closed form)."""
    values, offsets = [], [0, 0, 0]
    for s in range(2, K + 1):
        r = 0
        while True:
            values.append(math.comb(s + r, s))
            if values[-1] >= SPLIT_EXACT_UP_TO:
                break
            r += 1
        offsets.append(len(values))
    values = values or [1]
    return np.asarray(values, np.int32), np.asarray(offsets, np.int32)


def _search_steps(K):
    values, offsets = beta_table(K)
    longest = int(np.max(np.diff(offsets))) if K >= 2 else 1
    return max(1, longest.bit_length())


def _beta_py(K, s, r):
    if s == 0:
        return 1
    if s == 1:
        return r + 1
    values, offsets = beta_table(K)
    return int(values[min(offsets[s] + r, offsets[s + 1] - 1)])


def split_py(L: int, s: int, K: int) -> int:
    """How far the reversal advances from a segment's start before storing (see the
    module docstring), for `L >= 2` steps and `1 <= s <= K` snapshots."""
    if s == 1:
        return L - 1
    values, offsets = beta_table(K)
    row = values[offsets[s]:offsets[s + 1]]
    r = min(int(np.sum(row < L)), len(row) - 1)
    left = _beta_py(K, s, r - 2) if r >= 2 else 0
    return max(1, left, L - _beta_py(K, s - 1, r))


def split_jnp(L, s, K: int):
    """`split_py` as int32 jax.numpy code: a branchless binary search in the binomial
    table that carries one value (`below` grows by descending powers of two), so XLA
    does not duplicate the search when it is vmapped."""
    if K == 1:
        return L - 1
    values, offsets = (jnp.asarray(a) for a in beta_table(K))
    s_row = jnp.clip(s, 2, K)
    start, stop = offsets[s_row], offsets[s_row + 1]
    below = 0                                            # entries of row s below L
    for j in reversed(range(_search_steps(K))):
        probe = start + below + (1 << j) - 1
        smaller = (probe < stop) & (values[jnp.clip(probe, 0, values.shape[0] - 1)] < L)
        below = below + jnp.where(smaller, 1 << j, 0)
    r = jnp.minimum(below, stop - start - 1)

    def beta(srow, rr):
        idx = jnp.clip(offsets[srow] + rr, offsets[srow], offsets[srow + 1] - 1)
        return values[jnp.clip(idx, 0, values.shape[0] - 1)]

    left = jnp.where(r >= 2, beta(s_row, r - 2), 0)
    s1 = s_row - 1
    right_cap = jnp.where(s1 == 1, r + 1, beta(jnp.maximum(s1, 2), r))
    binomial = jnp.maximum(jnp.maximum(1, left), L - right_cap)
    return jnp.where(s <= 1, L - 1, binomial).astype(np.int32)


# ------------------------------------------------------------ online forward policy

def policy_init(K: int):
    """Initial state of the online storing policy (jax.numpy int32 / bool arrays)."""
    levels = np.zeros(K, np.int32)
    levels[0] = EMPTY
    return [np.int32(0), np.int32(K), np.int32(K), np.bool_(True), levels,
            np.zeros(K, np.bool_)]


def policy_step_jnp(step, state, pos, K: int):
    """`(save, slot, state)`: whether the forward While stores step `step` and where."""
    i, o, p, s, levels, disp = state
    # Stumm and Walther, Algorithm I.
    sw_save, sw_slot = s, i
    i2 = jnp.where(s, i + 1, i)
    i2 = jnp.where(s & (i2 > o), 1, i2)
    s2 = jnp.where(step + 1 == p, False, s)
    at_p = step == p
    p2 = jnp.where(at_p, p + o, p)
    o2 = jnp.where(at_p, o - 1, o)
    i2 = jnp.where(at_p, o2, i2)
    s2 = jnp.where(at_p, o2 > 0, s2)
    # Wang and Moin: overwrite the latest dispensable checkpoint, else the latest one.
    any_disp = jnp.any(disp)
    slot_disp = jnp.argmax(jnp.where(disp, pos, 0)).astype(np.int32)
    slot_last = jnp.argmax(pos).astype(np.int32)
    wm_slot = jnp.where(any_disp, slot_disp, slot_last)
    wm_level = jnp.where(any_disp, 0, levels[slot_last] + 1)
    disp_wm = jnp.where(any_disp, disp.at[slot_disp].set(False),
                        jnp.where(levels < levels[slot_last], True, disp))
    levels_wm = levels.at[wm_slot].set(wm_level)

    use_wm = step >= (K + 1) * (K + 2) // 2 - 1
    if K == 1:
        save = jnp.where(use_wm, False, sw_save)
        return save, jnp.where(use_wm, 0, sw_slot), [i2, o2, p2, s2, levels, disp]
    save = jnp.where(use_wm, True, sw_save)
    slot = jnp.where(use_wm, wm_slot, sw_slot)
    keep = lambda new, old: jnp.where(use_wm, old, new)
    return save, slot, [keep(i2, i), keep(o2, o), keep(p2, p), keep(s2, s),
                        jnp.where(use_wm, levels_wm, levels), jnp.where(use_wm, disp_wm, disp)]


def forward_slots_py(n: int, K: int) -> list[int]:
    """The step each slot holds after an n-step forward While (EMPTY if none)."""
    u2m1 = (K + 1) * (K + 2) // 2 - 1
    i, o, p, s = 0, K, K, True
    levels, disp, pos = [0] * K, [False] * K, [EMPTY] * K
    levels[0] = EMPTY
    for step in range(n):
        if step >= u2m1:
            if K == 1:
                save, slot = False, 0
            else:
                save = True
                if any(disp):
                    slot = max(range(K), key=lambda k: (pos[k] if disp[k] else 0, -k))
                    level, disp[slot] = 0, False
                else:
                    slot = max(range(K), key=lambda k: (pos[k], -k))
                    level = levels[slot] + 1
                    disp = [d or lv < levels[slot] for d, lv in zip(disp, levels)]
                levels[slot] = level
        else:
            save, slot = s, i
            if s:
                i += 1
                if i > o:
                    i = 1
            if step + 1 == p:
                s = False
            if step == p:
                p, o = p + o, o - 1
                i, s = o, o > 0
        if save:
            pos[slot] = step
    return pos


# -------------------------------------------------------------------- prediction

def reversal_advances_py(n: int, K: int, pos: list[int]) -> int:
    """Advances the gradient While's state machine makes, starting from slots `pos`."""
    pos = list(pos)
    fine = cur = n
    advances = 0
    while fine > 0:
        held = [q < fine for q in pos]
        top = max(q for q, h in zip(pos, held) if h)
        free = K - sum(held)
        if cur >= fine:
            cur = top
        if cur < fine - 1 and free > 0 and cur == top + split_py(fine - top, free + 1, K):
            pos[held.index(False)] = cur
        if cur == fine - 1:
            fine -= 1
        else:
            cur += 1
            advances += 1
    return advances


def schedule_cost(n: int, K: int) -> int:
    """Extra body evaluations of a checkpointed gradient of an n-step loop with K
    checkpoints: all body evaluations of `jax.grad` minus `2 n` (the forward While's
    n and the n reversed steps)."""
    if n == 0:
        return 0
    return reversal_advances_py(n, K, forward_slots_py(n, K))


__all__ = ["EMPTY", "beta_table", "forward_slots_py", "policy_init",
           "policy_step_jnp", "reversal_advances_py", "schedule_cost", "split_jnp",
           "split_py"]

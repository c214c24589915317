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

The reference, `reversal_advances_py`, re-derives the segment every iteration::

    held = [q < fine for q in pos]          # pos: the step each slot holds
    top = max(q for q, h in zip(pos, held) if h)
    if cur >= fine: x, cur = slot_of(top), top           # restore
    if cur == top + split(fine - top, free + 1) and free and cur < fine - 1:
        store x (step cur) into a free slot                # takeshot
    if cur == fine - 1: reverse step cur; fine -= 1      # turn
    else: x = body(x); cur += 1                          # advance
    # until fine == 0

The segment only changes at a turn or a store, so the gradient While carries the
step it stores at next (`target`) and re-plans only there; its held slots form a
stack (`steps[0] < ... < steps[h-1]`, slot `order[l]` holding `steps[l]`), since
a store is always later than every held step and a turn frees at most the top
one. The same advances, as plain Python::

    def plan(top, fine, h):                # where the segment from top is stored next
        t = top + split(fine - top, K - h + 1)
        return t if h < K and t < fine - 1 else -1

    fine, h = n, number of slots holding a step   # steps, order: the sorted slots
    cur = steps[h - 1]; x = slot(order[h - 1]); target = plan(cur, fine, h)
    while fine > 0:
        if cur == fine - 1:                                # turn
            reverse step cur; fine = cur
            if steps[h - 1] == cur: h -= 1                 # its slot is free again
            cur = steps[h - 1]; x = slot(order[h - 1])     # restore
            target = plan(cur, fine, h)
        else:
            x = body(x); cur += 1                          # advance
            if cur == target:                              # store
                steps[h] = cur; slot(order[h]) = x; h += 1
                target = plan(cur, fine, h)

`split(L, s) = 1` while `L <= s + 1` (store every step), so only longer segments
need the binomial search: n + stores re-plans per gradient, most of them trivial.

`schedule_cost(n, K)` is the number of advances (extra body evaluations beyond
the n forward and n reversed steps) that runs.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from whilst.ir._xla_cpu_choice import bind_choice, choice_forms

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


_P = 65537                        # the prime 2**16 + 1
_TERMS = 14                       # min(s, r) > 14 makes beta(s, r) >= C(30, 15) > 2**24
_SAT = (1 << 31) - _P             # binomials from here on saturate
_INV_FACT = np.array([pow(math.factorial(m), -1, _P) for m in range(_TERMS + 1)], np.int32)
_FACT = np.array([math.factorial(k) for k in range(17)], np.float32)


def _mod_p(x):
    """`x % _P` for `0 <= x < 2**31` with a mask and a shift (2**16 = -1 mod _P):
    XLA:CPU emits a real division for `%` and splits the fusions around it."""
    r = (x & 0xFFFF) - (x >> 16)
    return jnp.where(r < 0, r + _P, r)


def _float_binomials(s, r, most_s: int):
    """beta(s, r) = C(s + r, s) for r >= 0 and s <= most_s as a float32 product of
    min(s, r) factors (relative error below 3e-6; inf where that is more than _TERMS)."""
    m = jnp.minimum(s, r)
    base = (s + r - m).astype(np.float32)
    v = jnp.ones(jnp.shape(m), np.float32)
    for j in range(1, min(most_s, _TERMS) + 1):
        v = v * jnp.where(j <= m, (base + j) * np.float32(1 / j), 1)
    return jnp.where(m > _TERMS, np.float32(np.inf), v)


def _binomials(s, r, most_s: int):
    """beta(s, r) for s <= most_s exactly as int32 (0 for -s <= r < 0), saturated at
    _SAT: the float32 product, off by less than _P / 2, moved to the integer
    congruent to beta(s, r) mod _P (the product of the factors times the inverse of
    min(s, r)!, the inverse in two bytes to stay below 2**31)."""
    m = jnp.clip(jnp.minimum(s, r), 0, _TERMS + 1)
    base = s + r - m
    v = _float_binomials(s, jnp.maximum(r, 0), most_s)
    x = jnp.ones(jnp.shape(m), np.int32)
    for j in range(1, min(most_s, _TERMS) + 1):
        x = _mod_p(x * jnp.where(j <= m, base + j, 1))
    inv = jnp.asarray(_INV_FACT)[jnp.minimum(m, _TERMS)]
    x = _mod_p(_mod_p(x * (inv >> 8)) * 256 + x * (inv & 255))
    c0 = jnp.round(jnp.minimum(v, _SAT)).astype(np.int32)
    d = x - _mod_p(c0)
    d = jnp.where(d < 0, d + _P, d)
    c = c0 + jnp.where(d > _P // 2, d - _P, d)
    return jnp.where(r < 0, 0, jnp.where(v >= _SAT, _SAT, c))


def _split(L, s, K: int, binomials):
    """`split_py` from `binomials(s2, Lc) -> (beta(s2, r), beta(s2, r - 1),
    beta(s2, r - 2))` for the least r with beta(s2, r) >= Lc (0 below r = 0), where
    s2 = clip(s, 2, K) and Lc = clip(L, 1, SPLIT_EXACT_UP_TO)."""
    if K == 1:
        return L - 1
    L = jnp.asarray(L, np.int32)
    s = jnp.asarray(s, np.int32)
    beyond, below, left = binomials(jnp.clip(s, 2, K), jnp.clip(L, 1, SPLIT_EXACT_UP_TO))
    # beta(s - 1, r) = beta(s, r) - beta(s, r - 1).
    binomial = jnp.maximum(jnp.maximum(1, left), L - (beyond - below))
    return jnp.where(s <= 1, L - 1, binomial).astype(np.int32)


def split_jnp(L, s, K: int):
    """`split_py` as int32 jax.numpy code without a table (a table of more than 512
    bytes makes XLA:CPU run the whole loop body on its slower concurrent executor).

    r, the least r with beta(s, r) >= min(L, SPLIT_EXACT_UP_TO), lies in 16
    candidates from `lo`: (r+1)...(r+s) = s! beta(s, r) lies between (r+1)^s and
    (r+(s+1)/2)^s, so r is within s/2 + 2 of (s! L)^(1/s) - (s+1)/2 for s <= 16,
    and below 12 for larger s. Float32 products count the candidates below L (a
    count off by at most one, at the boundary); of five exact binomials around it,
    beta(s, r) is the least at or beyond L, beta(s, r - 1) and beta(s, r - 2) the
    two largest below. Equal to `split_py` for K <= 2342 (where `beta_table` ends);
    beyond, splits may be longer than optimal, but never below 1, so the reversal
    stays correct."""
    def binomials(s2, Lc):
        sf = s2.astype(np.float32)
        root = jnp.exp(jnp.log(Lc.astype(np.float32) * jnp.asarray(_FACT)[jnp.minimum(s2, 16)])
                       / sf)
        lo = jnp.where(s2 <= 16,
                       jnp.maximum(0, jnp.floor(root - (sf + 1) / 2).astype(np.int32) - 1), 0)
        approx = _float_binomials(s2[..., None], lo[..., None] + np.arange(16, dtype=np.int32),
                                  K)
        r = lo + jnp.sum((approx < Lc[..., None].astype(np.float32)).astype(np.int32), axis=-1)
        cs = _binomials(s2[..., None], r[..., None] + np.arange(-3, 2, dtype=np.int32), K)
        Lx = Lc[..., None]
        below = jnp.max(jnp.where(cs < Lx, cs, 0), axis=-1)             # beta(s, r - 1)
        beyond = jnp.min(jnp.where(cs >= Lx, cs, _SAT), axis=-1)        # beta(s, r)
        left = jnp.max(jnp.where(cs < below[..., None], cs, 0), axis=-1)  # beta(s, r - 2)
        return beyond, below, left
    return _split(L, s, K, binomials)


def split_loop(L, s, K: int):
    """`split_py` as int32 jax.numpy code that searches r in a `lax.while_loop`, from
    beta(s, 0) = 1 up by `beta(s, r + 1) = beta(s, r) (s + r + 1) / (r + 1)` (exact
    with a quotient and remainder by r + 1; saturated at _SAT like `_binomials`).
    Equal to `split_jnp`. Its r steps are fewer than the L steps of the segment it
    splits (r < L for s >= 2)."""
    def binomials(s2, Lc):
        def body(carry):
            r, beyond, below, left = carry
            go = beyond < Lc
            a, d = s2 + r + 1, r + 1
            exact = beyond // d * a + beyond % d * a // d
            approx = beyond.astype(np.float32) * a.astype(np.float32) / d.astype(np.float32)
            nxt = jnp.where(approx >= _SAT, _SAT, exact)
            return (jnp.where(go, r + 1, r), jnp.where(go, nxt, beyond),
                    jnp.where(go, beyond, below), jnp.where(go, below, left))

        zero = jnp.zeros(jnp.broadcast_shapes(s2.shape, Lc.shape), np.int32)
        _, beyond, below, left = lax.while_loop(lambda c: jnp.any(c[1] < Lc), body,
                                                (zero, zero + 1, zero, zero))
        return beyond, below, left
    return _split(L, s, K, binomials)


def split(L, s, K: int):
    """`split_py` for the gradient While: `split_loop` under jax.jit on XLA:CPU,
    `split_jnp` elsewhere (`xla_cpu_choice`): XLA counts a loop body's flops once."""
    L, s = jnp.asarray(L, np.int32), jnp.asarray(s, np.int32)
    return bind_choice(_split_forms(K, jax.typeof(L), jax.typeof(s)), L, s)[0]


@functools.lru_cache(maxsize=256)
def _split_forms(K: int, L_aval, s_aval):
    """`split`'s two forms, traced once per `K` and argument types: a gradient While
    computes splits in several places, and a higher-order gradient retraces them
    many times."""
    def form(fn):
        return lambda L, s: [fn(L, s, K)]
    return choice_forms(form(split_loop), form(split_jnp), [L_aval, s_aval])


# ------------------------------------------------------------ online forward policy

def policy_init(K: int):
    """Initial state of the online storing policy (jax.numpy int32 / bool arrays):
    `[scalars, levels, dispensable]`, scalars `[i, o, p, s, last]` (Stumm and
    Walther's counters, then the slot of the latest store)."""
    levels = np.zeros(K, np.int32)
    levels[0] = EMPTY
    return [np.array([0, K, K, 1, 0], np.int32), levels, np.zeros(K, np.bool_)]


def policy_step_jnp(step, state, pos, K: int, xla_cpu: bool = False):
    """`(save, slot, state, pos)`: whether the forward While stores step `step`, where,
    and `pos` (the step each slot holds) updated.

    Stumm and Walther's scalar update runs every step. Wang and Moin's, over all K
    slots, is in use after (K+1)(K+2)/2 - 1 steps: with `xla_cpu` it runs in a
    `lax.cond` only then, and its slot's level is written in place after the cond
    (a level array out of the cond, XLA copied it twice a step); else it runs
    every step and elementwise selects keep its results or not. The slot of the
    latest store stands for `argmax(pos)`, which it equals whenever Wang and
    Moin's policy is in use (every slot is filled by then)."""
    scalars, levels, disp = state
    i, o, p, s, last = (scalars[j] for j in range(5))
    s = s > 0
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
    use_wm = step >= (K + 1) * (K + 2) // 2 - 1
    slots = np.arange(K, dtype=np.int32)
    if K == 1:
        save, slot = jnp.where(use_wm, False, sw_save), jnp.where(use_wm, 0, sw_slot)
    else:
        def wang_moin(levels, disp):
            """`(slot, its new level, disp)`: overwrite the latest dispensable
            checkpoint, else the latest one."""
            any_disp = jnp.any(disp)
            slot_disp = jnp.argmax(jnp.where(disp, pos, 0)).astype(np.int32)
            level_last = levels[last]
            disp = jnp.where(any_disp, disp & (slots != slot_disp), disp | (levels < level_last))
            return (jnp.where(any_disp, slot_disp, last), jnp.where(any_disp, 0, level_last + 1),
                    disp)

        if xla_cpu:
            wm_slot, level, disp = lax.cond(
                use_wm, wang_moin, lambda levels, disp: (last, levels[last], disp),
                levels, disp)
            levels = lax.dynamic_update_index_in_dim(levels, level, wm_slot, 0)
        else:
            wm_slot, level, wm_disp = wang_moin(levels, disp)
            levels = jnp.where(use_wm & (slots == wm_slot), level, levels)
            disp = jnp.where(use_wm, wm_disp, disp)
        save = jnp.where(use_wm, True, sw_save)
        slot = jnp.where(use_wm, wm_slot, sw_slot)
    keep = lambda new, old: jnp.where(use_wm, old, new)
    scalars = jnp.stack([keep(i2, i), keep(o2, o), keep(p2, p),
                         keep(s2, s).astype(np.int32), jnp.where(save, slot, last)])
    if xla_cpu:
        pos = lax.dynamic_update_index_in_dim(pos, jnp.where(save, step, pos[slot]), slot, 0)
    else:
        pos = jnp.where(save & (slots == slot), step, pos)
    return save, slot, [scalars.astype(np.int32), levels, disp], pos


def policy_step(step, state, pos, K: int):
    """`policy_step_jnp` for the forward While, in its XLA:CPU form under jax.jit on
    CPU (`xla_cpu_choice`)."""
    args = [step, *state, pos]
    save, slot, *state, pos = bind_choice(
        _policy_step_forms(K, *[jax.typeof(x) for x in args]), *args)
    return save, slot, state, pos


@functools.lru_cache(maxsize=256)
def _policy_step_forms(K: int, *avals):
    """`policy_step`'s two forms, traced once per `K` and argument types."""
    def form(xla_cpu):
        def step_fn(step, scalars, levels, disp, pos):
            save, slot, state, pos = policy_step_jnp(step, [scalars, levels, disp], pos, K,
                                                     xla_cpu)
            return [save, slot, *state, pos]
        return step_fn
    return choice_forms(form(True), form(False), avals)


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


__all__ = ["EMPTY", "beta_table", "forward_slots_py", "policy_init", "policy_step",
           "policy_step_jnp", "reversal_advances_py", "schedule_cost", "split", "split_jnp",
           "split_loop", "split_py"]

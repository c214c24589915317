"""The forms an emitted loop takes, one `LoopEmitter` each (`_loop_emitter.py`).

Loops run their k steps per iteration **unpredicated** where they can: a select
between steps would keep IREE from fusing them (sin 10k steps: 23 dispatches per
iteration, against 10). Every form gives the counter, the carry and the gradients
of k = 1 for every trip count, and the index a step sees is `i + s`, computed from
the carried `i` without reading anything back from the device. `count` is carried,
and read by the body, rather than recomputed after the loop: iree-compile 3.13
crashes (ScfWhileOpConversion) when a result the body overwrites without reading is
used after the loop.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import partial_eval as pe

from whilst._jax_compat import split_list
from whilst.ir._emit_ops import broadcast_scalar, const, less, subcomp
from whilst.ir._loop_emitter import LoopEmitter
from whilst.ir._tracing import COUNTER_AVAL, always_true, call, trace_closed
from whilst.ir.iree_forms._onehot import pick, selectable


class _LastStepsAfterLoop(LoopEmitter):
    """Runs the steps left after the last full iteration (fewer than k) once after
    the loop: unpredicated, keeping the carry after those that pass (a one-hot pick,
    bit for bit); predicated in fenced groups where that would pick among k + 1
    scalars (a scalar carry other than a counter: IREE 3.13 fuses the pick into one
    dispatch past its runtime's 32 bindings)."""
    def after_loop(self, i, results, stacks):
        if self.picks_scalars:
            results, pushed, taken, _ = self.steps(i, results, [], 0, fenced=True)
        else:
            _, pushed, _, seen = self.steps(i, results, self.read_popped(i), self.k,
                                            past_end=True)
            taken, *results = subcomp(self.ctx, self.last_steps, self.name_stack.extend("cond"),
                                      *self.cond_consts, i, self.bound,
                                      *(x for xs_s in seen for x in xs_s))
        ran = hlo.compare(taken, const(0), hlo.ComparisonDirectionAttr.get("GT"),
                          compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
        stacks = self.write_pushed(stacks, pushed, i, guard=ran)
        return hlo.add(i, taken), results, stacks


class CountedLoop(_LastStepsAfterLoop):
    """A counted loop (its test is its trip count `bound`) that runs k > 1 steps per
    iteration. IREE 3.13 keeps the counter of a loop tested `i < bound` on the host,
    so such a loop reads nothing back. As plain Python::

        i = 0
        while i < bound - (k - 1):              # the steps all run: they fuse
            for s in range(k):
                x = body(i + s, x)
            i += k
        xs = [x] + [x := body(i + s, x) for s in range(k)]  # fewer than k steps left
                                                # (a step past the end pops zeros)
        steps = bound - i
        return bound, xs[steps]                 # a one-hot pick, bit for bit
    """

    @property
    def first_predicated(self):
        return self.k

    def prepare(self):
        self.last_steps = _last_steps(always_true(self.cond_jaxpr.in_avals),
                                      len(self.cond_consts), self.k, self.strides)
        # (a traced maximum_iterations may be negative: no step runs, nothing wraps)
        self.loop_bound = hlo.subtract(hlo.maximum(self.bound, const(0)), const(self.k - 1))

    def cond_result(self, i, xs):
        return less(i, self.loop_bound)

    def pop_start(self, i):
        return hlo.add(hlo.subtract(self.loop_bound, i), const(self.pop_pad - 1))


class SpeculativeLoop(_LastStepsAfterLoop):
    """A loop whose test reads at most one scalar of the carry (`err > tol`) and that
    pops no rows runs on: an iteration that runs past the loop's end is undone.
    As plain Python::

        i, count, go = 0, 0, 0 < bound and cond(0, x)
        while go:
            x0 = x
            for s in range(k):                  # no test between steps: they fuse
                x = body(i + s, x)
            full = all(i + s < bound and cond(i + s, x_s) for s in range(1, k))
            go = full and i + k < bound and cond(i + k, x)
            if not full:                        # an elementwise `select`
                x = x0
            count += k if full else 0
            i += k
        i = count                               # fewer than k steps left:
        xs = [x] + [x := body(i + s, x) for s in range(k)]  # unpredicated again
        steps = min([s for s in range(k) if not (i + s < bound and cond(i + s, xs[s]))]
                    + [k])
        return count + steps, xs[steps]         # a one-hot pick, bit for bit

    where `x_s` is the carry step `i + s` sees; the tests of `full` and of the last
    steps each run as one test vectorized over the steps (`_passes`).
    """
    rotated = True
    count_carried = True

    @property
    def first_predicated(self):
        return self.k

    def prepare(self):
        nconsts = len(self.cond_consts)
        self.all_pass = _all_pass(self.cond_jaxpr, nconsts, self.k, self.strides)
        if not self.picks_scalars:
            self.last_steps = _last_steps(self.cond_jaxpr, nconsts, self.k, self.strides)

    def after_steps(self, i, seen):
        self.all_active, = subcomp(self.ctx, self.all_pass, self.name_stack.extend("cond"),
                                   *self.cond_consts, i, self.bound,
                                   *(x for xs_s in seen[1:self.k] for x in xs_s))

    def undo(self, xs, old_xs, taken):
        xs = [hlo.select(broadcast_scalar(self.all_active, n.type), n, x)
              for n, x in zip(xs, old_xs)]
        return xs, hlo.multiply(hlo.convert(self.i32, self.all_active), const(self.k))

    def full(self, taken):
        return self.all_active


class PredicatedLoop(LoopEmitter):
    """Every other loop (loops that pop rows and are not counted; tests that read
    more of the carry, not yet measured unpredicated; loops that would pick among
    k + 1 scalars) predicates every step after the first::

        i, count, go = 0, 0, 0 < bound and cond(0, x)
        while go:
            x = body(i, x); steps = 1           # the step the loop test admitted
            for s in range(1, k):               # predicated steps, no branches
                p = i + s < bound and cond(i + s, x)
                x = body(i + s, x) if p else x  # an elementwise `select`
                steps += p
            i += k
            count += steps
            go = steps == k and i < bound and cond(i, x)
        return count, x

    A counted loop needs neither `count` nor `go`: its test is on i and the bound,
    in the cond region, and its counter min(i, bound). Neither does a loop of one
    step per iteration under `jax.jit`, whose cond region tests `i < bound and
    cond(i, x)` (the carried `go` is for IREE: `_while_lowering.py`).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        reads_carry = any(_carries_read(self.cond_jaxpr, len(self.cond_consts)))
        exported = self.ctx.module_context.lowering_parameters.for_export
        self.rotated = not self.counted and (self.k > 1 or (reads_carry and exported))
        self.count_carried = self.k > 1 and not self.counted

    def after_loop(self, i, results, stacks):
        if self.k > 1 and not self.count_carried:
            i = hlo.minimum(i, self.bound)
        return i, results, stacks


class OneIteration(LoopEmitter):
    """A forward loop that pushes and pops no rows, tests its carry, and takes at
    most k steps (its static bound): one iteration of k predicated steps, in a
    While that IREE 3.13 counts on the host (its test `i < 1` reads nothing back,
    where the loop's own test would be read back before and after the steps)::

        count = 0
        for s in range(k):                      # predicated steps, no branches
            p = s < bound and cond(s, x)
            x = body(s, x) if p else x          # an elementwise `select`
            count += p
        return count, x
    """
    count_carried = True
    first_predicated = 0

    def cond_result(self, i, xs):
        return less(i, const(1))


def loop_form(k, counted, pops, picks_scalars, cond_jaxpr, cond_nconsts,
              static_bound=None, plain=False) -> type:
    """The form of a loop of k steps per iteration: `OneIteration`, `CountedLoop`,
    `SpeculativeLoop` or `PredicatedLoop` (see each). `plain`: a forward loop that
    pushes and pops no rows and keeps no checkpoints, exported."""
    if plain and not counted and static_bound is not None and static_bound <= k:
        return OneIteration
    if k > 1 and counted and not picks_scalars:
        return CountedLoop
    if k > 1 and not counted and not pops and _tests_one_scalar(cond_jaxpr, cond_nconsts):
        return SpeculativeLoop
    return PredicatedLoop


def _all_pass(cond_jaxpr, cond_nconsts, k, strides) -> ClosedJaxpr:
    """`all_pass(*cond_consts, i, bound, *xs_1, ..., *xs_(k-1))`: whether steps
    i + 1 .. i + k - 1 all pass the loop test, `xs_s` being the carry step i + s
    sees (`_passes`)."""
    nconsts, avals = cond_nconsts, cond_jaxpr.in_avals

    def all_pass(*args):
        consts, (i, bound), flat = split_list(args, [nconsts, 2])
        return [jnp.all(_passes(cond_jaxpr, consts, strides, i, bound, 1, k - 1, flat))]

    return trace_closed(all_pass, [*avals[:nconsts], COUNTER_AVAL, COUNTER_AVAL,
                                   *avals[nconsts + 1:] * (k - 1)], "all_pass")


def _last_steps(cond_jaxpr, cond_nconsts, k, strides) -> ClosedJaxpr:
    """`last_steps(*cond_consts, i, bound, *xs_0, ..., *xs_k) -> (steps, *x)`: how
    many of steps i .. i + k - 1 pass the loop test, each admitted by those before
    it (`_passes`; the first that fails, or k), and `x = xs_steps`, picked bit for
    bit by one-hot reductions over the k + 1 carries (`_pick_step`)."""
    nconsts, avals = cond_nconsts, cond_jaxpr.in_avals
    ncarry = len(avals) - nconsts - 1

    def last_steps(*args):
        consts, (i, bound), flat = split_list(args, [nconsts, 2])
        passes = _passes(cond_jaxpr, consts, strides, i, bound, 0, k, flat[:k * ncarry])
        s = jnp.arange(k, dtype=np.int32)
        # Fenced: with aggressive fusion, iree-compile 3.13 fuses the reduction into
        # one of its users and fails on the others ("operand #0 does not dominate
        # this use", iree_limits/reproduce.py aggressive_fusion_dominance).
        steps = lax.optimization_barrier(jnp.min(jnp.where(passes, np.int32(k), s)))
        per_step = [flat[s * ncarry:(s + 1) * ncarry] for s in range(k + 1)]
        return [steps, *(_pick_step(column, steps, d)
                         for d, column in zip(strides, zip(*per_step)))]

    return trace_closed(last_steps, [*avals[:nconsts], COUNTER_AVAL, COUNTER_AVAL,
                                     *avals[nconsts + 1:] * (k + 1)], "last_steps")


def _passes(cond_jaxpr, consts, strides, i, bound, first, m, flat):
    """`[i + s < bound and cond(i + s, xs_s) for s in first .. first + m - 1]` for
    the carries `flat = [*xs_first, ..., *xs_(first+m-1)]`. The test runs once,
    vectorized over the m steps (`jax.vmap`): one test per step costs IREE 3.13 a
    dozen small dispatches per emitted iteration. A read carry with an integer
    stride d (`integer_strides`) is tested at `xs_first + d * [0, ..., m - 1]`
    (in its dtype's wrapping arithmetic, as the steps compute it), not at the m
    scalars the steps computed: IREE 3.13 gives stacking those scalars several
    dispatches per emitted iteration (sin 10k steps: 10 dispatches per emitted
    iteration, against 1)."""
    read = _carries_read(cond_jaxpr, len(consts))
    ncarry = len(read)
    per_step = [flat[s * ncarry:(s + 1) * ncarry] for s in range(m)]
    # Carries the test does not read are passed once, unbatched.
    columns = [column[0] if not r else jnp.stack(column) if d is None else
               column[0] + _multiples(d, m, column[0].dtype)
               for r, d, column in zip(read, strides, zip(*per_step))]
    s = jnp.arange(first, first + m, dtype=np.int32)
    tests = jax.vmap(lambda index, *xs: call(cond_jaxpr, *consts, index, *xs)[0],
                     in_axes=(0, *(0 if r else None for r in read)))(i + s, *columns)
    return jnp.logical_and(s < bound - i, tests)


def _pick_step(column, steps, stride):
    """`column[steps]`, bit for bit: `column[0] + stride * steps` for a carry with
    an integer stride, else `_onehot.pick` of the stacked steps (a chain of
    selects of the steps themselves where that takes no such dtype)."""
    if stride is not None:
        dtype = column[0].dtype
        return column[0] + steps.astype(dtype) * _multiples(stride, 2, dtype)[1]
    if not selectable(column[0].dtype):
        chosen = column[0]
        for s, x in enumerate(column[1:], 1):
            chosen = jnp.where(steps == s, x, chosen)
        return chosen
    stacked = lax.optimization_barrier(jnp.stack(column))
    return pick(stacked, steps, 0)[0]


def _carries_read(cond_jaxpr, cond_nconsts) -> list[bool]:
    """For each carry, whether cond reads it."""
    _, used = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
    return used[cond_nconsts + 1:]


def _tests_one_scalar(cond_jaxpr, cond_nconsts) -> bool:
    """Whether cond reads at most one carry, a scalar: the tests that the
    unpredicated form takes (it was measured on those only: sin, the test corpus)."""
    read = [a for a, r in zip(cond_jaxpr.in_avals[cond_nconsts + 1:],
                              _carries_read(cond_jaxpr, cond_nconsts)) if r]
    return len(read) <= 1 and all(a.shape == () for a in read)


def _multiples(d: int, m: int, dtype) -> np.ndarray:
    """`[0, d, ..., (m - 1) d]` in integer `dtype`, wrapped as its arithmetic wraps."""
    bits = np.iinfo(dtype).bits
    return np.array([s * d % 2 ** bits for s in range(m)], np.uint64).astype(dtype)

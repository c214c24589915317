"""The shared emitter of a `functional_while_p` lowering: one `stablehlo.while` whose
iterations run k loop steps each.

`LoopEmitter.emit` builds the op the same way for every loop form: carried
`(i, [pred], [count], *carry, *stacks)`, `i` advancing by k (so that row indices
stay computable on the host), k steps of the body per iteration, their residual
rows written as one chunk and popped rows read as one. What differs between forms
(`_loop_forms.py`) are the hooks: which steps are predicated, what the cond region
tests, how an iteration that ran past the loop's end is undone, and what runs after
the loop.
"""
from __future__ import annotations

import numpy as np
from jax.core import ShapedArray
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir

from whilst._jax_compat import broadcast_in_dim, split_list
from whilst.ir._buffers import uninitialized_values
from whilst.ir._emit_ops import broadcast_scalar, const, less, subcomp
from whilst.ir._emit_rows import read_rows, write_rows
from whilst.ir._predicated_writes import predicated_writes
from whilst.ir._tracing import PRED_AVAL, holds_a_loop
from whilst.ir.iree_forms._unread_carries import read_every_carry

ROLE_ATTR = "whilst.role"
NAME_ATTR = "whilst.name"
UNROLL_ATTR = "whilst.unroll"
# A While over a budget's chunks (`reverse/_policy.py`, `over_chunks`): a unit attribute.
OVER_CHUNKS_ATTR = "whilst.over_chunks"
# Predicated steps after the loop are fenced off in groups of at most this many
# carries (steps times carries): IREE 3.13 fuses a longer chain into one dispatch
# with a result per step and carry, past the 32 bindings its runtime accepts
# (iree_limits/wide_scalar_dispatch.mlir).
EPILOGUE_GROUP_CARRIES = 16


class LoopEmitter:
    """Emits one loop; a form subclasses it and sets the hooks below.

    `bound` is the loop's bound (its trip count for a counted loop: its test is
    `i < bound` alone), `k` the steps per emitted iteration.
    """
    rotated = False        # the test of the next iteration is carried as a boolean
    count_carried = False  # the steps taken are counted in a carry (i advances by k)
    first_predicated = 1   # steps from this one on are predicated on their own test

    def __init__(self, ctx, name_stack, *, cond_jaxpr, body_jaxpr, cond_consts, consts, popped,
                 bound, carry, k, counted, strides, picks_scalars, name, role, row_offset, pop_pad,
                 over_chunks=False):
        self.ctx, self.name_stack = ctx, name_stack
        self.cond_jaxpr, self.body_jaxpr = cond_jaxpr, body_jaxpr
        self.cond_consts, self.consts, self.popped = cond_consts, consts, popped
        self.bound, self.carry, self.k, self.counted = bound, carry, k, counted
        self.name, self.role, self.row_offset, self.pop_pad = name, role, row_offset, pop_pad
        self.over_chunks = over_chunks
        self.ncarry = len(carry)
        self.i32 = mlir.aval_to_ir_type(ctx.module_context, ShapedArray((), np.int32))
        self.carry_avals, self.stack_avals = split_list(ctx.avals_out[1:], [self.ncarry])
        nconsts = len(cond_consts) + len(consts) + len(popped)
        self.pop_avals = ctx.avals_in[nconsts - len(popped):][:len(popped)]
        self.strides = strides  # `integer_strides` of the carries
        # (whether the carry holds a scalar other than a counter)
        self.picks_scalars = picks_scalars
        self._predicated = None  # `predicated_writes` of the body, once a step needs it
        self.loop_in_body = bool(popped) and holds_a_loop(body_jaxpr.jaxpr)

    # ---------------------------------------------------------------- the hooks

    def prepare(self) -> None:
        """Values the form needs before the loop (emitted before it)."""

    def cond_result(self, i, xs):
        """The cond region's test of `(i, *xs)`, xs as carried."""
        if self.rotated:
            return xs[0]
        return self.predicate(i, xs[:self.ncarry])

    def after_steps(self, i, seen) -> None:
        """Called after the body's k steps, with the carries the steps saw."""

    def undo(self, xs, old_xs, taken):
        """`(xs, taken)` once an iteration that ran past the loop's end is undone."""
        return xs, taken

    def full(self, taken):
        """Whether all k steps of the iteration ran."""
        return hlo.compare(taken, const(self.k), hlo.ComparisonDirectionAttr.get("EQ"),
                           compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))

    def pop_start(self, i):
        """The row of the popped stacks that step i + k - 1 pops."""
        return hlo.add(hlo.subtract(self.bound, hlo.add(i, const(self.k - 1))),
                       const(self.pop_pad - 1))

    def after_loop(self, i, results, stacks):
        """`(i, results, stacks)` after the loop."""
        return i, results, stacks

    # ---------------------------------------------------------------- shared parts

    def predicate(self, i, xs):
        """`i < bound and cond(i, *xs)` (`i < bound` for a counted loop)."""
        in_bound = less(i, self.bound)
        if self.counted:
            return in_bound
        (pred,) = subcomp(self.ctx, self.cond_jaxpr, self.name_stack.extend("cond"),
                          *self.cond_consts, i, *xs)
        return hlo.and_(in_bound, pred)

    def counted_tests(self, i):
        """`i + arange(k) < bound`, one vector compare (IREE 3.13 computes the
        k scalar tests of a counted loop on the host and fills a buffer with each)."""
        k, bound = self.k, self.bound
        vec = ir.RankedTensorType.get([k], ir.IntegerType.get_signless(32))
        offsets = mlir.ir_constant(np.arange(k, dtype=np.int32))
        at = hlo.add(hlo.broadcast_in_dim(vec, i, []), offsets)
        return hlo.compare(at, hlo.broadcast_in_dim(vec, bound, []),
                           hlo.ComparisonDirectionAttr.get("LT"),
                           compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))

    def step(self, i, xs, rows_in):
        """One step of the body: `(carry, pushed rows)`."""
        outs = subcomp(self.ctx, self.body_jaxpr, self.name_stack.extend("body"),
                       *self.consts, *rows_in, i, *xs)
        return outs[:self.ncarry], outs[self.ncarry:]

    def predicated_step(self, active, i, xs, rows_in):
        """One step of the body whose carry is kept where `active` is false:
        `(carry, pushed rows)`. Carries the body writes at one window select that
        window alone (`_predicated_writes`), the others their whole value."""
        if self._predicated is None:
            self._predicated = predicated_writes(
                self.body_jaxpr, len(self.consts) + len(self.popped), self.ncarry) or False
        if not self._predicated:
            new, rows = self.step(i, xs, rows_in)
            written = [False] * self.ncarry
        else:
            body, written = self._predicated
            outs = subcomp(self.ctx, body, self.name_stack.extend("body"),
                           active, *self.consts, *rows_in, i, *xs)
            new, rows = outs[:self.ncarry], outs[self.ncarry:]
        xs = [n if w else hlo.select(broadcast_scalar(active, n.type), n, x)
              for n, x, w in zip(new, xs, written)]
        return xs, rows

    def steps(self, i, xs, popped_rows, first_predicated, fenced=False, past_end=False):
        """k steps from step `i`, those from `first_predicated` on predicated on their
        own test: `(xs, pushed chunks, steps taken (i32), seen)`, where `seen[s]` is
        the carry step i + s sees (s = 0 .. k; unpredicated steps only). `fenced`:
        in groups of EPILOGUE_GROUP_CARRIES carries. `past_end`: unpredicated steps
        may lie past the loop's end too (those after a counted loop). A step past the
        end of a loop whose body runs a loop pops rows of zeros (`popped_if`)."""
        k = self.k
        pushed = [[] for _ in self.stack_avals]
        taken, seen = const(min(first_predicated, k)), [xs]
        group = max(1, EPILOGUE_GROUP_CARRIES // (self.ncarry + 1))
        lanes = self.counted_tests(i) if self.counted and k > 1 else None
        for s in range(k):
            index = i if s == 0 else hlo.add(i, const(s))
            rows_in = [rows[k - 1 - s] for rows in popped_rows]
            zeroed = bool(rows_in) and self.loop_in_body
            active = None
            if s >= first_predicated or (past_end and zeroed):
                active = (self.predicate(index, xs) if lanes is None else
                          hlo.reshape(ir.RankedTensorType.get([], ir.IntegerType.get_signless(1)),
                                      hlo.slice(lanes, [s], [s + 1], [1])))
                if zeroed:
                    rows_in = self.popped_if(active, rows_in)
            if s >= first_predicated:
                xs, rows = self.predicated_step(active, index, xs, rows_in)
                taken = hlo.add(taken, hlo.convert(self.i32, active))
            else:
                xs, rows = self.step(index, xs, rows_in)
                seen.append(xs)
            for chunk, r in zip(pushed, rows):
                chunk.append(r)
            if fenced and s % group == group - 1 < k - 1:
                xs = list(hlo.OptimizationBarrierOp([*xs, taken]).results)
                xs, taken = xs[:-1], xs[-1]
        return xs, pushed, taken, seen

    def popped_if(self, active, rows):
        """The popped `rows` if the step is `active`, else zeros. The rows a step past
        the loop's end pops were never written (the pad below row `pop_pad`), and
        its body, whose results are then dropped, still runs on them: where it runs
        a loop, a trip count read from one would size that loop (billions of steps).
        Other bodies compute only values that are dropped, for which no select is
        spent."""
        return [hlo.select(broadcast_scalar(active, r.type), r,
                           broadcast_in_dim(self.ctx, mlir.ir_constant(np.zeros((), a.dtype)),
                                            a.update(shape=a.shape[1:]), broadcast_dimensions=[]))
                for r, a in zip(rows, self.pop_avals)]

    def read_popped(self, i):
        """The k rows of each popped stack that steps i .. i + k - 1 pop
        (bound - 1 + pop_pad - i - s), at a position computed from the loop's
        bound (IREE 3.13 reads other values back every iteration)."""
        if not self.popped:
            return []
        start = self.pop_start(i)
        return [read_rows(self.ctx, p, a, start, self.k)
                for p, a in zip(self.popped, self.pop_avals)]

    def write_pushed(self, stacks, pushed, i, guard=None):
        """`stacks` with the rows of steps i .. i + k - 1 written; with `guard`, the
        rows are written only where `guard` holds (else the rows there are kept).
        Within the loop of a loop with a test of its own, IREE 3.13 keeps `i` on the
        device: its rows are scattered (`write_rows`; not rows of unsigned
        integers, whose scatters iree-compile 3.13 fails on,
        `iree_limits/unsigned_scatter.mlir`)."""
        at = hlo.add(i, const(self.row_offset))
        out = []
        for st, a, rs in zip(stacks, self.stack_avals, pushed):
            scatter = (guard is None and not self.counted
                       and not np.issubdtype(a.dtype, np.unsignedinteger))
            out.append(write_rows(self.ctx, st, a, rs, at, guard, scatter))
        return out

    # ---------------------------------------------------------------- the op

    def emit(self) -> list:
        """The lowering's results: `[counter, *carry, *stacks]`."""
        ctx = self.ctx
        self.prepare()
        stacks0 = uninitialized_values(ctx, self.stack_avals)
        pred_type = mlir.aval_to_ir_type(ctx.module_context, PRED_AVAL)
        self.extra_types = (([pred_type] if self.rotated else [])
                            + ([self.i32] if self.count_carried else []))
        loop_types = [self.i32, *self.extra_types,
                      *(mlir.aval_to_ir_type(ctx.module_context, a)
                        for a in ctx.avals_out[1:])]
        extra_init = ([self.predicate(const(0), self.carry)] if self.rotated else []) + (
            [const(0)] if self.count_carried else [])
        while_op = hlo.WhileOp(loop_types, [const(0), *extra_init, *self.carry, *stacks0])
        while_op.attributes[ROLE_ATTR] = ir.StringAttr.get(self.role)
        while_op.attributes[NAME_ATTR] = ir.StringAttr.get(self.name)
        while_op.attributes[UNROLL_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32),
                                                              self.k)
        if self.over_chunks:
            while_op.attributes[OVER_CHUNKS_ATTR] = ir.UnitAttr.get()
        cond_block = while_op.regions[0].blocks.append(*loop_types)
        with ir.InsertionPoint(cond_block):
            i, *xs = cond_block.arguments
            hlo.return_([self.cond_result(i, xs)])
        body_block = while_op.regions[1].blocks.append(*loop_types)
        with ir.InsertionPoint(body_block):
            hlo.return_(self._body(body_block.arguments))
        return self._results(while_op)

    def _body(self, arguments) -> list:
        """The body region's results for its `arguments`."""
        k = self.k
        i, *xs = arguments
        xs, stacks = split_list(xs[len(self.extra_types):], [self.ncarry])
        old_xs = xs
        xs, pushed, taken, seen = self.steps(i, xs, self.read_popped(i), self.first_predicated)
        self.after_steps(i, seen)
        xs = read_every_carry(self.body_jaxpr, len(self.consts) + len(self.popped), i,
                              old_xs, xs)
        new_i = hlo.add(i, const(k))
        if self.rotated:
            go_on = self.predicate(new_i, xs)
        xs, taken = self.undo(xs, old_xs, taken)
        stacks = self.write_pushed(stacks, pushed, i)
        extra = []
        if self.rotated:
            # AND-ed with the carried predicate (true whenever the body runs), so
            # that the body reads it: otherwise IREE 3.13's stream conversion fails
            # on the loop ("'scf.while' op ... region branch point has 6 operands,
            # but region successor needs 8 inputs") unless its loop-invariant code
            # motion happens to find code to hoist out of the body
            # (iree_limits/unread_loop_predicate.mlir).
            pred = hlo.and_(go_on, arguments[1])
            if k > 1:
                pred = hlo.and_(pred, self.full(taken))
            extra.append(pred)
        if self.count_carried:
            extra.append(hlo.add(arguments[len(self.extra_types)], taken))
        return [new_i, *extra, *xs, *stacks]

    def _results(self, while_op) -> list:
        i, *results = while_op.results
        results, stacks = split_list(results[len(self.extra_types):], [self.ncarry])
        if self.count_carried:
            i = while_op.results[len(self.extra_types)]
        i, results, stacks = self.after_loop(i, results, stacks)
        return [i, *results, *stacks]

"""Rows of a step's inputs, its residuals recomputed from them by the gradient.

A step's residual rows (`StepResiduals`) may take computation of their own, which
the primal does not need: `y <- sin(a y)` keeps `cos(a y)` (and `y`). Past the
budget, a chunk run again to remake its rows pays for it again, and the rows'
bytes set how many steps a chunk holds. Keeping instead the step inputs those
residuals are computed from (here `y`), and recomputing the residuals in the
gradient's step, costs the same work once and makes a chunk run again cost the
primal only::

    advance(*hoisted, i, *carry) -> carry             # the body without its rows
    residuals(*used_hoisted, *inputs) -> rows         # inputs = [i, *carry][used]
    primal'(*hoisted, i, *carry) = (*advance(...), *inputs)
    lin'(*invariants, *used_hoisted, *inputs, *dconsts, *dcarry) =
        lin(*invariants, *residuals(*used_hoisted, *inputs), *dconsts, *dcarry)

XLA:CPU fuses a recomputed residual into each of its uses (`cos(a y)` into the
cotangents of `y` and of `a`: computed twice); there it is computed once, behind an
optimization barrier (`xla_cpu_choice`: IREE 3.13 fails to compile the barrier in
a loop body, "failed to solve for timepoint coverage").

`carried_rows` says whether it pays (`_unroll.work`, transcendentals weighed): the
residuals recomputed from the inputs cost at most RECOMPUTED_SHARE times what the
rows cost apart from the primal, and their rows take fewer bytes. `x <- tanh(W x)`
keeps `x` and `tanh(W x)`, the step's input and output, which cost nothing apart:
recomputing them would cost the step again. Reverse mode uses it only where the
residual rows do not fit the budget (where they fit, each step's are computed
once) and no further reverse-mode derivative is to come (it would differentiate
the recomputation in the gradient's step too).
"""
from __future__ import annotations

from jax import lax
from jax.extend.core import ClosedJaxpr, Jaxpr
from jax.interpreters import partial_eval as pe

from whilst._jax_compat import is_constant_shape, split_list
from whilst.ir._inspect import holds_loops
from whilst.ir._tracing import call, trace_closed
from whilst.ir._unroll import total_nbytes, work
from whilst.ir._xla_cpu_choice import xla_cpu_choice
from whilst.ir.reverse._packing import RowPacking
from whilst.ir.reverse._stored import StepResiduals

# What the residuals recomputed from the step's inputs may cost, in times what
# the rows cost apart from the primal (the work a chunk run again skips).
RECOMPUTED_SHARE = 1.5

# A transcendental's elements weigh this many times others' in `_unroll.work`:
# on a CPU each is a libm call (`sin` costs some 20 multiplies).
TRANSCENDENTAL_WEIGHT = 16


def carried_rows(steps: StepResiduals, ncarry: int) -> StepResiduals | None:
    """`steps` keeping the step inputs its rows are computed from (see the module
    docstring), or None where that would not pay, where the rows hold no
    computation of their own, where the body holds loops or has effects (a
    recomputed effect would run twice), or where shapes are symbolic."""
    primal = steps.primal_jaxpr
    nrows = len(primal.out_avals) - ncarry
    nhoisted = len(steps.hoisted_consts)
    if (not nrows or steps.row_bytes is None or primal.effects or holds_loops(primal.jaxpr)
            or not all(is_constant_shape(a.shape) for a in primal.in_avals)):
        return None
    advance, _ = pe.dce_jaxpr(primal.jaxpr, [True] * ncarry + [False] * nrows,
                              instantiate=True)
    live, _ = pe.dce_jaxpr(primal.jaxpr, [True] * len(primal.out_avals), instantiate=True)
    residuals, used = pe.dce_jaxpr(primal.jaxpr, [False] * ncarry + [True] * nrows)
    apart = _work(live) - _work(advance)
    if apart <= 0 or _work(residuals) > RECOMPUTED_SHARE * apart:
        return None
    used_hoisted, used_inputs = split_list(used, [nhoisted])
    input_avals = [a for a, u in zip(primal.in_avals[nhoisted:], used_inputs) if u]
    packing = RowPacking.plan(input_avals)
    row_avals = packing.packed_avals
    row_bytes = total_nbytes(row_avals)
    if row_bytes >= steps.row_bytes:
        return None
    residuals = ClosedJaxpr(residuals, primal.consts)
    hoisted = [x for x, u in zip(steps.hoisted_consts, used_hoisted) if u]
    advance = ClosedJaxpr(advance, primal.consts)

    def primal_body(*args):
        inputs = [x for x, u in zip(args[nhoisted:], used_inputs) if u]
        return [*call(advance, *args), *packing.pack(inputs)]

    ninv, nh, nin = len(steps.invariants), len(hoisted), len(row_avals)

    def lin_body(*args):
        inv, h, packed, rest = split_list(args, [ninv, nh, nin])
        rows = call(residuals, *h, *packing.unpack(packed))
        rows = xla_cpu_choice(lambda *rows: list(lax.optimization_barrier(rows)),
                              lambda *rows: list(rows), *rows)
        return call(steps.lin_body, *inv, *rows, *rest)

    inv_avals, _, tangent_avals = split_list(steps.lin_body.in_avals,
                                             [ninv, len(steps.row_avals)])
    hoisted_avals = [a for a, u in zip(primal.in_avals[:nhoisted], used_hoisted) if u]
    return StepResiduals(
        trace_closed(primal_body, primal.in_avals, "primal_body"), steps.hoisted_consts,
        [*steps.invariants, *hoisted],
        trace_closed(lin_body, [*inv_avals, *hoisted_avals, *row_avals, *tangent_avals],
                     "linear_while_body"),
        row_avals, steps.const_nz, steps.carry_nz)


def _work(jaxpr: Jaxpr) -> int:
    return work(jaxpr, TRANSCENDENTAL_WEIGHT)

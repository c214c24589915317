"""IREE 3.13 (llvm-cpu): two loop carries that start from one value share a buffer
(whilst/lowering/_iree_loops.py), and so do two copies of it made to tell them apart
when the copies are equal expressions: `init + barrier(0)` twice is merged into one
value again. In the gradient of diffrax's Tsit5 (the stage loop's checkpoint arrays
of equinox's checkpointed while loop, nested in the step loop) one carry's writes
then overwrite another's, and the gradient comes out as zeros; the exported
StableHLO, whilst's IREE rewrites included, runs right on XLA. whilst's copies hold
a distinct constant each in their barrier (`barrier(0, k)`, `opaque_copy`), which
keeps them apart. Smaller modules (two carries of one loop, nested or not, written
by `dynamic_update_slice`) did not show it. This script builds the module both ways
and prints

    distinct copies   [ 116.29658  -450.3734     19.739883 -175.20479 ]
    equal copies      [0. 0. 0. 0.]
    want (JAX)        [ 116.29664  -450.37347    19.739916 -175.20506 ]

    EQX_ON_ERROR=nan python iree_limits/equal_barrier_copies.py   (needs diffrax)
"""
from _diffrax_lv import RATES, loss as lv_loss  # first: sets EQX_ON_ERROR for equinox

import diffrax
import jax

import whilst
import whilst.lowering._iree_loops as iree_loops
from whilst.integrations.diffrax import WhilstAdjoint


def loss(rates, adjoint):
    return lv_loss(rates, adjoint, saveat=diffrax.SaveAt(t1=True))


def gradient(equal_copies):
    saved = iree_loops.opaque_copy
    if equal_copies:
        iree_loops.opaque_copy = lambda value, before, serial=0: saved(value, before)
    try:
        grad = jax.grad(lambda p: loss(p, WhilstAdjoint()))
        return whilst.compile(grad, RATES, cache=False).load()(RATES)
    finally:
        iree_loops.opaque_copy = saved


if __name__ == "__main__":
    print("distinct copies  ", gradient(False))
    print("equal copies     ", gradient(True))
    print("want (JAX)       ", jax.grad(lambda p: loss(p, diffrax.RecursiveCheckpointAdjoint()))(
        RATES))

"""IREE 3.13 (llvm-cpu, default fusion): the gradient of diffrax's Tsit5 solve with
SaveAt ts (the SaveAt loop and the stage loop nested in the step loop, through
`WhilstAdjoint`) fails on every call ("ref is null; while invoking native function
hal.buffer.subspan") when its one-element gathers pass through optimization
barriers (`fenced_point_gathers`, whilst/lowering/_iree_fusion.py, which aggressive
fusion needs). Without those barriers it runs and matches JAX; so it does with them
when either the loop results' barriers (`loop_results_fenced`) or the small stacks'
selects (`small_stacks_as_selects`) are left out. Aggressive fusion crashes
iree-compile on this module, so `compile_module` falls back to the default fusion,
and compiles that without the gathers' barriers (`unfenced`). This script compiles
the module both ways and prints

    gathers unfenced  [ 1.0966234e+03 -5.7665532e+03  3.6766310e+00 -2.8706135e+01]
    gathers fenced    failed: main: the IREE runtime failed ... ref is null ...
    want (JAX)        [ 1.0966237e+03 -5.7665547e+03  3.6767001e+00 -2.8707970e+01]

    EQX_ON_ERROR=nan python iree_limits/fenced_gathers_default_fusion.py   (needs diffrax)

The barriers it needs unfenced are those on the gathers from a `stablehlo.case`'s
results: with only those left out it runs too (as `budget_chunk_stacks.py`'s budget
gradient, which fails the same way).
"""
from _diffrax_lv import RATES, loss as lv_loss  # first: sets EQX_ON_ERROR for equinox

import diffrax
import jax
import numpy as np

import whilst
import whilst.lowering._iree as iree_lowering
from whilst.integrations.diffrax import WhilstAdjoint


def loss(rates, adjoint):
    return lv_loss(rates, adjoint,
                   stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5),
                   saveat=diffrax.SaveAt(ts=np.linspace(0.0, 10.0, 21).astype(np.float32)))


def gradient(fenced):
    saved = iree_lowering.unfenced
    if fenced:
        iree_lowering.unfenced = lambda text: text
    try:
        module = whilst.compile(jax.grad(lambda p: loss(p, WhilstAdjoint())), RATES,
                                cache=False).load()
        return module(RATES)
    except RuntimeError as e:
        return f"failed: {str(e)[:160]}"
    finally:
        iree_lowering.unfenced = saved


if __name__ == "__main__":
    print("gathers unfenced ", gradient(False))
    print("gathers fenced   ", gradient(True))
    print("want (JAX)       ", jax.grad(lambda p: loss(p, diffrax.RecursiveCheckpointAdjoint()))(
        RATES))

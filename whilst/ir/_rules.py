"""Every rule of `functional_while_p`, registered in one block (as JAX registers
`while_p`'s at the end of `jax/_src/lax/control_flow/loops.py`). `whilst.ir`
imports this module once; no other module registers a rule of `functional_while_p`.

    evaluation, abstract eval, forward mode, batching   _functional_while.py
    reverse mode (the gradient policies)                reverse/_linearization.py
    partial evaluation for remat, transposition         _partial_eval.py
    MLIR lowering                                       _while_lowering.py
    checkify (run-time errors)                          _checkify.py

The linear While primitives of reverse mode register their rules beside them, one
block each (`reverse/_stored.py`, `reverse/_checkpointed.py`, `reverse/_budget.py`).
"""
from jax.interpreters import ad, batching, mlir
from jax.interpreters import partial_eval as pe

from whilst._jax_compat import def_error_check, def_linearization
from whilst.ir._checkify import functional_while_error_check
from whilst.ir._functional_while import (
    functional_while_abstract_eval, functional_while_batching, functional_while_impl,
    functional_while_jvp, functional_while_p)
from whilst.ir._partial_eval import (
    functional_while_partial_eval, functional_while_partial_eval_custom,
    functional_while_transpose)
from whilst.ir._while_lowering import functional_while_lowering
from whilst.ir.reverse._linearization import functional_while_linearization

functional_while_p.def_impl(functional_while_impl)
functional_while_p.def_effectful_abstract_eval(functional_while_abstract_eval)
ad.primitive_jvps[functional_while_p] = functional_while_jvp
batching.fancy_primitive_batchers[functional_while_p] = functional_while_batching
def_linearization(functional_while_p, functional_while_linearization)
pe.custom_partial_eval_rules[functional_while_p] = functional_while_partial_eval
pe.partial_eval_jaxpr_custom_rules[functional_while_p] = functional_while_partial_eval_custom
ad.primitive_transposes[functional_while_p] = functional_while_transpose
mlir.register_lowering(functional_while_p, functional_while_lowering)
def_error_check(functional_while_p, functional_while_error_check)

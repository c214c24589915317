"""The IR: the functional While primitive and all its rules (forward mode, batching,
reverse mode with the gradient While, partial evaluation for remat, MLIR lowering).
Importing any part of `whilst.ir` registers every rule of every primitive defined here."""
from whilst.ir import _rules  # noqa: F401 (registers the rules of functional_while_p)
from whilst.ir._buffers import uninitialized_p
from whilst.ir.reverse._checkpointed import (
    checkpointed_linear_while_p, expand_checkpointed_linear_while)
from whilst.ir.reverse._schedule import schedule_cost
from whilst.ir._functional_while import (
    COUNTER_AVAL, ROLES, UNBOUNDED, functional_while, functional_while_p, split_operands)
from whilst.ir.reverse._policy import (
    DEFAULT_GRADIENT_MEMORY, MAX_SCHEDULED_CHECKPOINTS, Budget, Checkpointed, EveryStep,
    gradient_policy, stores_every_step)
from whilst.ir._inspect import ResidualReport, iter_loops, residual_report, trace
from whilst.ir.reverse._stored import expand_linear_while, linear_while_p
from whilst.ir._tracing import trace_with_consts
from whilst.ir._unroll import unroll_factor
from whilst.ir._while_lowering import exported_loop_forms

__all__ = [
    "Budget", "COUNTER_AVAL", "Checkpointed", "DEFAULT_GRADIENT_MEMORY", "EveryStep",
    "MAX_SCHEDULED_CHECKPOINTS", "ROLES", "UNBOUNDED",
    "ResidualReport",
    "checkpointed_linear_while_p", "expand_checkpointed_linear_while", "expand_linear_while",
    "exported_loop_forms", "functional_while",
    "functional_while_p", "gradient_policy", "iter_loops", "linear_while_p", "residual_report",
    "schedule_cost", "split_operands", "stores_every_step", "trace", "trace_with_consts",
    "uninitialized_p",
    "unroll_factor",
]

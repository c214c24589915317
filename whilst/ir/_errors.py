"""Errors raised by the IR rules, worded for the person who wrote the loop."""
from __future__ import annotations


def unbounded_reverse_mode_error(name: str) -> ValueError:
    """The error for reverse mode through a loop with no trace-time bound."""
    return ValueError(
        f"Reverse-mode differentiation (jax.grad, jax.vjp, jax.linearize) through "
        f"whilst.while_loop {name!r} needs a bound on the number of iterations that is "
        f"known at trace time, to preallocate the stacks of stored steps; this loop has "
        f"no maximum_iterations, or one that is a traced value. Either pass "
        f"maximum_iterations=<a Python int> to while_loop (the stacks hold that many "
        f"rows and the gradient runs only the steps actually taken), or pass "
        f"checkpoints=K for a checkpointed gradient, which keeps K copies of the loop "
        f"variables and recomputes the steps between them (no bound needed).")

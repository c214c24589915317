"""`jax.lax`'s loops on whilst's functional While: `while_loop` and `fori_loop` with
JAX's signatures and semantics, differentiable in reverse mode and compiled by
IREE like `whilst.while_loop`."""
from whilst.frontend._lax import fori_loop, while_loop

__all__ = ["fori_loop", "while_loop"]

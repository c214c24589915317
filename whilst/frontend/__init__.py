"""The user-facing API: `while_loop` and its argument checks."""
from whilst.frontend._while_loop import while_loop

__all__ = ["while_loop"]

"""The user-facing loops: `while_loop` (TensorFlow's signature, `_while_loop`) and
`whilst.lax`'s `while_loop` and `fori_loop` (JAX's, `_lax`), each adapting its
signature to the one loop over a flat carry that both bind (`_flat_loop`); and
`TensorArray` (`tensor_array`), which both take among their loop variables."""
from whilst.frontend._while_loop import while_loop
from whilst.frontend.tensor_array import TensorArray

__all__ = ["TensorArray", "while_loop"]

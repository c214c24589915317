"""PRNG key loop variables, carried as their key data.

A loop variable may be an array of typed PRNG keys (`jax.random.key(0)`). The
functional While carries plain arrays only (its stacks, checkpoints and IREE
exports take numeric dtypes), so a key leaf travels as `jax.random.key_data`
and is wrapped again where the user's cond and body see it::

    raw = [key_data(x) if is_key(x) else x for x in leaves]
    body'(*raw) = [key_data(y) if is_key(x) else y
                   for x, y in zip(leaves, body(*wrap(raw)))]
    results = wrap(while_loop(cond o wrap, body', raw))
"""
from __future__ import annotations

import jax


def is_key(x) -> bool:
    """Whether `x` is an array of typed PRNG keys."""
    return jax.numpy.issubdtype(x.dtype, jax.dtypes.extended)


class KeyLeaves:
    """The key leaves of a flat carry: which are keys, and of which implementation."""

    def __init__(self, leaves):
        self.impls = [jax.random.key_impl(x) if is_key(x) else None for x in leaves]

    def raw(self, leaves):
        """The leaves with each key replaced by its key data."""
        return [x if impl is None else jax.random.key_data(x)
                for x, impl in zip(leaves, self.impls)]

    def wrap(self, raw):
        """Inverse of `raw`."""
        return [x if impl is None else jax.random.wrap_key_data(x, impl=impl)
                for x, impl in zip(raw, self.impls)]


def check_output(api, path, out, dtype):
    """A body output `out` for a leaf that starts with `dtype`: a key of that
    dtype for a key, no key for a numeric leaf; else a TypeError naming `path`."""
    key = jax.numpy.issubdtype(dtype, jax.dtypes.extended)
    if key != is_key(out) or (key and out.dtype != dtype):
        raise TypeError(
            f"{api}: body output {path} has dtype {out.dtype}, but {path} starts with "
            f"dtype {dtype}. A PRNG key must come back a key of the same implementation "
            f"(from jax.random.split or fold_in of it), and a numeric value numeric.")

"""Argument checks for both frontends' loops: each error names the argument and
pytree path, says what was expected and what was found, and ends with what to do."""
from __future__ import annotations

import inspect
import numbers
import operator
import warnings

import numpy as np

import jax
from jax import core as jax_core
from jax.tree_util import keystr

from whilst.ir import (
    MAX_SCHEDULED_CHECKPOINTS, UNBOUNDED, Checkpointed, gradient_policy, stores_every_step)


def path_name(root: str, path) -> str:
    """`("loop_vars", (SequenceKey(1), GetAttrKey("b")))` -> `"loop_vars[1].b"`."""
    return root + keystr(path)


def check_callables(cond, body, names=("cond", "body"), takes="one argument per entry of "
                    "loop_vars", api="while_loop"):
    for arg, fn in zip(names, (cond, body)):
        if not callable(fn):
            raise TypeError(
                f"{api}: {arg} must be callable, taking {takes}; found "
                f"{type(fn).__name__} {fn!r}. Pass a function or a lambda.")


def check_unpacking(cond, body, loop_vars):
    """cond and body can be called as `fn(*loop_vars)` (the TF signature), or a
    TypeError that shows how to write them."""
    for arg, fn in (("cond", cond), ("body", body)):
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins and C functions: checked by the call
            continue
        try:
            signature.bind(*loop_vars)
        except TypeError as e:
            raise TypeError(
                f"while_loop: {arg} is called as {arg}(*loop_vars), with one argument per "
                f"entry of loop_vars ({len(loop_vars)} here), as in tf.compat.v1.while_loop, "
                f"but it cannot take them ({e}). Write it as `lambda "
                f"{', '.join(f'v{k}' for k in range(len(loop_vars)))}: ...`; for "
                f"jax.lax.while_loop's style, wrap the state once: loop_vars=[state]. "
                f"(whilst.lax.while_loop has jax.lax's signature.)") from None


def check_loop_vars(loop_vars):
    if not isinstance(loop_vars, (list, tuple)):
        raise TypeError(
            f"while_loop: loop_vars must be a list or tuple with one entry per argument of "
            f"cond and body; found {type(loop_vars).__name__}. Wrap a single value as "
            f"[value].")
    if len(loop_vars) == 0:
        raise ValueError(
            "while_loop: loop_vars is empty; expected at least one loop variable. Pass "
            "the initial values as a list, e.g. loop_vars=[i0, x0].")


def to_array(path: str, leaf, api="while_loop"):
    """A loop-variable leaf as a JAX array, or a TypeError naming its path."""
    if isinstance(leaf, jax.Array):   # tracers too: `jnp.asarray` of one is one more op
        return leaf
    if isinstance(leaf, (np.ndarray, np.generic)):
        _check_narrowing(path, np.asarray(leaf), api)
    if isinstance(leaf, (np.ndarray, np.generic, numbers.Number)) or hasattr(
            leaf, "__jax_array__"):
        try:
            return jax.numpy.asarray(leaf)
        except OverflowError as e:  # a Python int beyond the default integer type
            raise ValueError(f"{api}: {path} is {leaf!r}, which does not fit JAX's "
                             f"integer type ({e}). Enable 64-bit types with "
                             f"jax.config.update('jax_enable_x64', True), or pass a float."
                             ) from None
    raise TypeError(
        f"{api}: {path} must be an array or a Python/numpy scalar; found "
        f"{type(leaf).__name__} {leaf!r}. Loop variables are pytrees (tuples, lists, "
        f"namedtuples, dicts) whose leaves are arrays.")


def _check_narrowing(path: str, arr: np.ndarray, api: str) -> None:
    """Without jax x64, JAX computes 64-bit numpy values in 32 bits: refuse values that
    would wrap or overflow, and warn (once per path) when values are rounded."""
    if jax.config.jax_enable_x64 or arr.dtype.itemsize < 8 or arr.dtype.kind not in "iuf":
        return
    narrow = np.dtype(arr.dtype.kind + "4")
    enable = "jax.config.update('jax_enable_x64', True)"
    if arr.dtype.kind in "iu":
        info = np.iinfo(narrow)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise ValueError(
                f"{api}: {path} is {arr.dtype} with values outside {narrow.name}'s range "
                f"[{info.min}, {info.max}], and jax_enable_x64 is off, so JAX would wrap them "
                f"to {narrow.name}. Enable 64-bit types with {enable}, or keep the values in "
                f"range.")
        return
    with np.errstate(over="ignore"):
        cast = arr.astype(narrow)
    if np.any(np.isinf(cast) & np.isfinite(arr)):
        raise ValueError(
            f"{api}: {path} is float64 with values beyond float32's range, and "
            f"jax_enable_x64 is off, so JAX would make them inf. Enable 64-bit types with "
            f"{enable}, or rescale them.")
    if np.any((cast != arr) & ~np.isnan(arr)):
        warnings.warn(
            f"{api}: {path} is float64, but jax_enable_x64 is off, so the loop computes "
            f"it in float32 and its values are rounded. Enable 64-bit types with {enable}, "
            f"or pass float32 to silence this warning.", stacklevel=5)


def check_parallel_iterations(parallel_iterations):
    if (isinstance(parallel_iterations, bool) or not isinstance(parallel_iterations, int)
            or parallel_iterations <= 0):
        raise ValueError(
            f"while_loop: parallel_iterations must be a positive int; found "
            f"{parallel_iterations!r}. Pass e.g. parallel_iterations=10 (the default).")


def check_swap_memory(swap_memory):
    if not isinstance(swap_memory, bool):
        raise TypeError(
            f"while_loop: swap_memory must be a bool; found {swap_memory!r}.")


def check_unroll(unroll):
    if unroll is not None and (isinstance(unroll, bool) or not isinstance(unroll, int)
                               or unroll <= 0):
        raise ValueError(
            f"while_loop: unroll must be None (automatic) or a positive int; found "
            f"{unroll!r}. Pass e.g. unroll=8, or leave it out.")


def bound_operand(maximum_iterations):
    """`maximum_iterations` -> (int32 bound operand, static bound or None)."""
    if maximum_iterations is None:
        return np.int32(UNBOUNDED), None
    what = ("while_loop: maximum_iterations must be a non-negative integer scalar "
            "(int or int array of shape ()) or None")
    if isinstance(maximum_iterations, bool):
        raise TypeError(f"{what}; found the bool {maximum_iterations!r}. Pass an int.")
    if isinstance(maximum_iterations, numbers.Integral):
        value = operator.index(maximum_iterations)
    elif isinstance(maximum_iterations, np.generic):
        raise TypeError(f"{what}; found the {maximum_iterations.dtype} scalar "
                        f"{maximum_iterations.item()!r}. Pass an int.")
    elif isinstance(maximum_iterations, numbers.Number):
        raise TypeError(f"{what}; found the {type(maximum_iterations).__name__} "
                        f"{maximum_iterations!r}. Pass an int, e.g. math.ceil(...).")
    else:
        try:
            arr = jax.numpy.asarray(maximum_iterations)
        except TypeError:
            raise TypeError(f"{what}; found {type(maximum_iterations).__name__} "
                            f"{maximum_iterations!r}.") from None
        if arr.shape != () or not jax.numpy.issubdtype(arr.dtype, jax.numpy.integer):
            raise TypeError(f"{what}; found an array of shape {arr.shape} and dtype "
                            f"{arr.dtype}. Pass a Python int or an int scalar.")
        if isinstance(arr, jax_core.Tracer):
            return arr.astype(np.int32), None
        value = int(arr)
    if value < 0:
        raise ValueError(f"{what}; found {value}. Pass 0 or more.")
    if value > UNBOUNDED:
        raise ValueError(f"{what} that fits in int32; found {value}. Pass at most "
                         f"{UNBOUNDED}, or None for no bound.")
    return np.int32(value), value


def normalize_shape_invariants(shape_invariants, loop_vars, paths, leaves):
    """Flat list of shape invariants (tuples with None for unknown dims), one per leaf
    of loop_vars (`leaves`, named by `paths`)."""
    if shape_invariants is None:
        return [None] * len(leaves)
    if not isinstance(shape_invariants, (list, tuple)) or len(shape_invariants) != len(
            loop_vars):
        raise ValueError(
            f"while_loop: shape_invariants must have the structure of loop_vars "
            f"(a list of {len(loop_vars)} entries); found {shape_invariants!r}. Give one "
            f"shape per loop-variable leaf, e.g. [(None,), (3, 4)].")
    flat = []
    for k, (var, inv) in enumerate(zip(loop_vars, shape_invariants)):
        var_leaves = jax.tree_util.tree_leaves(var)
        inv_leaves = jax.tree_util.tree_leaves(
            inv, is_leaf=lambda x: _is_shape(x))
        if len(inv_leaves) != len(var_leaves) or not all(map(_is_shape, inv_leaves)):
            raise ValueError(
                f"while_loop: shape_invariants[{k}] must match the structure of "
                f"loop_vars[{k}] with one shape (a tuple of ints or None) per array; "
                f"found {inv!r} for a loop variable with {len(var_leaves)} array(s).")
        flat.extend(tuple(inv_leaf) for inv_leaf in inv_leaves)
    for path, leaf, inv in zip(paths, leaves, flat):
        if len(inv) != leaf.ndim or any(d is not None and d != s
                                        for d, s in zip(inv, leaf.shape)):
            raise ValueError(
                f"while_loop: shape_invariants for {path} is "
                f"{inv}, which is incompatible with its initial shape {leaf.shape}. Give "
                f"the initial shape, with None only where the dimension may vary.")
    return flat


def _is_shape(x):
    if hasattr(x, "as_list"):  # a tf.TensorShape
        return True
    return isinstance(x, (tuple, list)) and all(
        d is None or (isinstance(d, numbers.Integral) and not isinstance(d, bool)) for d in x)


def check_cond_output(out, arg="cond", api="while_loop"):
    leaves = jax.tree_util.tree_leaves(out)
    if len(leaves) != 1 or jax.tree_util.tree_structure(out).num_leaves != 1 or not (
            hasattr(out, "shape") and hasattr(out, "dtype") or isinstance(out, (bool, np.bool_))):
        raise TypeError(
            f"{api}: {arg} must return a boolean scalar; found {type(out).__name__} "
            f"{out!r}. Reduce it with jnp.all/jnp.any or compare a scalar.")
    arr = jax.numpy.asarray(out)
    if arr.shape != () or arr.dtype != np.bool_:
        raise TypeError(
            f"{api}: {arg} must return a boolean scalar; found an array of shape "
            f"{arr.shape} and dtype {arr.dtype}. Reduce it with jnp.all/jnp.any, or "
            f"compare a scalar (e.g. `i < n`).")
    return arr


def check_checkpoints(checkpoints) -> int | None:
    """Validate `while_loop(checkpoints=...)`."""
    if checkpoints is None:
        return None
    if isinstance(checkpoints, bool) or not isinstance(checkpoints, (int, np.integer)):
        raise TypeError(f"while_loop: checkpoints must be a positive int or None; found "
                        f"{type(checkpoints).__name__} {checkpoints!r}. Pass the number of "
                        f"loop-carried states the gradient may keep, e.g. checkpoints=16.")
    if checkpoints < 1:
        raise ValueError(f"while_loop: checkpoints must be a positive int or None; found "
                         f"{checkpoints}. Pass 1 or more (1 keeps only the initial state and "
                         f"recomputes quadratically).")
    if checkpoints > UNBOUNDED:
        raise ValueError(f"while_loop: checkpoints must be at most {UNBOUNDED} (a loop runs "
                         f"at most that many iterations); found {checkpoints}. A few dozen "
                         f"suffice: recomputation grows only logarithmically as they shrink.")
    return int(checkpoints)


def loop_options(maximum_iterations, unroll, checkpoints, gradient_memory):
    """`(bound operand, functional_while keywords)` from the loop options both entry
    points share, each validated."""
    check_unroll(unroll)
    bound, static_bound = bound_operand(maximum_iterations)
    return bound, dict(static_bound=static_bound, unroll=unroll,
                       gradient=gradient_policy(check_checkpoints(checkpoints),
                                                check_gradient_memory(gradient_memory)))


def check_gradient_memory(gradient_memory) -> int | None:
    """Validate `while_loop(gradient_memory=...)`: None or a non-negative int of bytes."""
    if gradient_memory is None:
        return None
    if isinstance(gradient_memory, bool) or not isinstance(gradient_memory,
                                                           (int, np.integer)):
        raise TypeError(f"while_loop: gradient_memory must be a number of bytes (an int) or "
                        f"None; found {type(gradient_memory).__name__} {gradient_memory!r}. "
                        f"Pass e.g. gradient_memory=64 * 2**20 for 64 MiB.")
    if gradient_memory < 0:
        raise ValueError(f"while_loop: gradient_memory must be 0 or more bytes; found "
                         f"{gradient_memory}. Pass 0 to store no step (checkpoints only).")
    if gradient_memory > MAX_GRADIENT_MEMORY:
        raise ValueError(f"while_loop: gradient_memory must be at most {MAX_GRADIENT_MEMORY} "
                         f"bytes (16 GiB); found {gradient_memory}. To store every step of "
                         f"a loop of at most N steps, pass maximum_iterations=N and "
                         f"checkpoints=N (or a gradient_memory that holds N steps' rows).")
    return int(gradient_memory)


MAX_CHECKPOINT_BYTES = 2**34
MAX_GRADIENT_MEMORY = 2**34


def check_checkpoint_memory(gradient, static_bound, leaves, api="while_loop") -> None:
    """Refuse `checkpoints=K` (a `Checkpointed(K)` policy) whose K copies of the loop
    variables (`leaves`) exceed 16 GiB, or above MAX_SCHEDULED_CHECKPOINTS; K at
    least the loop's static bound (maximum_iterations or its known trip count)
    stores every step instead (`stores_every_step`) and is not refused."""
    if not isinstance(gradient, Checkpointed) or stores_every_step(gradient, static_bound):
        return
    checkpoints = gradient.checkpoints
    per_copy = sum(int(np.prod(x.shape, dtype=object)) * np.dtype(x.dtype).itemsize
                   for x in leaves)
    if checkpoints * per_copy > MAX_CHECKPOINT_BYTES:
        largest = max(1, MAX_CHECKPOINT_BYTES // max(per_copy, 1))
        raise ValueError(
            f"{api}: checkpoints={checkpoints} keeps {checkpoints} copies of loop_vars "
            f"({per_copy} bytes each, {checkpoints * per_copy / 2**30:.1f} GiB in all), more "
            f"than the {MAX_CHECKPOINT_BYTES // 2**30} GiB whilst allows: at most "
            f"checkpoints={largest} for these loop_vars. Pass far fewer, e.g. "
            f"checkpoints={max(1, largest // 1024)}: recomputation grows only "
            f"logarithmically as they shrink.")
    if checkpoints > MAX_SCHEDULED_CHECKPOINTS:
        raise ValueError(
            f"{api}: checkpoints must be at most {MAX_SCHEDULED_CHECKPOINTS} where they "
            f"do not cover the loop's maximum_iterations ({static_bound}); found "
            f"{checkpoints}. To store every step, pass maximum_iterations=N and "
            f"checkpoints=N; else a few dozen suffice: recomputation grows only "
            f"logarithmically as they shrink.")

"""`whilst.lax`: `jax.lax.while_loop` and `jax.lax.fori_loop` on one functional While."""
from __future__ import annotations

import functools

import jax
import numpy as np
from jax import lax

from whilst._jax_compat import is_concrete
from whilst.frontend import _checks as checks
from whilst.frontend._flat_loop import arrays_with_room, flat_while_loop
from whilst.frontend._prng_keys import check_output as check_key_output
from whilst.frontend.tensor_array import arrays_for_loop


def while_loop(cond_fun, body_fun, init_val, *, maximum_iterations=None, unroll=None,
               checkpoints=None, gradient_memory=None, name=None):
    """`jax.lax.while_loop` as one functional While, differentiable in reverse mode.

    Semantics, as plain Python::

        val, i = init_val, 0
        while (maximum_iterations is None or i < maximum_iterations) and cond_fun(val):
            val = body_fun(val)
            i += 1
        return val

    One carry pytree, with JAX's types: a weakly typed leaf (a Python scalar)
    takes the dtype body_fun gives it, as in `jax.lax.while_loop`. Reverse mode
    (`jax.grad`) works bounded or not; see `whilst.while_loop` for how
    `gradient_memory` and `checkpoints` choose what it keeps, for `unroll`
    and `name`, and for `whilst.TensorArray`s in the carry.

    Raises:
      TypeError: cond_fun or body_fun not callable, leaves that are not arrays,
        cond_fun not returning a bool scalar, body_fun output of another
        structure or dtype (the pytree path names the leaf).
      ValueError: body_fun output of another shape, bad maximum_iterations,
        unroll or checkpoints, TensorArrays as in `whilst.while_loop`.
    """
    checks.check_callables(cond_fun, body_fun, ("cond_fun", "body_fun"),
                           "one argument (the carry pytree init_val)", "whilst.lax.while_loop")
    return _while(cond_fun, body_fun, init_val, maximum_iterations, unroll, checkpoints,
                  gradient_memory, "while" if name is None else str(name),
                  "whilst.lax.while_loop", cache_key=("while_loop", cond_fun, body_fun))


def fori_loop(lower, upper, body_fun, init_val, *, unroll=None, checkpoints=None,
              gradient_memory=None, name=None):
    """`jax.lax.fori_loop` as one functional While, differentiable in reverse mode.

    Semantics, as plain Python::

        val = init_val
        for i in range(lower, upper):
            val = body_fun(i, val)
        return val

    Bounds follow JAX's rules. They have one dtype, integer or floating (a
    weakly typed int, such as a Python int or a jitted one, takes the other
    bound's integer dtype). Concrete bounds (as JAX tells them: also those
    `jax.jvp` traces) give a loop of `upper - lower` steps
    (rounded toward zero for floats, as `int()` does) with `i` a weakly typed
    int, as in JAX; traced bounds give an unbounded loop whose `i` has the
    bounds' dtype and runs while `i < upper`. Both are differentiable in reverse
    mode (see `while_loop`). `unroll` is as in `while_loop`, or a bool as in
    JAX: True runs every step of a loop with concrete bounds in one emitted
    iteration, False one step per iteration.

    Raises:
      TypeError: body_fun not callable, lower/upper not numeric scalars of one
        dtype, and as `while_loop` for the carry.
      ValueError: unroll=True with traced bounds, and as `while_loop`.
    """
    api = "whilst.lax.fori_loop"
    if not callable(body_fun):
        raise TypeError(
            f"{api}: body_fun must be callable, taking (i, val); found "
            f"{type(body_fun).__name__} {body_fun!r}. Pass a function or a lambda.")
    dtype = _index_dtype(lower, upper, api)
    if is_concrete(lower) and is_concrete(upper):
        # A counted loop, i a weakly typed int from int(lower), as in JAX.
        lower, upper = int(lower), int(upper)
        maximum_iterations = max(upper - lower, 0)
        i0, upper_ = lower, upper
    else:
        maximum_iterations = None
        i0, upper_ = (lax.convert_element_type(x, dtype) for x in (lower, upper))
    unroll = _fori_unroll(unroll, maximum_iterations, api)

    def cond(carry):
        return carry[0] < upper_

    def body(carry):
        i, val = carry
        return i + 1, body_fun(i, val)

    # Concrete bounds are part of the traced loop (cond closes over upper).
    key = ("fori_loop", body_fun, lower, upper) if maximum_iterations is not None else None
    _, out = _while(cond, body, (i0, init_val), maximum_iterations, unroll, checkpoints,
                    gradient_memory, "fori" if name is None else str(name), api, key)
    return out


def _fori_unroll(unroll, maximum_iterations, api):
    """fori_loop's `unroll` as `while_loop` takes it: a bool as JAX reads it."""
    if unroll is False:
        return 1
    if unroll is True:
        if maximum_iterations is None:
            raise ValueError(
                f"{api}: unroll=True unrolls every step, which needs the bounds known at "
                f"trace time; found traced bounds. Pass concrete bounds, or an int unroll.")
        return max(maximum_iterations, 1)
    return unroll


def _index_dtype(lower, upper, api):
    """The dtype of fori_loop's bounds, by JAX's rule."""
    def scalar(arg, x):
        if isinstance(x, bool) or not (isinstance(x, (int, float)) or (
                hasattr(x, "dtype") and np.shape(x) == ()
                and (np.issubdtype(x.dtype, np.integer)
                     or np.issubdtype(x.dtype, np.floating)))):
            raise TypeError(f"{api}: {arg} must be a numeric scalar (a Python int or "
                            f"float, or an int or float array of shape ()); found "
                            f"{type(x).__name__} {x!r}. Pass an int.")
        return jax.typeof(x)

    lo, up = scalar("lower", lower), scalar("upper", upper)
    if lo.dtype == up.dtype:
        return lo.dtype
    signed = all(np.issubdtype(a.dtype, np.signedinteger) for a in (lo, up))
    if signed and lo.weak_type != up.weak_type:
        return up.dtype if lo.weak_type else lo.dtype
    raise TypeError(f"{api}: lower and upper must have the same dtype; found "
                    f"{lo.dtype} and {up.dtype}. Cast one, e.g. upper.astype({lo.dtype}).")


def _while(cond_fun, body_fun, init_val, maximum_iterations, unroll, checkpoints,
           gradient_memory, name, api, cache_key=None):
    """`while_loop(cond_fun, body_fun, init_val, ...)` once fori_loop or while_loop has
    checked its own arguments (`api` names it in errors; `cache_key` identifies the
    loop for eager calls, `_flat_loop`)."""
    bound, options = checks.loop_options(maximum_iterations, unroll, checkpoints,
                                         gradient_memory)
    # A trip count known at trace time bounds the loop as maximum_iterations would:
    # its dynamic arrays get room for that many more elements.
    init_val = arrays_with_room(
        init_val, checks.bound_operand(maximum_iterations)[1],
        lambda init_val, room: arrays_for_loop(init_val, "init_val", room, api, body_fun),
        lambda init_val: _FlatLoop(cond_fun, body_fun, init_val, api).traced,
        bound=bound, name=name, api=api, cond_name="cond_fun")
    loop = _FlatLoop(cond_fun, body_fun, init_val, api)
    outs = flat_while_loop(loop.cond, loop.body, loop.init, loop.check_carry, bound=bound,
                           options=options, name=name, api=api, cond_name="cond_fun",
                           starts=loop.starts, cache_key=cache_key and (*cache_key, loop.tree))
    return jax.tree_util.tree_unflatten(loop.tree, outs)


class _FlatLoop:
    """`cond_fun` and `body_fun` over the flat carry of `init_val` (its TensorArrays
    ready for the loop), as `flat_while_loop` takes them, with its `init`,
    `check_carry` and `starts` (the leaves as given)."""

    def __init__(self, cond_fun, body_fun, init_val, api):
        leaves_with_paths, _ = jax.tree_util.tree_flatten_with_path(init_val)
        # The structure of the plain flatten, which body_fun's output is compared
        # with (a keyed flatten may give custom nodes other aux data, as JAX allows).
        tree = jax.tree_util.tree_structure(init_val)
        paths = [checks.path_name("init_val", p) for p, _ in leaves_with_paths]
        init = [checks.to_array(path, x, api) for path, (_, x) in zip(paths, leaves_with_paths)]

        def flat_cond(carry):
            return cond_fun(jax.tree_util.tree_unflatten(tree, carry))

        def flat_body(carry):
            out = body_fun(jax.tree_util.tree_unflatten(tree, carry))
            return _body_output(out, tree, paths, init, api)

        self.cond, self.body, self.init, self.tree = flat_cond, flat_body, init, tree
        self.check_carry = functools.partial(_check_types, api, paths)
        self.starts = [x for _, x in leaves_with_paths]

    @property
    def traced(self):
        """`(cond, body, leaves, starts)`, as `arrays_with_room` takes them."""
        return self.cond, self.body, self.init, self.starts


def _body_output(out, tree, paths, init, api):
    """body_fun's output `out` as a list of arrays, one per leaf of `init` (of
    structure `tree`): a TypeError where its structure differs or a key leaf does
    not stay a key of the same implementation."""
    out_tree = jax.tree_util.tree_structure(out)
    if out_tree != tree:
        raise TypeError(
            f"{api}: body_fun must return the structure of init_val; found "
            f"{out_tree}, expected {tree}. Return one value per leaf of the carry, "
            f"in the same containers.")
    outs = [checks.to_array(f"body_fun output {path}", x, api)
            for path, x in zip(paths, jax.tree_util.tree_leaves(out))]
    for path, y, x in zip(paths, outs, init):
        check_key_output(api, path, y, x.dtype)
    return outs


def _check_types(api, paths, carry, out_avals):
    """A TypeError where body_fun's output type `out_avals[k]` has another shape or
    dtype than the carry's leaf `carry[k]` (weak types resolved)."""
    for path, x, out in zip(paths, carry, out_avals):
        if (x.shape, x.dtype) != (out.shape, out.dtype):
            raise TypeError(
                f"{api}: body_fun output {path} is {out.str_short()}, but the carry "
                f"{path} is {jax.typeof(x).str_short()}: the carry keeps one shape and "
                f"dtype. Cast it with .astype({x.dtype}) in body_fun, or start "
                f"{path} with the shape and dtype body_fun produces.")

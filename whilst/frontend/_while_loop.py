"""`whilst.while_loop`: TensorFlow's `tf.compat.v1.while_loop` on one functional While."""
from __future__ import annotations

import jax
from jax import lax

from whilst.frontend import _checks as checks
from whilst.frontend._flat_loop import arrays_with_room, flat_while_loop
from whilst.frontend._prng_keys import check_output as check_key_output, is_key
from whilst.frontend.tensor_array import arrays_for_loop


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10,
               back_prop=True, swap_memory=False, name=None, maximum_iterations=None,
               return_same_structure=False, unroll=None, checkpoints=None,
               gradient_memory=None):
    """Repeat `body` while `cond` is true, as one functional While. As plain Python::

        i = 0
        while (maximum_iterations is None or i < maximum_iterations) and cond(*loop_vars):
            loop_vars = body(*loop_vars)
            i += 1
        return loop_vars

    It runs under `jax.jit`, `jax.vmap` (each example stops on its own, keeping its
    values), `jax.jvp`, `jax.grad`/`vjp`/`linearize` and `jax.checkpoint`.

    Args:
      cond: `cond(*loop_vars) -> bool scalar`.
      body: `body(*loop_vars) -> loop_vars`, same structure, shapes and dtypes.
      loop_vars: list or tuple of pytrees (tuples, lists, namedtuples, dicts) of
        arrays, Python/numpy scalars, typed PRNG keys (body returns keys of the
        same implementation for those) or `whilst.TensorArray`s (a dynamic one
        gets room for maximum_iterations more elements, or for the trip count
        where it is known at trace time: `i < 2` from `i = 0`). A Python scalar
        takes the dtype body gives it, as in `jax.lax.while_loop`.
      shape_invariants: shapes, one per array, in the structure of loop_vars;
        `None` marks a dimension that may vary. Shapes still may not change.
      parallel_iterations, swap_memory: a positive int and a bool, accepted for
        TensorFlow compatibility: steps run in order (see `unroll`), and stored
        steps stay in device memory (see `gradient_memory`).
      back_prop: False stops gradients (and tangents) through the loop.
      name: the loop's name in the IR and the StableHLO (`whilst.name`); "while".
      maximum_iterations: None, or a non-negative int or int scalar (may be
        traced). A Python int also caps the stacks of stored steps, and so
        does a trip count known at trace time: cond `i < c` (or `c > i`, or
        `i > c` counting down) for a loop variable `i` that body steps by 1,
        with `i`'s start and `c` Python or numpy scalars or concrete arrays
        (`[0, x]` and `i < 2`: two steps). A loop that runs at most 8 steps
        known so, with a small body and no effects, is differentiated as its
        steps inlined (straight-line code, as `jax.grad` of the loop unrolled
        in Python) where its policy would store every step anyway.
      return_same_structure: False returns the final loop_vars bare for a single
        loop var and as a list for several; True in the structure of loop_vars.
      unroll: loop steps per emitted `stablehlo.while` iteration; None chooses
        from the body's size (up to 64). Larger values run 64 (16 in exports for a
        GPU). Results and gradients are the same.
      checkpoints: None, or K > 0: with K at least a Python-int
        maximum_iterations, reverse mode stores every step (as a budget that
        holds them all); otherwise it keeps K copies of loop_vars (K at most
        `whilst.ir.MAX_SCHEDULED_CHECKPOINTS`, 65534, and 16 GiB of them),
        stored online (Stumm and Walther, then Wang and Moin), and recomputes the
        other steps by binomial (revolve) schedules: `whilst.ir.schedule_cost(n,
        K)` extra body evaluations for n steps (none while n <= K; each step at
        most once more while n < (K+1)(K+2)/2).
      gradient_memory: bytes reverse mode may hold for this loop when checkpoints
        is None, at most 16 GiB; None means 1 MiB
        (`whilst.ir.DEFAULT_GRADIENT_MEMORY`), per example under vmap. If
        maximum_iterations (a Python int) steps fit, all are stored; otherwise
        the first steps that fit are, and the later ones are recomputed from
        copies of loop_vars (as `checkpoints=K`, K <= 64 in at most a quarter of
        the budget; the cost then does not grow with maximum_iterations). Raise
        it for long loops to run at stored speed.

    Raises:
      TypeError: cond or body not callable, loop_vars not a list/tuple, leaves
        that are not arrays, cond not returning a bool scalar, body output of
        another structure or dtype (a key for a number, or the reverse).
      ValueError: empty loop_vars, bad parallel_iterations, maximum_iterations,
        checkpoints, gradient_memory or shape_invariants, body output of another shape,
        a TensorArray of unknown element shape, or a dynamic one in a loop without a
        Python-int maximum_iterations or a trip count known at trace time.
    """
    bound, options = _check_arguments(cond, body, loop_vars, parallel_iterations,
                                      swap_memory, maximum_iterations, unroll, checkpoints,
                                      gradient_memory)
    name = "while" if name is None else str(name)
    # `i < 2` from `i = 0` bounds a loop as maximum_iterations=2 would: its dynamic
    # arrays get room for that many more elements.
    loop_vars = arrays_with_room(
        loop_vars, checks.bound_operand(maximum_iterations)[1],
        lambda loop_vars, room: _with_room(body, loop_vars, room),
        lambda loop_vars: _FlatLoop(cond, body, loop_vars, shape_invariants).traced,
        bound=bound, name=name, api="while_loop", cond_name="cond")
    loop = _FlatLoop(cond, body, loop_vars, shape_invariants)
    outs = flat_while_loop(loop.cond, loop.body, loop.leaves, loop.check_carry, bound=bound,
                           options=options, name=name, api="while_loop", cond_name="cond",
                           starts=loop.starts, back_prop=back_prop,
                           cache_key=("tf_while_loop", cond, body, loop.in_tree))
    return _result(jax.tree_util.tree_unflatten(loop.in_tree, outs), loop_vars,
                   return_same_structure)


def _with_room(body, loop_vars, room):
    """`loop_vars` with their TensorArrays as they enter a loop of at most `room` more
    steps (None: unknown; `arrays_for_loop`)."""
    return arrays_for_loop(loop_vars, "loop_vars", room, "while_loop",
                           lambda lv: _entries(body(*lv), len(lv)))


class _FlatLoop:
    """while_loop's `cond` and `body` over the flat carry of `loop_vars` (their
    TensorArrays ready for the loop), as `flat_while_loop` takes them, with its
    `leaves`, `check_carry` and `starts` (the leaves as given)."""

    def __init__(self, cond, body, loop_vars, shape_invariants):
        leaves_with_paths, in_tree = jax.tree_util.tree_flatten_with_path(list(loop_vars))
        paths = [checks.path_name("loop_vars", p) for p, _ in leaves_with_paths]
        leaves = [checks.to_array(path, x) for path, (_, x) in zip(paths, leaves_with_paths)]
        invariants = checks.normalize_shape_invariants(shape_invariants, loop_vars, paths,
                                                       leaves)

        def flat_cond(carry):
            return cond(*jax.tree_util.tree_unflatten(in_tree, carry))

        def flat_body(carry):
            out = body(*jax.tree_util.tree_unflatten(in_tree, carry))
            return _body_output(out, loop_vars, paths, leaves, carry, invariants)

        def check_carry(carry, out_avals):
            _check_dtypes(paths, carry, out_avals)

        self.cond, self.body, self.check_carry = flat_cond, flat_body, check_carry
        self.leaves, self.in_tree = leaves, in_tree
        self.starts = [x for _, x in leaves_with_paths]

    @property
    def traced(self):
        """`(cond, body, leaves, starts)`, as `arrays_with_room` takes them."""
        return self.cond, self.body, self.leaves, self.starts


def _check_arguments(cond, body, loop_vars, parallel_iterations, swap_memory,
                     maximum_iterations, unroll, checkpoints, gradient_memory):
    """The checks of while_loop's arguments that need no tracing; returns the bound
    operand and `functional_while` keywords (`_checks.loop_options`)."""
    checks.check_loop_vars(loop_vars)
    checks.check_callables(cond, body)
    checks.check_unpacking(cond, body, loop_vars)
    checks.check_parallel_iterations(parallel_iterations)
    checks.check_swap_memory(swap_memory)
    return checks.loop_options(maximum_iterations, unroll, checkpoints, gradient_memory)


def _result(result, loop_vars, return_same_structure):
    """The final loop vars `result` (a list) as while_loop returns them."""
    if return_same_structure:
        return type(loop_vars)(result) if isinstance(loop_vars, tuple) else result
    return result[0] if len(result) == 1 else result


def _body_output(out, loop_vars, paths, leaves, carry, invariants):
    """Body's output `out` as a list of arrays, one per leaf of loop_vars (`leaves`,
    named by `paths`; `carry`: the body's inputs); a TypeError or ValueError where
    its structure, a shape or a key leaf differs. A weakly typed output (a Python
    scalar) whose value fits its leaf's dtype takes that dtype."""
    out = _body_structure(out, loop_vars)
    out_leaves = jax.tree_util.tree_leaves(out)
    return [_body_leaf(path, init, value, x, inv)
            for path, init, value, x, inv in zip(paths, leaves, out_leaves, carry, invariants)]


def _entries(out, n):
    """Body's output as a list of n loop variables (a single one may come back bare)."""
    return list(out) if n > 1 or (isinstance(out, (list, tuple)) and len(out) == 1) else [out]


def _body_structure(out, loop_vars):
    """Body's output as a list with the structure of loop_vars (a single loop
    var may come back bare), or a TypeError that shows where it differs."""
    if len(loop_vars) == 1 and not (isinstance(out, (list, tuple)) and len(out) == 1
                                    and _same_structure(list(out), list(loop_vars))):
        out = [out]
    if isinstance(out, (list, tuple)):
        out = list(out)
    out_tree = jax.tree_util.tree_structure(out)
    expected_tree = jax.tree_util.tree_structure(list(loop_vars))
    if out_tree != expected_tree:
        where, expected, found = "loop_vars", expected_tree, out_tree
        if isinstance(out, list) and len(out) == len(loop_vars):
            where, expected, found = next(
                ((f"loop_vars[{k}]", jax.tree_util.tree_structure(v),
                  jax.tree_util.tree_structure(o))
                 for k, (o, v) in enumerate(zip(out, loop_vars)) if not _same_structure(o, v)),
                (where, expected, found))
        raise TypeError(
            f"while_loop: body must return the structure of loop_vars; for {where} it "
            f"returned {_describe(found)} but the loop variable is {_describe(expected)}. "
            f"Return one value per loop variable, in the same containers (tuple, list, "
            f"namedtuple, dict with the same keys).")
    return out


def _body_leaf(where, init, value, x, inv):
    """Body's output `value` for the leaf `where` that starts as `init` and is `x`
    in this step, checked (`inv`: its shape invariant or None)."""
    value = checks.to_array(f"body output {where}", value)
    check_key_output("while_loop", where, value, init.dtype)
    if value.shape != init.shape:
        fix = ("whilst loops keep fixed shapes: preallocate a buffer of the maximum "
               "size and write into it with .at[i].set(...), carrying the used length"
               " as another loop variable.")
        if inv is not None:
            raise ValueError(
                f"while_loop: {where} changes shape across iterations (initial "
                f"{init.shape}, body returns {value.shape}); shape_invariants allows "
                f"{inv}, which is more general than whilst can keep. {fix}")
        raise ValueError(
            f"while_loop: body output {where} has shape {value.shape}, but the loop "
            f"variable has shape {init.shape}. {fix}")
    if (value.dtype != x.dtype and jax.typeof(value).weak_type
            and not jax.typeof(x).weak_type and not is_key(x)
            and jax.numpy.result_type(value, x.dtype) == x.dtype):
        value = lax.convert_element_type(value, x.dtype)  # a Python scalar fits
    return value


def _check_dtypes(paths, carry, out_avals):
    """A TypeError where body's output type `out_avals[k]` has another dtype than
    the loop variable `carry[k]` (weak types resolved)."""
    for path, x, out in zip(paths, carry, out_avals):
        if out.dtype != x.dtype:
            raise TypeError(
                f"while_loop: body output {path} has dtype {out.dtype}, but the loop "
                f"variable has dtype {x.dtype}. Cast it with .astype({x.dtype}) in body, "
                f"or start the loop variable with the dtype body produces.")


def _same_structure(a, b):
    return jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)


class _Leaf:
    def __repr__(self):
        return "*"


def _describe(tree) -> str:
    """`P(a=*, b=(*, *))` for a pytree structure, `*` marking arrays."""
    return repr(jax.tree_util.tree_unflatten(tree, [_Leaf()] * tree.num_leaves))

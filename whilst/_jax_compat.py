"""The JAX internals whilst builds on, each with why no public hook serves.

Every `jax._src` import of the package is here, and every difference between
the supported jax versions; the rest of whilst imports these names, or public
`jax`, `jax.extend.*` and `jax.interpreters.*`. Each import is checked against
the supported jax 0.10.2 and 0.12.0.1 (and 0.11.2, which pyproject.toml leaves out);
where they differ, the names below keep 0.10.2's calling conventions.
"""
import contextlib

import jax
# The effects of a loop are those of its cond and body: no public join of effect sets.
from jax._src.core import join_effects
# Unrolling needs sizes known at trace time: no public test for symbolic dimensions.
from jax._src.core import is_constant_shape
# fori_loop counts its steps where its bounds are known, as jax.lax.fori_loop does
# (a JVP tracer of a concrete value included): no public test.
from jax._src.core import is_concrete
# The value behind a JVP or linearize tracer of a value (eager `jax.grad` of
# `jax.grad`): reverse mode takes an eager loop's trip count from it (`concrete_batch`).
# No public API.
from jax._src.core import to_concrete_value
# Eager loops keep their traced jaxprs (frontend/_traced_loops.py) only outside every
# transformation: no public test for it.
from jax._src.core import trace_state_clean
# `def_impl` of a primitive with sub-jaxprs: no public "compile and run one primitive".
from jax._src.dispatch import apply_primitive
# List helpers every rule uses to split flat operand lists: not exported by jax.
from jax._src.util import merge_lists, partition_list, split_list
# jvp / linearize / transpose of sub-jaxprs and the linearize-rule registry:
# jax.interpreters.ad exports only the rule tables for jvp and transpose.
from jax._src.interpreters import ad as _ad
from jax._src.interpreters.ad import backward_pass, jvp_jaxpr
# Batching a sub-jaxpr and moving a batch axis: not in jax.interpreters.batching.
from jax._src.interpreters.batching import batch_jaxpr, moveaxis
# Rewriting sub-jaxprs (forwarded outputs, binder order, pruning, closing):
# not in jax.interpreters.partial_eval.
from jax._src.interpreters.partial_eval import (
    _jaxpr_forwarding as jaxpr_forwarding, close_jaxpr, convert_constvars_jaxpr,
    move_binders_to_back, move_binders_to_front, prune_closed_jaxpr_outputs)
# Splitting a loop's cond and body into known and unknown parts (remat's partial
# evaluation, as jax.lax.while_loop's): public only from jax 0.12. (Checked on
# 0.10.2 and 0.12.0.1, same signature; no 0.11.2 install was at hand.)
from jax._src.interpreters.partial_eval import partial_eval_jaxpr_nounits
# Lowering helpers for a sub-jaxpr's constants and stablehlo op builders that
# handle symbolic shapes: not in jax.interpreters.mlir.
from jax._src.interpreters.mlir import (  # noqa: F401
    broadcast_in_dim, dynamic_slice, dynamic_update_slice, ir_consts, reshape, slice_op)
# A carry keeps its weak type when the body returns its dtype strongly typed
# (frontend/_carry_types.py): no public conversion that sets weak_type.
from jax._src.lax.lax import _convert_element_type as convert_element_type
# Debug info for jaxprs traced by rules (required by lu.wrap_init): no public builder.
from jax._src.api_util import debug_info
# Hoisting loop-invariant residuals, shared with lax.scan's partial evaluation:
# no public equivalent.
from jax._src.lax.control_flow.loops import _scan_known_hoisting
# Varying manual axes (`jax.shard_map`'s check_vma types): the invariant->varying
# cast that lax ops insert, and the effect of code naming a mesh axis. jax.lax.pcast
# refuses axes a value already varies over; no public name for the primitive.
from jax._src.core import NamedAxisEffect, pvary, pvary_p
# Exports lower threefry2x32 with its rounds unrolled (`threefry_rounds_unrolled`):
# jax picks the rolled form for CPU, and lowering rules have no public registry.
# (Both names checked in the 0.10.2 and 0.12.0.1 sources; not on 0.11.2.)
from jax._src.interpreters.mlir import _platform_specific_lowerings
# Library primitives that lower as a traced Python function (`mlir.lower_fun`, as
# equinox's do) are evaluated as that function in exports (`lowered_as_function`):
# the generic rule table is internal too, and `lower_fun` keeps its function in
# its closure.
from jax._src.interpreters.mlir import _lowerings
from jax._src.random import threefry2x32 as _threefry2x32
# Run-time errors through loops (`jax.experimental.checkify`): the rule table and
# the interpreter of sub-jaxprs are internal; jax 0.11 gave rules a CheckifyContext
# (the next error code) as first argument, where jax 0.10.2 counts codes globally.
from jax._src import checkify as _checkify
# Which transformations trace a value (a budget shrinks under reverse mode of
# reverse mode; eager reverse mode under jax.vmap takes a loop's trip count from the
# batch behind them): tracers name their transformation only by their class.
from jax._src.interpreters.ad import JVPTracer, LinearizeTracer
from jax._src.interpreters.batching import BatchTracer


__all__ = [
    "NamedAxisEffect", "apply_primitive", "backward_pass", "batch_jaxpr", "broadcast_in_dim",
    "checkify_context", "checkify_jaxpr", "def_error_check", "error_effects",
    "with_error_effects",
    "close_jaxpr", "concrete_batch", "convert_constvars_jaxpr", "convert_element_type",
    "debug_info",
    "def_linearization", "ir_consts", "is_concrete", "is_constant_shape", "jaxpr_forwarding",
    "join_effects", "jvp_jaxpr", "linearization_depth", "linearize_jaxpr",
    "lowered_as_function", "merge_lists",
    "move_binders_to_back", "move_binders_to_front", "moveaxis", "partial_eval_jaxpr_nounits",
    "partition_list", "prune_closed_jaxpr_outputs", "pvary", "pvary_p", "scan_known_hoisting",
    "split_list", "threefry_rounds_unrolled", "trace_state_clean",
]

# jax 0.11 merged ClosedJaxpr into Jaxpr and gave linearization "structured
# residuals" (a pytree of residuals that the tangent side binds as inputs, used
# by scan): linearize rules return and receive them, linearize_jaxpr reports
# residual counts as a FlatTree, and _scan_known_hoisting counts the two kinds.
_STRUCTURED_RESIDUALS = jax.__version_info__ >= (0, 11)


def linearize_jaxpr(jaxpr, nonzeros, instantiate=False, allow_fwds=True, *, is_vjp):
    """jax 0.10.2's `ad.linearize_jaxpr`: `(primal_jaxpr, num_res, nzs_out,
    in_fwd_res, tangent_jaxpr)`. `primal_jaxpr` returns the primal outputs, then
    `num_res` residuals; `in_fwd_res` has one entry per residual binder of
    `tangent_jaxpr` (the input it forwards, or None for the next returned one);
    `tangent_jaxpr` takes the residuals, then the non-zero tangents."""
    primal, out_tree, nzs_out, in_fwd_res, tangent = _ad.linearize_jaxpr(
        jaxpr, nonzeros, instantiate, allow_fwds, is_vjp=is_vjp)
    if not _STRUCTURED_RESIDUALS:
        return primal, out_tree, nzs_out, in_fwd_res, tangent
    _, ures, sres = out_tree.unpack()
    # Structured residuals follow the others out of `primal` and the tangents
    # into `tangent`: bind them as plain residuals instead.
    n_tangents = len(tangent.in_avals) - len(in_fwd_res) - len(sres)
    tangent = move_binders_to_back(
        tangent, [False] * len(in_fwd_res) + [True] * n_tangents + [False] * len(sres))
    return primal, len(ures) + len(sres), nzs_out, [*in_fwd_res, *[None] * len(sres)], tangent


def linearization_depth(x) -> int:
    """How many linearizations (`jax.linearize`, and the `jax.vjp` of `jax.grad`)
    trace `x`, seen through the JVP and batching tracers around them."""
    depth = 0
    while isinstance(x, (LinearizeTracer, JVPTracer, BatchTracer)):
        depth += isinstance(x, LinearizeTracer)
        x = x.val if isinstance(x, BatchTracer) else x.primal
    return depth


def concrete_batch(xs) -> tuple[list, list] | None:
    """`(values, batch_dims)` behind `xs`, seen through the JVP and linearize tracers of
    derivatives and the batching tracers of one `jax.vmap` (`jax.vmap(jax.grad(f))`
    eagerly): each one's concrete value, the whole batch where it is batched (its
    batch axis in `batch_dims`, else None); None where one has no concrete value or
    they are batched by more than one `jax.vmap`."""
    values, dims, batches = [], [], set()
    for x in xs:
        while isinstance(x, (LinearizeTracer, JVPTracer)):
            x = x.primal
        dim = None
        if isinstance(x, BatchTracer):
            if not (x.batch_dim is None or isinstance(x.batch_dim, int)):
                return None
            batches.add(x._trace)
            dim, x = x.batch_dim, x.val
        value = to_concrete_value(x)
        if value is None:
            return None
        values.append(value)
        dims.append(dim)
    return (values, dims) if len(batches) <= 1 else None


def scan_known_hoisting(jaxpr_known, known_consts, num_res):
    """jax 0.10.2's `_scan_known_hoisting(jaxpr_known, known_consts, num_res)`:
    `(jaxpr_known, consts, which_hoisted, hoisted_res)` with the residuals that
    depend on `known_consts` alone computed outside the jaxpr."""
    if _STRUCTURED_RESIDUALS:
        return _scan_known_hoisting(jaxpr_known, known_consts, num_res, 0)
    return _scan_known_hoisting(jaxpr_known, known_consts, num_res)


def def_linearization(primitive, rule):
    """Register `rule(is_vjp, nzs, *primals, **params) -> (primals_out, nzs_out,
    residuals, linearized)`, with `linearized(residuals, *tangents)`, as the
    linearize rule of `primitive` (jax 0.10.2's protocol)."""
    if not _STRUCTURED_RESIDUALS:
        _ad.primitive_linearizations[primitive] = rule
        return

    def with_structured_residuals(is_vjp, nzs, *primals, **params):
        primals_out, nzs_out, residuals, linearized = rule(is_vjp, nzs, *primals, **params)
        return (primals_out, nzs_out, residuals, None,
                lambda residuals, _structured, *tangents: linearized(residuals, *tangents))

    _ad.primitive_linearizations[primitive] = with_structured_residuals


_CHECKIFY_CONTEXT = jax.__version_info__ >= (0, 11)


def checkify_context():
    """A fresh CheckifyContext: one whose codes are thrown away (jax 0.11's way to
    query a jaxpr's error effects); None on jax 0.10.2 (no contexts)."""
    return _checkify.CheckifyContext() if _CHECKIFY_CONTEXT else None


def checkify_jaxpr(ctx, jaxpr, enabled_errors, error, *args):
    """`(error, outs)`: the closed `jaxpr` on `args` with its checks folded into `error`."""
    if _CHECKIFY_CONTEXT:
        return _checkify.checkify_jaxpr(ctx, jaxpr, enabled_errors, error, *args)
    return _checkify.checkify_jaxpr(jaxpr, enabled_errors, error, *args)


def error_effects(error) -> set:
    """The kinds of error (`ErrorEffect`s) a `checkify.Error` has room for."""
    return set(error._pred)


def with_error_effects(error, effects):
    """`error` with room for each of `effects` too (not raised), so that errors of
    the same effects have the same arrays (what loop carries need)."""
    return error._add_placeholder_effects(set(effects))


def def_error_check(primitive, rule):
    """Register `rule(ctx, error, enabled_errors, *operands, **params) -> (error,
    outs)` as the checkify rule of `primitive` (jax 0.11's protocol; `ctx` is None
    on jax 0.10.2)."""
    if _CHECKIFY_CONTEXT:
        _checkify.error_checks[primitive] = rule
    else:
        _checkify.error_checks[primitive] = lambda *a, **p: rule(None, *a, **p)


def lowered_as_function(primitive):
    """`f` where `primitive` lowers for CPU as `mlir.lower_fun(f, ...)` (so that
    `primitive.bind(*xs, **params)` lowers as `f(*xs, **params)` traced, one result
    wrapped in a list unless the primitive has several), else None."""
    entry = _platform_specific_lowerings["cpu"].get(primitive) or _lowerings.get(primitive)
    rule = getattr(entry, "rule", None)
    if getattr(rule, "__qualname__", None) != "lower_fun.<locals>.f_lowered":
        return None
    return dict(zip(rule.__code__.co_freevars,
                    (cell.cell_contents for cell in rule.__closure__)))["fun"]


@contextlib.contextmanager
def threefry_rounds_unrolled():
    """Within the block, jax lowers `threefry2x32` for CPU with its 20 rounds
    unrolled (its rule for other platforms), not in a 5-step loop: IREE 3.13 runs
    a loop's steps from the host, and iree-compile fails ("failed to solve for
    timepoint coverage") on that loop in loop bodies nested two deep, where the
    chunked reverse mode (`whilst.ir.reverse._budget`) puts a random loop body
    (tests/ir/test_prng_keys.py)."""
    # Without its CPU rule, jax uses threefry2x32's default one: unrolled rounds.
    saved = _platform_specific_lowerings["cpu"].pop(_threefry2x32.threefry2x32_p, None)
    try:
        yield
    finally:
        if saved is not None:
            _platform_specific_lowerings["cpu"][_threefry2x32.threefry2x32_p] = saved

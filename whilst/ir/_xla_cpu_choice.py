"""Code with a second form for XLA:CPU under `jax.jit`.

`xla_cpu_choice(xla_cpu, portable, *args)` is `portable(*args)`; lowered for
XLA:CPU it runs `xla_cpu(*args)` instead, which must give the same results. The
forms differ in the control flow each compiler runs cheaply, and in what they
compute inside a branch rather than before it. XLA:CPU compiles a small loop
whole into one function, where a branch or a nested loop costs next to nothing,
and PjRt runs a program on the calling thread only if XLA estimates it under
1000 flops (counting a loop body once), on a worker thread otherwise (tens of
microseconds a call). IREE runs every branch and nested loop from the host, a
round trip each. Exported functions and loop bodies get `portable` in line, and
the choices in it too (`portable_forms`, the first of `export_forms`), so the
other export rewrites see it; other backends lower `portable`.

Differentiated, a choice is its portable form's: the jvp of a choice with
non-zero tangents is that of `portable`, in line (so reverse mode transposes
plain code), and one with only zero tangents (integer code) stays a choice.
Checkified (`jax.experimental.checkify`), a choice is its portable form, in line,
with that form's checks; one whose arguments and results are all integers or
booleans (whilst's checkpoint schedules, whose float arithmetic cannot fail) stays a
choice, unchecked.
"""
from __future__ import annotations

from functools import partial

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, Primitive
from jax.interpreters import ad, batching, mlir

from whilst._jax_compat import (
    NamedAxisEffect, apply_primitive, checkify_jaxpr, def_error_check, jvp_jaxpr, split_list)
from whilst.ir._rewrite import into_control_flow, rewrite_equations
from whilst.ir._tracing import TracedWhenRead, call, trace_closed

xla_cpu_choice_p = Primitive("xla_cpu_choice")
xla_cpu_choice_p.multiple_results = True


def xla_cpu_choice(xla_cpu, portable, *args) -> list:
    """`portable(*args)` (a list of arrays), computed as `xla_cpu(*args)` when
    lowered for XLA:CPU (see the module docstring).

    Raises:
      TypeError: a form has effects (such as `jax.debug.callback`; naming a
        `jax.shard_map` axis is none).
    """
    return bind_choice(choice_forms(xla_cpu, portable, [jax.typeof(x) for x in args]), *args)


def choice_forms(xla_cpu, portable, avals) -> tuple[ClosedJaxpr, TracedWhenRead]:
    """The two forms of `xla_cpu_choice(xla_cpu, portable, *args)` for arguments
    of `avals`, for `bind_choice` (code that makes the same choice many times
    traces it once): the XLA:CPU form traced, the portable one traced when read.
    Nested choices would otherwise trace each level's forms twice per level
    above it. The forms compute the same, effects included: the XLA:CPU form's
    are checked.

    Raises:
      TypeError: the XLA:CPU form has effects (see `xla_cpu_choice`).
    """
    xla_cpu = trace_closed(xla_cpu, avals, "xla_cpu_form")
    effects = {e for e in xla_cpu.effects if not isinstance(e, NamedAxisEffect)}
    if effects:
        raise TypeError(f"xla_cpu_choice: forms without effects only; found {effects}. "
                        f"Call the portable form alone.")
    return xla_cpu, TracedWhenRead.of(portable, avals, "portable_form")


def bind_choice(forms: tuple[ClosedJaxpr, TracedWhenRead], *args) -> list:
    """`xla_cpu_choice` of the forms `choice_forms` traced, on `args` of its avals."""
    xla_cpu, portable = forms
    return xla_cpu_choice_p.bind(*args, xla_cpu=xla_cpu, portable=portable)


def xla_cpu_choice_jvp(primals, tangents, *, xla_cpu, portable):
    nonzeros = [type(t) is not ad.Zero for t in tangents]
    zeros = [ad.Zero(a.to_tangent_aval()) for a in xla_cpu.out_avals]
    if not any(nonzeros):
        return xla_cpu_choice_p.bind(*primals, xla_cpu=xla_cpu, portable=portable), zeros
    jvp, out_nonzeros = jvp_jaxpr(portable.closed, nonzeros, instantiate=False)
    out, nonzero_tangents = split_list(
        call(jvp, *primals, *[t for t, nz in zip(tangents, nonzeros) if nz]),
        [len(zeros)])
    it = iter(nonzero_tangents)
    return out, [next(it) if nz else z for nz, z in zip(out_nonzeros, zeros)]


def xla_cpu_choice_batching(args, dims, *, xla_cpu, portable):
    batched_xla_cpu = jax.vmap(partial(call, xla_cpu), in_axes=tuple(dims))
    batched_portable = jax.vmap(lambda *a: call(portable.closed, *a), in_axes=tuple(dims))
    out = xla_cpu_choice(batched_xla_cpu, batched_portable, *args)
    return out, [0] * len(out)


def xla_cpu_choice_error_check(ctx, error, enabled_errors, *args, xla_cpu, portable):
    if not any(map(_inexact, [*xla_cpu.in_avals, *xla_cpu.out_avals])):
        return error, xla_cpu_choice_p.bind(*args, xla_cpu=xla_cpu, portable=portable)
    return checkify_jaxpr(ctx, portable.closed, enabled_errors, error, *args)


def _inexact(aval) -> bool:
    return np.issubdtype(aval.dtype, np.inexact)


xla_cpu_choice_p.def_impl(lambda *args, **params: apply_primitive(
    xla_cpu_choice_p, *args, **params))
xla_cpu_choice_p.def_abstract_eval(lambda *avals, xla_cpu, portable: xla_cpu.out_avals)
ad.primitive_jvps[xla_cpu_choice_p] = xla_cpu_choice_jvp
batching.primitive_batchers[xla_cpu_choice_p] = xla_cpu_choice_batching
def_error_check(xla_cpu_choice_p, xla_cpu_choice_error_check)
mlir.register_lowering(xla_cpu_choice_p, mlir.lower_fun(
    lambda *args, xla_cpu, portable: call(portable.closed, *args), multiple_results=True))
mlir.register_lowering(xla_cpu_choice_p, mlir.lower_fun(
    lambda *args, xla_cpu, portable: call(xla_cpu, *args), multiple_results=True),
    platform="cpu")


def _forms(jaxpr, form: str):
    """`jaxpr` with every `xla_cpu_choice` replaced by its form named `form`
    ("portable" or "xla_cpu"), also inside cond, scan and while; the same object
    when it has none."""
    def inline(eqn):
        if eqn.primitive is xla_cpu_choice_p:
            return lambda *args, **forms: call(_forms(_closed(forms[form]), form), *args)
        return None
    return rewrite_equations(jaxpr, into_control_flow(inline), f"{form}_forms")


def _closed(form) -> ClosedJaxpr:
    return form.closed if isinstance(form, TracedWhenRead) else form


def portable_forms(jaxpr):
    """`jaxpr` with every `xla_cpu_choice` replaced by its portable form (`_forms`)."""
    return _forms(jaxpr, "portable")


def xla_cpu_forms(jaxpr):
    """`jaxpr` with every `xla_cpu_choice` replaced by its XLA:CPU form (`_forms`)."""
    return _forms(jaxpr, "xla_cpu")

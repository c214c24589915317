"""Integer code with a second form for XLA:CPU under `jax.jit`.

`xla_cpu_choice(xla_cpu, portable, *args)` is `portable(*args)`; lowered for
XLA:CPU it runs `xla_cpu(*args)` instead, which must give the same results. The
forms differ in the control flow each compiler runs cheaply. XLA:CPU compiles a
small loop whole into one function, where a branch or a nested loop costs next
to nothing, and PjRt runs a program on the calling thread only if XLA estimates
it under 1000 flops (counting a loop body once), on a worker thread otherwise
(tens of microseconds a call). IREE runs every branch and nested loop from the
host, a round trip each. Exported functions and loop bodies get `portable` in
line (`portable_forms`, the first of `export_forms`), so the other export
rewrites see it; other backends lower `portable`.

For integer and boolean values only: they have no tangents.
"""
from __future__ import annotations

from functools import partial

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from whilst._jax_compat import apply_primitive
from whilst.ir._rewrite import into_control_flow, rewrite_equations
from whilst.ir._tracing import call, trace_closed

xla_cpu_choice_p = Primitive("xla_cpu_choice")
xla_cpu_choice_p.multiple_results = True
xla_cpu_choice_p.def_impl(lambda *args, **params: apply_primitive(
    xla_cpu_choice_p, *args, **params))
xla_cpu_choice_p.def_abstract_eval(lambda *avals, xla_cpu, portable: portable.out_avals)


def xla_cpu_choice(xla_cpu, portable, *args) -> list:
    """`portable(*args)` (a list of arrays), computed as `xla_cpu(*args)` when
    lowered for XLA:CPU (see the module docstring).

    Raises:
      TypeError: an argument or a result is not of an integer or boolean dtype.
    """
    avals = [jax.typeof(x) for x in args]
    jaxprs = [trace_closed(fn, avals, name) for fn, name in
              [(xla_cpu, "xla_cpu_form"), (portable, "portable_form")]]
    for a in [*avals, *jaxprs[1].out_avals]:
        if not (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
            raise TypeError(f"xla_cpu_choice: integer or boolean values only; found {a}. "
                            f"Compute float values outside it.")
    return xla_cpu_choice_p.bind(*args, xla_cpu=jaxprs[0], portable=jaxprs[1])


def _jvp(primals, tangents, **params):
    out = xla_cpu_choice_p.bind(*primals, **params)
    return out, [ad.Zero(o.aval.to_tangent_aval()) for o in out]


def _batch(args, dims, *, xla_cpu, portable):
    forms = [jax.vmap(partial(call, j), in_axes=tuple(dims)) for j in (xla_cpu, portable)]
    out = xla_cpu_choice(*forms, *args)
    return out, [0] * len(out)


ad.primitive_jvps[xla_cpu_choice_p] = _jvp
batching.primitive_batchers[xla_cpu_choice_p] = _batch
mlir.register_lowering(xla_cpu_choice_p, mlir.lower_fun(
    lambda *args, xla_cpu, portable: call(portable, *args), multiple_results=True))
mlir.register_lowering(xla_cpu_choice_p, mlir.lower_fun(
    lambda *args, xla_cpu, portable: call(xla_cpu, *args), multiple_results=True),
    platform="cpu")


def _inline_portable(eqn):
    if eqn.primitive is xla_cpu_choice_p:
        return lambda *args, xla_cpu, portable: call(portable, *args)
    return None


def portable_forms(jaxpr):
    """`jaxpr` with every `xla_cpu_choice` replaced by its portable form, also inside
    cond, scan and while; the same object when it has none."""
    return rewrite_equations(jaxpr, into_control_flow(_inline_portable), "portable_forms")
